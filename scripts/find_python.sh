#!/usr/bin/env bash
# Prints the path of a Python interpreter of the given minor version (e.g. `find_python.sh 3.10`), or says
# how to get one and fails. Used by `make test-py310`.
#
# Looks at, in order: an override variable (PYTHON_310 for 3.10), `python3.10` on PATH, pyenv's versions
# (newest patch release first), /usr/bin and /usr/local/bin. Each candidate is run, not just found: a pyenv shim for a version
# that is installed but not selected exists on PATH and fails when run.
set -euo pipefail
want="${1:?usage: find_python.sh 3.10}"
override_var="PYTHON_${want//./}"

works() { [[ -n "$1" ]] && "$1" -c "import sys; sys.exit(f'{sys.version_info[0]}.{sys.version_info[1]}' != '$want')" 2>/dev/null; }

candidates=("${!override_var:-}" "$(command -v "python$want" 2>/dev/null || true)")
if command -v pyenv > /dev/null 2>&1; then
    mapfile -t -O "${#candidates[@]}" candidates < <(ls -d "$(pyenv root)/versions/$want".*/bin/python 2>/dev/null | sort -rV)
fi
candidates+=("/usr/bin/python$want" "/usr/local/bin/python$want")

for py in "${candidates[@]}"; do
    if works "$py"; then
        if ! "$py" -c 'import venv, ensurepip' 2>/dev/null; then
            echo "find_python.sh: $py cannot make venvs (Debian/Ubuntu: apt-get install python$want-venv)" >&2
            exit 1
        fi
        echo "$py"
        exit 0
    fi
done
echo "find_python.sh: no Python $want found (tried ${override_var}, python$want on PATH, pyenv, /usr/bin)." >&2
echo "  install one (Ubuntu 22.04: apt-get install python$want python$want-venv; or pyenv install $want)" >&2
echo "  or point ${override_var}=/path/to/python$want at it" >&2
exit 1

#!/usr/bin/env bash
# The one setup step behind `make venv` / `make test` / `make demo` (idempotent).
#
#   1. .venv with Python 3.10-3.12 (PYTHON=... to choose the interpreter)
#   2. pinned ROS 2 wheels, runtime and dev dependencies (requirements/*.txt)
#   3. this package, editable (source tree is imported directly; console scripts in .venv/bin)
#   4. the vision_msgs 4.x copy in interfaces/ built with the ament_cmake/rosidl wheels into
#      install/interfaces, unless vision_msgs is already importable
#   5. a .pth start-up hook so every process of the venv (including children started through
#      sys.executable) finds that prefix: see scripts/venv_hook.py
#
# Which venv and which ROS (the defaults are the ones above):
#   VENV=.venv           where the venv lives (relative to the checkout, or absolute)
#   DISTRO=kilted        ROS wheels of requirements/ros.txt, vision_msgs in install/interfaces
#   DISTRO=jazzy         requirements/ros-jazzy.txt, vision_msgs in install/interfaces-jazzy (rosidl differs)
#   DISTRO=none          no ROS at all (steps 4 and 5 skipped): the core tests' venv, e.g. on Python 3.10
#   IFACE_NAME=...       another install/<name> for vision_msgs (one built for another Python, e.g. the
#                        GPU machine's 3.12: scripts/gpu_node_carry.sh)
# (Not ROS_DISTRO: a sourced ROS install sets that one, and it must not choose the wheels.)
# A venv remembers its distro; asking for another one with the same VENV is refused.
#
# Every step is keyed by a hash of its inputs stored under .venv/.stamps, so a run with nothing to do only
# hashes a few files and runs one import check. Runs are serialised with flock (helpers and make targets may
# start it concurrently).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-.venv}"
[[ "$VENV" == /* ]] || VENV="$ROOT/$VENV"
DISTRO="${DISTRO:-kilted}"
STAMPS="$VENV/.stamps"
IFACE_SRC="$ROOT/interfaces/vision_msgs"
JOBS="${JOBS:-$(nproc 2>/dev/null || echo 2)}"

T0=$SECONDS
say() { printf '[setup_env %s %3ds] %s\n' "${VENV##*/}" "$((SECONDS - T0))" "$*" >&2; }
die() { printf '[setup_env %s] ERROR: %s\n' "${VENV##*/}" "$*" >&2; exit 1; }

case "$DISTRO" in
    kilted) ROS_REQS="$ROOT/requirements/ros.txt"; IFACE_NAME="${IFACE_NAME:-interfaces}" ;;
    jazzy)  ROS_REQS="$ROOT/requirements/ros-jazzy.txt"; IFACE_NAME="${IFACE_NAME:-interfaces-jazzy}" ;;
    none)   ROS_REQS=""; IFACE_NAME="" ;;
    *) die "DISTRO=$DISTRO: expected kilted, jazzy or none" ;;
esac
IFACE_BUILD="$ROOT/build/$IFACE_NAME/vision_msgs"
IFACE_PREFIX="$ROOT/install/$IFACE_NAME"
# one lock for every venv of the checkout (they share build/ and install/); logs per venv
LOG_DIR="$ROOT/build/setup_env/$(basename "$VENV" | sed 's/^\.//')"
mkdir -p "$LOG_DIR"
exec 9>"$ROOT/build/setup_env/lock"
if ! flock -w 1800 9; then die "another setup_env.sh run held build/setup_env/lock for 30 minutes"; fi

# Hash of files (contents and names) plus extra words, for the stamp scheme.
inputs_hash() {
    local extra="$1"; shift
    { printf '%s\n' "$extra"; for f in "$@"; do printf '%s\n' "${f#"$ROOT"/}"; cat "$f"; done; } | sha256sum | cut -d' ' -f1
}
stamp_ok() { [[ -f "$STAMPS/$1" && "$(cat "$STAMPS/$1")" == "$2" ]]; }
stamp_set() { mkdir -p "$STAMPS"; printf '%s\n' "$2" > "$STAMPS/$1"; }

# Run a long command with its output in a log; show the tail when it fails.
logged() {
    local name="$1"; shift
    local log="$LOG_DIR/$name.log"
    if ! "$@" > "$log" 2>&1; then
        tail -n 40 "$log" >&2
        die "$name failed (full log: ${log#"$ROOT"/})"
    fi
}

py_ok() { "$1" -c 'import sys; sys.exit(0 if (3, 10) <= sys.version_info[:2] <= (3, 12) else 1)' 2>/dev/null; }
py_version() { "$1" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")' 2>/dev/null; }

# --- 1. the venv -----------------------------------------------------------------------------------------
# An explicit PYTHON of another minor version than the existing venv's rebuilds it (`make test-py310` must
# never run on a 3.11 venv that happens to sit at .venv-py310).
WANT_VERSION=""
if [[ -n "${PYTHON:-}" ]]; then
    WANT_VERSION="$(py_version "$PYTHON")" || die "PYTHON=$PYTHON does not run"
fi
if [[ -x "$VENV/bin/python" && -n "$WANT_VERSION" && "$(py_version "$VENV/bin/python")" != "$WANT_VERSION" ]]; then
    say "$VENV has Python $(py_version "$VENV/bin/python"), PYTHON asks for $WANT_VERSION: recreating it"
    rm -rf "$VENV"
fi
# venvs from before DISTRO existed were all Kilted ones
if [[ -f "$STAMPS/deps" && ! -f "$STAMPS/distro" ]]; then stamp_set distro kilted; fi
if [[ -x "$VENV/bin/python" && -f "$STAMPS/distro" && "$(cat "$STAMPS/distro")" != "$DISTRO" ]]; then
    die "$VENV was set up with DISTRO=$(cat "$STAMPS/distro"), not $DISTRO: pick another VENV or delete this one"
fi
if [[ ! -x "$VENV/bin/python" ]] || ! py_ok "$VENV/bin/python"; then
    PY=""
    for cand in ${PYTHON:-} python3 python3.12 python3.11 python3.10; do
        if command -v "$cand" > /dev/null 2>&1 && py_ok "$(command -v "$cand")"; then PY="$(command -v "$cand")"; break; fi
    done
    [[ -n "$PY" ]] || die "no Python 3.10-3.12 found (the ROS wheels exist for CPython 3.10, 3.11, 3.12); set PYTHON=..."
    say "creating $VENV with $PY ($("$PY" -c 'import platform; print(platform.python_version())'))"
    rm -rf "$VENV"
    "$PY" -m venv "$VENV" || die "python -m venv failed (Debian/Ubuntu: apt-get install python3-venv)"
fi
stamp_set distro "$DISTRO"
VPY="$VENV/bin/python"
# The venv (the ROS wheels' share/*/package.xml) and our build/install trees must stay invisible to colcon
# when this checkout sits in a workspace's src/ (the robot's workflow); interfaces/ has its own marker.
mkdir -p "$ROOT/install"
for d in "$VENV" "$ROOT/build" "$ROOT/install"; do [[ -e "$d/COLCON_IGNORE" ]] || : > "$d/COLCON_IGNORE"; done
PYVER="$(py_version "$VPY")"
LOG_REL="${LOG_DIR#"$ROOT"/}"

# --- 2. dependencies -------------------------------------------------------------------------------------
REQS=("$ROOT/requirements/runtime.txt" "$ROOT/requirements/dev.txt")
[[ -z "$ROS_REQS" ]] || REQS=("$ROS_REQS" "${REQS[@]}")
h="$(inputs_hash "py$PYVER" "${REQS[@]}")"
if ! stamp_ok deps "$h"; then
    say "installing pinned dependencies: ${REQS[*]#"$ROOT"/} (log: $LOG_REL/pip.log)"
    mapfile -t REQ_ARGS < <(printf -- '-r\n%s\n' "${REQS[@]}")
    logged pip "$VPY" -m pip install --disable-pip-version-check "${REQ_ARGS[@]}"
    stamp_set deps "$h"
fi

# --- 3. the package itself -------------------------------------------------------------------------------
h="$(inputs_hash "py$PYVER" "$ROOT/setup.py" "$ROOT/setup.cfg" "$ROOT/package.xml")"
if ! stamp_ok package "$h" || ! "$VPY" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("dla_infer_node") is None)' 2>/dev/null; then
    say "installing dla_infer_node (editable)"
    # No build isolation: setuptools is pinned in requirements/dev.txt and no network is needed here.
    logged pip-package "$VPY" -m pip install --disable-pip-version-check --no-deps --no-build-isolation -e "$ROOT"
    stamp_set package "$h"
fi

if [[ "$DISTRO" == none ]]; then
    # The core tests' venv: it must stay free of ROS, or a core run could lean on it without anyone noticing.
    if ! "$VPY" -c 'import importlib.util as u, sys; import dla_infer_node, numpy, cv2, onnxruntime, yaml, mcap
sys.exit(u.find_spec("rclpy") is not None)' > "$LOG_DIR/check.log" 2>&1; then
        cat "$LOG_DIR/check.log" >&2
        die "the venv does not import dla_infer_node and its runtime dependencies, or it has rclpy (DISTRO=none)"
    fi
    say "ready: $VPY (Python $PYVER, no ROS)"
    exit 0
fi

# --- 4. vision_msgs --------------------------------------------------------------------------------------
mapfile -t IFACE_FILES < <(find "$IFACE_SRC" -type f \( -name '*.msg' -o -name '*.txt' -o -name '*.xml' -o -name '*.cmake' \) | LC_ALL=C sort)
h="$(inputs_hash "py$PYVER $IFACE_PREFIX" "${IFACE_FILES[@]}" "$ROS_REQS")"
if ! stamp_ok interfaces "$h"; then
    if DLA_INFER_NODE_NO_ENV_HOOK=1 "$VPY" -c 'import vision_msgs.msg' > /dev/null 2>&1; then
        say "vision_msgs is already importable in the venv: not building the copy in interfaces/"
    else
        say "building vision_msgs from interfaces/ into install/$IFACE_NAME (log: $LOG_REL/interfaces-*.log)"
        t_if=$SECONDS
        PY_INCLUDE="$("$VPY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
        NUMPY_INCLUDE="$("$VPY" -c 'import numpy; print(numpy.get_include())')"
        [[ -f "$PY_INCLUDE/Python.h" ]] || die "Python headers missing in $PY_INCLUDE (Debian/Ubuntu: apt-get install python$PYVER-dev)"
        command -v cmake > /dev/null || die "cmake not found (apt-get install cmake)"
        command -v c++ > /dev/null || die "no C++ compiler found (apt-get install g++)"
        GEN=(); command -v ninja > /dev/null && GEN=(-G Ninja)
        rm -rf "$IFACE_BUILD" "$IFACE_PREFIX"
        # The wheels form an ament prefix rooted at the venv; cmake runs the rosidl generators with it.
        export AMENT_PREFIX_PATH="$VENV" CMAKE_PREFIX_PATH="$VENV" PATH="$VENV/bin:$PATH"
        logged interfaces-configure cmake -S "$IFACE_SRC" -B "$IFACE_BUILD" "${GEN[@]}" \
            -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF \
            -DCMAKE_INSTALL_PREFIX="$IFACE_PREFIX" \
            -DPython3_EXECUTABLE="$VPY" \
            -DCMAKE_PROJECT_INCLUDE="$IFACE_SRC/cmake/wheel_fixups.cmake" \
            -DDLA_PY_INCLUDE="$PY_INCLUDE" -DDLA_NUMPY_INCLUDE="$NUMPY_INCLUDE"
        logged interfaces-build cmake --build "$IFACE_BUILD" --parallel "$JOBS"
        logged interfaces-install cmake --install "$IFACE_BUILD"
        say "vision_msgs built in $((SECONDS - t_if)) s"
    fi
    stamp_set interfaces "$h"
fi

# --- 5. start-up hook ------------------------------------------------------------------------------------
SITE="$("$VPY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
if ! cmp -s "$ROOT/scripts/venv_hook.py" "$SITE/_dla_infer_node_env.py"; then
    cp "$ROOT/scripts/venv_hook.py" "$SITE/_dla_infer_node_env.py"
fi
PTH_LINE="import _dla_infer_node_env; _dla_infer_node_env.activate(r'$IFACE_PREFIX')"
if [[ ! -f "$SITE/dla_infer_node_env.pth" || "$(cat "$SITE/dla_infer_node_env.pth")" != "$PTH_LINE" ]]; then
    printf '%s\n' "$PTH_LINE" > "$SITE/dla_infer_node_env.pth"
fi

# --- check -----------------------------------------------------------------------------------------------
if ! "$VPY" -c 'import rclpy, sensor_msgs.msg, diagnostic_msgs.msg, dla_infer_node; from vision_msgs.msg import Detection2DArray' \
        > "$LOG_DIR/check.log" 2>&1; then
    cat "$LOG_DIR/check.log" >&2
    rm -f "$STAMPS/interfaces"   # next run rebuilds instead of trusting a broken prefix
    die "the venv does not import rclpy / vision_msgs / dla_infer_node (see above)"
fi
say "ready: $VPY (Python $PYVER, ROS $DISTRO)"

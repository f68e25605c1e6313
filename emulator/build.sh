#!/usr/bin/env bash
# DLA EMULATOR (test infrastructure): build emulator/build/libcudla.so.1 -- a stand-in for NVIDIA's cuDLA
# on machines without a DLA. Needs a C compiler and the CUDA headers (cuda.h); the CUDA driver
# (libcuda.so.1) is opened at run time with dlopen, so nothing CUDA is linked.
# Usage: emulator/build.sh [OUTDIR]     (CUDA headers from $CUDA_HOME, else next to nvcc, else /usr/local/cuda)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${1:-$here/build}"
mkdir -p "$out"
inc=""
for cand in "${CUDA_HOME:-}" "${CUDA_PATH:-}" "$(dirname "$(dirname "$(command -v nvcc 2>/dev/null || echo /x/x)")")" \
            /usr/local/cuda; do
  if [ -n "$cand" ] && [ -f "$cand/include/cuda.h" ]; then inc="$cand/include"; break; fi
done
if [ -z "$inc" ]; then
  # pip's nvidia-cuda-runtime wheels ship the headers too
  inc="$(python3 - <<'PY' 2>/dev/null || true
import glob, os, site
for d in site.getsitepackages():
    for h in glob.glob(os.path.join(d, "nvidia", "*", "include", "cuda.h")):
        print(os.path.dirname(h)); raise SystemExit
PY
)"
fi
[ -n "$inc" ] || { echo "build.sh: cuda.h not found (set CUDA_HOME)" >&2; exit 2; }
cc="${CC:-$(command -v gcc || command -v cc)}"
"$cc" -std=c11 -D_GNU_SOURCE -O2 -fPIC -shared -Wall -Wextra -fvisibility=hidden \
  -I"$inc" -I"$here" -Wl,-soname,libcudla.so.1 -o "$out/libcudla.so.1" \
  "$here/emu_core.c" "$here/emu_api.c" "$here/emu_submit.c" "$here/emu_format.c" "$here/emu_programs.c" "$here/emu_network.c" \
  "$here/emu_timing.c" \
  -ldl -lpthread -lm
echo "$out/libcudla.so.1"

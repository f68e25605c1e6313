#!/usr/bin/env bash
# `make test-gpu`: the GPU-machine test suite (test_gpu/). Needs an NVIDIA GPU with its driver, python3 >= 3.10
# with cuda-bindings >= 13.3, numpy, opencv-python(-headless), pyyaml, pytest (onnx + onnxruntime for the
# doctor's compare stage), a C compiler and the CUDA headers (cuda.h). It builds the DLA EMULATOR (test
# infrastructure: a stand-in libcudla.so.1, emulator/), points cuda.bindings.cudla at it and runs
# `python3 -m pytest test_gpu -q`. Extra arguments go to pytest. PYTHON overrides the interpreter.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY="${PYTHON:-python3}"

"$PY" - <<'PY'
import sys
from importlib import metadata
if sys.version_info < (3, 10):
    sys.exit(f"test-gpu: Python >= 3.10 needed, this is {sys.version.split()[0]}")
try:
    v = metadata.version("cuda-bindings")
except metadata.PackageNotFoundError:
    sys.exit("test-gpu: cuda-bindings is not installed (pip install 'cuda-bindings>=13.3')")
if tuple(int(x) for x in v.split(".")[:2]) < (13, 3):
    sys.exit(f"test-gpu: cuda-bindings {v} is too old; cuda.bindings.cudla needs >= 13.3")
import cuda.bindings.cudla  # noqa: F401
print(f"test-gpu: Python {sys.version.split()[0]}, cuda-bindings {v}")
PY
command -v nvidia-smi >/dev/null && nvidia-smi -L || echo "test-gpu: nvidia-smi not found (continuing)"

build="$PWD/emulator/build"
bash emulator/build.sh "$build" >/dev/null
export DLA_EMULATOR_LIB="$build/libcudla.so.1"
export DLA_EMULATOR_BUILD="$build"
# The binding resolves libcudla.so.1 through cuda.pathfinder: already-loaded copy first (the tests
# preload the emulator), else site-packages, else dlopen (which honours LD_LIBRARY_PATH, set here
# for child processes such as the doctor).
export LD_LIBRARY_PATH="$build${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
echo "test-gpu: DLA EMULATOR at $DLA_EMULATOR_LIB"
exec "$PY" -m pytest test_gpu -q -p no:cacheprovider "$@"

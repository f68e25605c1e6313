# Sourced by scripts/test_gpu_node.sh and scripts/bench_gpu_node.sh (on the GPU machine, from the repo root):
# a venv over the system Python (which has cuda-bindings, cuda-core, cupy, onnxruntime, opencv) with the ROS 2
# wheels carried from the CPU machine (`make gpu-node-carry` there: .devcarry/whl312 and
# install/interfaces-py312, or DLA_GPU_NODE_WHEELS / DLA_GPU_NODE_IFACE) installed offline, the DLA EMULATOR
# built and loaded for child processes, DDS on loopback. Leaves $VENV set.
WHEELS="${DLA_GPU_NODE_WHEELS:-.devcarry/whl312}"
IFACE="${DLA_GPU_NODE_IFACE:-$PWD/install/interfaces-py312}"
if [[ ! -d "$WHEELS" || ! -d "$IFACE" ]]; then
    echo "${0##*/}: $WHEELS or $IFACE missing: run 'make gpu-node-carry' on the CPU machine and carry both" >&2
    exit 2
fi
PY="${PYTHON:-python3}"
VENV="${DLA_GPU_NODE_VENV:-$PWD/build/gpu-node-venv}"
[[ -x "$VENV/bin/python" ]] || "$PY" -m venv --system-site-packages "$VENV"
# --no-deps: the carried set is complete for the node (its pins are requirements/ros.txt's)
"$VENV/bin/python" -m pip install -q --no-index --no-deps "$WHEELS"/*.whl
SITE="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
# python3 may itself be a venv's (its packages then are not the base interpreter's "system site"): the
# venv sees every directory on python3's own path, after its own site-packages
"$PY" -c 'import os, sys; print("\n".join(p for p in sys.path if p and os.path.isdir(p)))' > "$SITE/outer_python_path.pth"
cp scripts/venv_hook.py "$SITE/_dla_infer_node_env.py"
echo "import _dla_infer_node_env; _dla_infer_node_env.activate(r'$IFACE')" > "$SITE/dla_infer_node_env.pth"

build="$PWD/emulator/build"
bash emulator/build.sh "$build" >/dev/null
export DLA_EMULATOR_LIB="$build/libcudla.so.1" DLA_EMULATOR_BUILD="$build"
export LD_LIBRARY_PATH="$build${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST

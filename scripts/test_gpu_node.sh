#!/usr/bin/env bash
# `make test-gpu-node` (on the GPU machine): the node in a real DDS graph with backend cudla on the DLA
# EMULATOR (test infrastructure). A venv over the system Python (which has cuda-bindings, cuda-core, cupy,
# onnxruntime, opencv) gets the ROS 2 wheels carried from the CPU machine (`make gpu-node-carry` there:
# .devcarry/whl312 and install/interfaces-py312), installed offline; then pytest runs test_gpu_node/.
# DDS stays on loopback (ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/gpu_node_env.sh
"$VENV/bin/python" -c 'import rclpy, vision_msgs.msg, cuda.bindings.cudla; print("test-gpu-node: rclpy + vision_msgs + cudla import")'
exec "$VENV/bin/python" -m pytest test_gpu_node -q -p no:cacheprovider "$@"

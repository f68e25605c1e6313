#!/usr/bin/env bash
# `make bench-gpu-node` (on the GPU machine, with what `make gpu-node-carry` made here): the node over DDS
# with backend cudla on the DLA EMULATOR (test infrastructure), each DLA task held on its core for
# DLA_EMU_TASK_MS (default 3.82 ms: cuDLA-samples' YOLOv5s INT8 on an Orin DLA) with the first task's
# outputs repeated (DLA_EMU_REUSE_OUTPUTS: every frame of these runs is the same scene, so the host's
# ONNX Runtime is not what is timed). Writes, in bench/results/:
#   node_camera_cudla.json  the node's CPU per frame against a bare subscriber, 1080p at 30 Hz
#                           (bench.node --camera, GPU preprocess), and node_camera_gpu_host.json the same
#                           with the zero-cost backend on this machine;
#   cameras.json            1, 2 and 4 cameras on one and two cores, one node process against one per
#                           camera (bench.cameras).
# BENCH_GPU_NODE_SECONDS (default 20) is the node benchmark's stream, BENCH_GPU_CAMERAS_SECONDS (default 8)
# each camera configuration's (0 skips the cameras table), BENCH_GPU_CAMERAS (default 4,2,1) the camera counts.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/gpu_node_env.sh
export DLA_EMU_TASK_MS="${DLA_EMU_TASK_MS:-3.82}" DLA_EMU_REUSE_OUTPUTS=1
art="$("$VENV/bin/python" -m emulator.network_build --out build/bench-gpu-node --precision fp16 --input hwc4 \
       --output chw16 | tail -n 1)"
loadable="${art%.yaml}"
cudla=(--node-wrapper emulator.network_host --node-param backend:=cudla --node-param "loadable_path:=$loadable")
# four cameras on two cores first: the configuration the several-cameras section is about
if [ "${BENCH_GPU_CAMERAS_SECONDS:-8}" != 0 ]; then
  "$VENV/bin/python" -m dla_infer_node.bench.cameras --cameras "${BENCH_GPU_CAMERAS:-4,2,1}" --cores 2,1 \
      --duration "${BENCH_GPU_CAMERAS_SECONDS:-8}" "${cudla[@]}" --out bench/results/cameras.json
fi
"$VENV/bin/python" -m dla_infer_node.bench.node --camera --rounds 1 --duration "${BENCH_GPU_NODE_SECONDS:-20}" \
    "${cudla[@]}" --out bench/results/node_camera_cudla.json
"$VENV/bin/python" -m dla_infer_node.bench.node --camera --rounds 1 --duration "${BENCH_GPU_NODE_SECONDS:-20}" \
    --out bench/results/node_camera_gpu_host.json

"""Four cameras, one node process, two emulated DLA cores on the GPU machine: backend cudla on the DLA
EMULATOR (the shipped network as an emulated fp16 loadable) with the GPU preprocess, ``cameras: [front,
rear, left, right]``, ``dla_cores: [0, 1]``, front and rear pinned to core 1, left and right round robin
(both to core 0, the one with fewer cameras). Four camera processes each publish their own generated
320x240 scene; every camera is answered on its own topic with its own scene's objects, its /diagnostics
status names its core and counts its frames, both emulated cores ran tasks (their shared timeline file),
and SIGINT stops the node with exit code 0. Functional only: throughput is ``make bench-gpu-node``'s.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
from _node_helpers import NodeRunner, RosProbe, end_cameras, start_cameras, statuses_by_name

# scenes the shipped network reads exactly at 320x240 on ONNX Runtime (every object, nothing else; the
# lowest score 0.77), one per camera, none with the same classes
SEEDS = {"front": 5, "rear": 29, "left": 54, "right": 65}
CORES = {"front": 1, "rear": 1, "left": 0, "right": 0}
RATE, SECONDS = 5.0, 8.0
PREPROCESS = "gpu"


def test_four_cameras_one_node_two_emulated_dla_cores(tmp_path: Path, ros_env: dict[str, str],
                                                     emulated_loadable: Path,
                                                     emulated_node: dict[str, Any]) -> None:
    from diagnostic_msgs.msg import DiagnosticArray
    from vision_msgs.msg import Detection2DArray

    from dla_infer_node.core.synth import CLASS_NAMES, generate_scene
    from dla_infer_node.ros.ros_convert import from_detection_array

    # a task holds its core 1 ms, so each core's timeline goes to the file: proof both cores ran tasks
    env = dict(ros_env, DLA_EMU_TASK_MS="1", DLA_EMU_CORE_FILE=str(tmp_path / "dla_cores"))
    runner = NodeRunner(tmp_path, env)
    node = runner.start({"backend": "cudla", "loadable_path": str(emulated_loadable),
                         "preprocess_device": PREPROCESS, "cameras": list(SEEDS), "dla_cores": [0, 1],
                         "front.dla_core": 1, "rear.dla_core": 1, "diagnostics_period": 1.0}, **emulated_node)
    probe = RosProbe("gpu_cameras_probe")
    cams: dict[str, Any] = {}
    try:
        ns = node.namespace
        got = {c: probe.collect(Detection2DArray, f"{ns}/{c}/detections") for c in SEEDS}
        diagnostics = probe.collect(DiagnosticArray, "/diagnostics")
        assert probe.spin_until(lambda: "ready:" in node.output() or node.proc.poll() is not None, 180)
        ready = next((ln for ln in node.output().splitlines() if "ready:" in ln), node.output())
        assert "backend=cudla" in ready and f" preprocess={PREPROCESS} " in ready, ready
        assert "cores=[0, 1]" in ready, ready
        topics = [f"{ns}/{c}/detections" for c in SEEDS]
        assert probe.spin_until(lambda: all(probe.node.count_publishers(t) for t in topics), 30)
        cams = start_cameras(tmp_path, env, ns, dict.fromkeys(SEEDS, RATE), SECONDS, SEEDS)
        probe.spin_until(lambda: all(p.poll() is not None for p in cams.values()), SECONDS + 90)
        probe.spin_until(lambda: False, 3.0)  # frames in hand, and one more diagnostics period
        assert all(p.returncode == 0 for p in cams.values()), [(tmp_path / f"{c}.log").read_text()
                                                               for c in SEEDS]
        published = {c: json.loads((tmp_path / f"{c}.json").read_text())["published"] for c in SEEDS}
        statuses = statuses_by_name(diagnostics)
        per = {c: statuses.get(f"{ns}/dla_infer_node: {c}", {}) for c in SEEDS}
        shown = ("dla_core", "frames_in", "frames_processed", "frames_dropped")
        for c in SEEDS:  # the run's figures (shown with pytest -s, or when the test fails)
            print(f"{c}: published {published[c]}, answered {len(got[c])}, "
                  f"status { {k: per[c].get(k) for k in shown} }")
        for camera, seed in SEEDS.items():
            truth = Counter(CLASS_NAMES[i] for i in generate_scene(seed, 320, 240).class_ids)
            answers = [Counter(from_detection_array(m)[1]) for m in got[camera]]
            assert answers, (camera, node.output())
            assert all(a == truth for a in answers), (camera, truth, answers)  # its own scene, every time
            status = per[camera]
            assert status.get("camera") == camera and status.get("dla_core") == str(CORES[camera]), status
            assert status["backend"] == "cudla" and status["preprocess"] == PREPROCESS, status
            processed, taken = int(status["frames_processed"]), int(status["frames_in"])
            assert 0 < processed <= taken <= published[camera], status
            assert int(status["frames_bad_input"]) == 0 and int(status["frames_failed"]) == 0, status
        ends = np.frombuffer((tmp_path / "dla_cores").read_bytes(), np.uint64)
        assert ends[0] > 0 and ends[1] > 0, "both emulated DLA cores ran tasks"
        assert node.stop(timeout=60.0) == 0, node.output()  # SIGINT: workers joined, backends closed
        assert "[ERROR]" not in node.output() and "task failed" not in node.output(), node.output()
    finally:
        end_cameras(cams)
        probe.close()
        runner.cleanup()

"""Four cameras, one node process, backend cudla on TWO emulated DLA cores (the DLA EMULATOR over its fake
CUDA driver, test/_fake_cudla_env.py; no GPU): one backend per core in one process, each core serving its
two cameras (round robin), every task held on its core (DLA_EMU_TASK_MS, timeline in DLA_EMU_CORE_FILE).
Four camera processes publish a 320x240 scene; each camera is answered on its own topics, its status
names its core, and both cores' timelines were used."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from _fake_cudla_env import cuda_home
from _node_helpers import REPO, NodeRunner, RosProbe, end_cameras, start_cameras, statuses_by_name

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("cuda") is None
                       or importlib.util.find_spec("cuda.bindings") is None, reason="cuda-bindings missing"),
    pytest.mark.skipif(not (shutil.which("gcc") or shutil.which("cc")), reason="no C compiler"),
    pytest.mark.skipif(cuda_home() is None, reason="CUDA headers (cuda.h) missing"),
]
CAMERAS = ("front", "rear", "left", "right")


def test_four_cameras_on_two_emulated_dla_cores(tmp_path: Path, ros_env: dict[str, str]) -> None:
    from diagnostic_msgs.msg import DiagnosticArray
    from vision_msgs.msg import Detection2DArray

    from emulator import cases

    art = cases.oracle_artifact(tmp_path / "art", "linear", "fp16", "linear", "fp16")
    loadable = art.sidecar.with_name(art.sidecar.name.removesuffix(".yaml"))
    cores_file = tmp_path / "dla_cores"
    env = dict(ros_env, PYTHONPATH=f"{REPO}:{REPO / 'test'}", DLA_EMU_TASK_MS="5",
               DLA_EMU_CORE_FILE=str(cores_file))
    runner = NodeRunner(tmp_path, env)
    node = runner.start({"backend": "cudla", "loadable_path": str(loadable), "cameras": list(CAMERAS),
                         "dla_cores": [0, 1], "diagnostics_period": 1.0},
                        module="_fake_cudla_env", extra_args=(str(tmp_path / "emu"), "node"))
    probe = RosProbe("cameras_dla_probe")
    cams: dict[str, subprocess.Popen[bytes]] = {}
    try:
        ns = node.namespace
        got = {c: probe.collect(Detection2DArray, f"{ns}/{c}/detections") for c in CAMERAS}
        diagnostics = probe.collect(DiagnosticArray, "/diagnostics")
        assert probe.spin_until(lambda: "ready:" in node.output() or node.proc.poll() is not None, 120)
        assert "backend=cudla" in node.output() and "cores=[0, 1]" in node.output(), node.output()
        cams = start_cameras(tmp_path, env, ns, dict.fromkeys(CAMERAS, 10.0), 5.0)
        probe.spin_until(lambda: all(p.poll() is not None for p in cams.values()), 90)
        probe.spin_until(lambda: False, 2.5)  # frames in hand, one more diagnostics period
        assert all(p.returncode == 0 for p in cams.values())
        assert all(len(v) > 0 for v in got.values()), ({c: len(v) for c, v in got.items()}, node.output())
        statuses = statuses_by_name(diagnostics)
        per = {c: statuses[f"{ns}/dla_infer_node: {c}"] for c in CAMERAS}
        assert [per[c]["dla_core"] for c in CAMERAS] == ["0", "1", "0", "1"]  # round robin
        assert all(per[c]["backend"] == "cudla" and int(per[c]["frames_processed"]) > 0 for c in CAMERAS)
        ends = np.frombuffer(cores_file.read_bytes(), np.uint64)
        assert ends[0] > 0 and ends[1] > 0, "both DLA cores ran tasks"
        assert node.stop() == 0, node.output()
    finally:
        end_cameras(cams)
        probe.close()
        runner.cleanup()

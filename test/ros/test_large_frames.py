"""Camera-sized frames from another process, best effort (the node's default QoS), over real DDS.

The camera is a separate process (the transport benchmark's publisher role: random rgb8 pixels, keep
last 5, header stamped at publish). The node runs with its default configuration (onnxruntime, the
shipped model, best effort keep last 5). With config/fastdds_large_images.xml in both processes, frames
arrive and are answered; without it, Fast DDS's defaults lose them and /diagnostics must say so.

Every process here is stopped with SIGINT, so Fast DDS removes its shared-memory files itself; the
ledger removes any a killed one left behind (only files our children mapped, and only unmapped ones).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _node_helpers import REPO, NodeProcess, NodeRunner, RosProbe, diag_values

pytest.importorskip("rclpy", reason="rclpy not importable: run the node tests in the project .venv")
pytest.importorskip("vision_msgs.msg", reason="vision_msgs not importable: run `make venv`")

from diagnostic_msgs.msg import DiagnosticArray
from vision_msgs.msg import Detection2DArray

from dla_infer_node.bench.transport_roles import ShmLedger
from dla_infer_node.ros.launch_args import profile_env

PROFILE = REPO / "config" / "fastdds_large_images.xml"
CAMERA_TOPIC = "/bench/image"  # where the benchmark's publisher role sends
HAS_INPUT_MONITOR = importlib.util.find_spec("dla_infer_node.ros.input_liveness") is not None


def _env(with_profile: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("FASTDDS_DEFAULT_PROFILES_FILE", "FASTRTPS_DEFAULT_PROFILES_FILE",
                        "FASTDDS_BUILTIN_TRANSPORTS")}
    if with_profile:  # Fast DDS 3 (Kilted) and Fast DDS 2 (Jazzy) read different names
        env.update(profile_env(str(PROFILE)))
    env["BENCH_RELIABILITY"] = "best_effort"
    return env


class Camera:
    """The publisher process: ``frames`` frames of ``size`` at ``rate`` Hz once the node has matched."""

    def __init__(self, folder: Path, env: dict[str, str], size: str, frames: int, rate: float) -> None:
        self.result = folder / "camera.json"
        self.log = folder / "camera.log"
        cmd = [sys.executable, "-m", "dla_infer_node.bench.transport", "--role", "publisher", "--size", size,
               "--frames", str(frames), "--rate", str(rate), "--result", str(self.result), "--tail", "0.5"]
        with open(self.log, "wb") as fh:
            self.proc = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=fh, stderr=subprocess.STDOUT)

    def published(self) -> int:
        import json

        assert self.proc.wait(60) == 0, self.log.read_text(errors="replace")
        doc = json.loads(self.result.read_text())
        assert doc["matched"], "the camera never saw the node's subscription"
        return int(doc["published"])


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A probe (detections + /diagnostics), runners for the node with or without the profile, a ledger."""
    probe = RosProbe("large_frames_probe")
    ledger = ShmLedger()
    runners: list[NodeRunner] = []
    cameras: list[Camera] = []

    def node(with_profile: bool, **params: Any) -> NodeProcess:
        runner = NodeRunner(tmp_path, _env(with_profile))
        runners.append(runner)
        proc = runner.start(params, remaps={"image": CAMERA_TOPIC})
        ok = probe.spin_until(lambda: probe.node.count_publishers(f"{proc.namespace}/detections") > 0
                              or proc.proc.poll() is not None, 60)
        assert ok and proc.proc.poll() is None, proc.output()
        return proc

    def camera(with_profile: bool, size: str, frames: int, rate: float) -> Camera:
        cameras.append(Camera(tmp_path, _env(with_profile), size, frames, rate))
        return cameras[-1]

    def run_until_done(cam: Camera, pred: Any, timeout: float) -> Any:
        def done() -> Any:
            ledger.note([p.pid for p in (cam.proc, *(n.proc for r in runners for n in r.procs))
                         if p.poll() is None])
            return cam.proc.poll() is not None and pred()
        return probe.spin_until(done, timeout)

    try:
        yield {"probe": probe, "node": node, "camera": camera, "run": run_until_done,
               "diags": probe.collect(DiagnosticArray, "/diagnostics")}
    finally:
        for cam in cameras:
            if cam.proc.poll() is None:
                cam.proc.kill()
                cam.proc.wait(10)
        for runner in runners:
            runner.cleanup()
        probe.close()
        ledger.clean()


def _frames_in(diags: list[Any], fqn: str) -> int:
    return int(diag_values(diags, fqn).get("frames_in", "0"))


def test_vga_at_10hz_with_profile_every_frame_is_answered(rig: dict[str, Any]) -> None:
    node = rig["node"](True)
    dets = rig["probe"].collect(Detection2DArray, f"{node.namespace}/detections")
    # The camera starts once it matches the node, but an answer published before the node's detections
    # publisher has matched this probe's new subscription is lost (CI, 2026-12-07: 19 of 20 on a loaded
    # host). Wait until the node itself reports the subscriber in /diagnostics.
    matched = rig["probe"].spin_until(lambda: int(diag_values(rig["diags"], node.fqn)
                                                  .get("detections_subscribers", "0")) >= 1, 20)
    assert matched, f"the node never saw the probe's detections subscription:\n{node.output()}"
    cam = rig["camera"](True, "VGA", 20, 10.0)
    stamps = lambda: {(d.header.stamp.sec, d.header.stamp.nanosec) for d in dets}  # noqa: E731
    rig["run"](cam, lambda: len(stamps()) >= 20, 40)
    sent = cam.published()
    assert sent == 20
    rig["probe"].spin_until(lambda: _frames_in(rig["diags"], node.fqn) >= sent, 3.0)
    assert len(stamps()) == sent, (f"{len(stamps())} of {sent} VGA frames answered with the profile; "
                                   f"node counters {diag_values(rig['diags'], node.fqn)}; "
                                   f"node output:\n{node.output()}")
    assert all(d.header.frame_id == "cam" for d in dets)


def test_1080p_at_30hz_with_profile_node_receives_nearly_all(rig: dict[str, Any]) -> None:
    """At least 90 %: the delivery rate itself (99 %+) is the transport benchmark's figure
    (bench/results/transport.json). Here the camera, the node's ONNX Runtime inference and the probe share
    two cores, and the node counted 56-57 of 60 frames (CI and here, 2026-12-05). Without the profile
    VGA frames are already lost (the test below), so this bound still tells a working profile apart."""
    node = rig["node"](True)
    cam = rig["camera"](True, "1080p", 60, 30.0)
    # frames_in as the node counts them, read from its /diagnostics (published every second)
    rig["run"](cam, lambda: _frames_in(rig["diags"], node.fqn) >= 60, 40)
    sent = cam.published()
    rig["probe"].spin_until(lambda: _frames_in(rig["diags"], node.fqn) >= sent, 3.0)
    got = _frames_in(rig["diags"], node.fqn)
    assert got >= 0.9 * sent, f"node frames_in {got} of {sent} 1080p frames with the profile"


@pytest.mark.skipif(not HAS_INPUT_MONITOR, reason="needs ros/input_liveness.py")
def test_without_profile_the_loss_shows_in_diagnostics(rig: dict[str, Any]) -> None:
    node = rig["node"](False)
    cam = rig["camera"](False, "VGA", 90, 30.0)

    found = rig["run"](cam, lambda: _loss_warning(rig["diags"], node.fqn), 20)
    cam.published()
    assert found, (f"no WARN with frames_lost in /diagnostics within a few seconds; last values: "
                   f"{diag_values(rig['diags'], node.fqn)}")
    values, message = found
    assert int(values["frames_lost"]) > 0 and float(values["loss_ratio"]) > 0.05, values
    assert "FASTDDS_DEFAULT_PROFILES_FILE" in message, message  # the remedy is named


def _loss_warning(diags: list[Any], fqn: str) -> tuple[dict[str, str], str] | None:
    """The first WARN status of this node that reports lost frames: (values, message)."""
    from diagnostic_msgs.msg import DiagnosticStatus

    for arr in diags:
        for st in arr.status:
            if st.name.startswith(fqn + ":") and st.level == DiagnosticStatus.WARN:
                values = {kv.key: kv.value for kv in st.values}
                if int(values.get("frames_lost", "0")) > 0:
                    return values, st.message
    return None

"""Startup and shutdown of the node process: invalid parameters, backend failures, signals, and the
shared-memory segments a node killed hard leaves (removed by the next node)."""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path

import pytest
import yaml
from _node_helpers import (
    ORACLE_SOURCE,
    REPO,
    NodeRunner,
    RosProbe,
    image_msg,
    oracle_expected,
    write_oracle_model,
)

from dla_infer_node.ros.dds_shm import SHM_DIR, lock_owners, segment_names
from dla_infer_node.ros.launch_args import profile_env

pytest.importorskip("rclpy", reason="rclpy not importable: run the node tests in the project .venv")
pytest.importorskip("vision_msgs.msg", reason="vision_msgs not importable: run `make venv`")


@pytest.fixture(scope="module")
def oracle(module_tmp: Path) -> tuple[Path, Path]:
    return write_oracle_model(module_tmp / "oracle")


def _one_parameter_line(output: str, name: str) -> str:
    assert "Traceback" not in output, output
    lines = [ln for ln in output.splitlines() if "[parameters]" in ln]
    assert len(lines) == 1, output
    assert f"'{name}'" in lines[0] and "allowed" in lines[0]
    return lines[0]


def test_standalone_runtime_mode_is_refused_with_the_reason(node_runner: NodeRunner) -> None:
    rc, out = node_runner.run_to_exit({"runtime_mode": "standalone"})
    assert rc == 2, out
    line = _one_parameter_line(out, "runtime_mode")
    assert "'standalone'" in line and "hybrid" in line
    assert "--buildDLAStandalone" in line and "cuda.bindings.cudla" in line
    assert "does not support the standalone runtime mode" in line


def test_startup_error_names_the_namespaced_node(node_runner: NodeRunner) -> None:
    # two instances from one launch file differ only by namespace: the one line must say which one failed
    proc = node_runner.start({"backend": "tensorrt"}, namespace="/front_cam")
    assert proc.wait_exit(60) == 2, proc.output()
    line = _one_parameter_line(proc.output(), "backend")
    assert "[front_cam.dla_infer_node]" in line, line


@pytest.mark.parametrize("name,value,allowed", [
    ("backend", "tensorrt", "one of 'onnxruntime', 'cudla'"),
    ("dla_core", 3, "an integer in [0, 1]"),
    ("confidence_threshold", 1.5, "a number in [0.0, 1.0]"),
    ("input_transport", "h264", "one of 'raw', 'compressed'"),
    ("qos_reliability", "sometimes", "one of 'best_effort', 'reliable'"),
    ("model_path", "/nonexistent/model.onnx", "an existing file"),
])
def test_invalid_startup_parameter_is_one_line(node_runner: NodeRunner, name: str, value: object,
                                               allowed: str) -> None:
    rc, out = node_runner.run_to_exit({name: value})
    assert rc == 2, out
    line = _one_parameter_line(out, name)
    assert repr(value) in line and allowed in line


def test_cudla_without_libcudla_fails_cleanly_at_a_named_stage(node_runner: NodeRunner, module_tmp: Path,
                                                               oracle: tuple[Path, Path]) -> None:
    # a well-formed artifact (sidecar valid, loadable bytes present), so startup gets as far as the
    # runtime library, which this machine does not have
    loadable = module_tmp / "oracle.loadable"
    loadable.write_bytes(b"\x00" * 64)
    sidecar = module_tmp / "oracle.loadable.yaml"
    sidecar.write_text(yaml.safe_dump({
        "artifact_version": 1, "metadata": str(oracle[1]),
        "tensors": {
            "inputs": [{"name": "images", "format": "hwc4", "dtype": "fp16", "shape": [1, 3, 64, 64]}],
            "outputs": [{"name": "head0", "format": "linear", "dtype": "fp16", "shape": [1, 7, 2, 2]}]}}))
    rc, out = node_runner.run_to_exit({"backend": "cudla", "loadable_path": str(loadable),
                                       "metadata_path": str(oracle[1])})
    assert rc == 1, out
    assert "Traceback" not in out, out
    m = re.search(r"startup failed: \[(\w+)\]", out)
    assert m, out
    assert m.group(1) == "runtime_library", out


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_stops_cleanly_with_exit_0(node_runner: NodeRunner, oracle: tuple[Path, Path],
                                          sig: signal.Signals) -> None:
    from vision_msgs.msg import LabelInfo

    node = node_runner.start({"model_path": str(oracle[0])})
    probe = RosProbe("startup_probe")
    try:
        labels = probe.collect(LabelInfo, f"{node.namespace}/label_info",
                               probe.qos(transient_local=True, depth=1))
        assert probe.spin_until(lambda: labels or node.proc.poll() is not None, 60) and labels, node.output()
    finally:
        probe.close()
    rc = node.stop(sig)
    out = node.output()
    assert rc == 0, out
    assert "stopped: worker joined, backend closed" in out and "Traceback" not in out


def test_events_executor_serves_frames_or_is_refused(node_runner: NodeRunner,
                                                     oracle: tuple[Path, Path]) -> None:
    """executor:=events: on a Kilted+ rclpy the node answers frames and stops with 0; elsewhere one line."""
    import numpy as np

    from dla_infer_node.ros.node import has_events_executor

    params = {"model_path": str(oracle[0]), "executor": "events", "qos_reliability": "reliable"}
    if not has_events_executor():
        rc, out = node_runner.run_to_exit(params)
        assert rc == 2, out
        assert "Kilted" in _one_parameter_line(out, "executor")
        return
    from sensor_msgs.msg import Image
    from vision_msgs.msg import Detection2DArray

    node = node_runner.start(params)
    probe = RosProbe("events_probe")
    try:
        pub = probe.node.create_publisher(Image, f"{node.namespace}/image", probe.qos(depth=1))
        dets = probe.collect(Detection2DArray, f"{node.namespace}/detections")
        frame = np.random.default_rng(7).integers(0, 256, (ORACLE_SOURCE, ORACLE_SOURCE, 3), dtype=np.uint8)
        msg = image_msg(frame, "rgb8", 4242)
        got = probe.spin_until(lambda: dets or node.proc.poll() is not None, 90,
                               every=lambda: pub.publish(msg), period=5.0)
        assert got and dets, node.output()
        names = [d.results[0].hypothesis.class_id for d in dets[0].detections]
        assert dets[0].header.stamp.sec == 4242
        assert names == [name for name, score, _ in oracle_expected() if score >= 0.25], names
    finally:
        probe.close()
    rc = node.stop(signal.SIGINT)
    assert rc == 0, node.output()
    assert "stopped: worker joined, backend closed" in node.output()


def test_events_executor_refused_where_rclpy_lacks_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from dla_infer_node.core.errors import ParameterError
    from dla_infer_node.ros.node import executor_factory

    monkeypatch.setitem(sys.modules, "rclpy.experimental", None)  # as on Humble/Jazzy: the import fails
    with pytest.raises(ParameterError, match=r"executor.*'events'.*Kilted"):
        executor_factory("events")
    assert executor_factory("single").__name__ == "SingleThreadedExecutor"


def test_the_node_removes_what_a_killed_node_left(tmp_path: Path, ros_env: dict[str, str]) -> None:
    # Fast DDS shared-memory segments of a node killed hard (ros/dds_shm.py): the next node removes them
    model, meta = write_oracle_model(tmp_path / "oracle")
    profile = str(REPO / "config" / "fastdds_large_images.xml")
    env = {**ros_env, **profile_env(profile)}
    runner = NodeRunner(tmp_path, env)
    params = {"model_path": str(model), "metadata_path": str(meta), "debug_image": False}
    try:
        first = runner.start(params)
        deadline = time.monotonic() + 90
        while "ready:" not in first.output() and time.monotonic() < deadline and first.proc.poll() is None:
            time.sleep(0.2)
        assert "ready:" in first.output(), first.output()
        owned = {name for name, pid in lock_owners().items() if pid == first.proc.pid}
        large = {name for name in owned if (SHM_DIR / name).stat().st_size >= 64 << 20}
        assert large, (owned, "the profile's 64 MiB segment")
        first.proc.send_signal(signal.SIGKILL)  # as the OOM killer or a crash in a native library would
        first.proc.wait(10)
        assert set(segment_names()) >= owned  # Fast DDS left them: nothing else will reclaim that RAM
        time.sleep(2.5)  # older than the age under which a lock file may be one being created

        second = runner.start(params)
        deadline = time.monotonic() + 90
        while "removed" not in second.output() and time.monotonic() < deadline and second.proc.poll() is None:
            time.sleep(0.2)
        assert "Fast DDS shared-memory segment(s) of processes that died" in second.output(), second.output()
        assert not owned & set(segment_names()), "the second node did not remove the first one's segments"
        assert second.stop() == 0, second.output()
    finally:
        runner.cleanup()

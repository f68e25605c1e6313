"""The managed (lifecycle) node as its own process, driven over DDS with lifecycle_msgs services.

Checks what each state means on the wire: unconfigured and inactive take no frames and publish no
detections (no subscription exists, frames sent anyway go nowhere), active answers every frame, and
deactivate -> activate resumes on the same loaded backend; cleanup and shutdown release it, and the
process still exits 0 on SIGINT. A bad parameter fails configure (the node stays unconfigured), and can be
set right and configure retried; any other configure failure is one log line too.
"""

from __future__ import annotations

import itertools
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy", reason="rclpy is not importable (run the tests in the project .venv)")

from _node_helpers import (  # noqa: E402
    ORACLE_SOURCE,
    REPO,
    NodeProcess,
    NodeRunner,
    RosProbe,
    image_msg,
    write_oracle_model,
)
from lifecycle_msgs.msg import State, Transition  # noqa: E402
from lifecycle_msgs.srv import ChangeState, GetState  # noqa: E402
from sensor_msgs.msg import Image  # noqa: E402
from vision_msgs.msg import Detection2DArray  # noqa: E402

MODULE = "dla_infer_node.ros.lifecycle_node"
STAMPS = itertools.count(5000)
FRAME = np.random.default_rng(3).integers(0, 256, (ORACLE_SOURCE, ORACLE_SOURCE, 3), dtype=np.uint8)


class Driver:
    """The test side: lifecycle services, a frame publisher and a detections collector."""

    def __init__(self, node: NodeProcess, probe: RosProbe) -> None:
        self.node, self.probe = node, probe
        self.pub = probe.node.create_publisher(Image, f"{node.namespace}/image", probe.qos(depth=1))
        self.got: list[Any] = probe.collect(Detection2DArray, f"{node.namespace}/detections")

    def state(self) -> int:
        reply = self.probe.call(GetState, f"{self.node.fqn}/get_state", GetState.Request())
        return int(reply.current_state.id)

    def change(self, transition: int) -> bool:
        req = ChangeState.Request()
        req.transition.id = transition
        return bool(self.probe.call(ChangeState, f"{self.node.fqn}/change_state", req, timeout=60).success)

    def input_subscribers(self) -> int:
        return int(self.probe.node.count_subscribers(f"{self.node.namespace}/image"))

    def answered(self, seconds: float) -> set[int]:
        """Publish a frame every 0.1 s for ``seconds``; the stamps of the frames answered meanwhile."""
        sent: set[int] = set()

        def send() -> None:
            sec = next(STAMPS)
            sent.add(sec)
            self.pub.publish(image_msg(FRAME, "rgb8", sec))

        deadline = time.monotonic() + seconds
        self.probe.spin_until(lambda: time.monotonic() > deadline, seconds + 1, every=send, period=0.1)
        return {d.header.stamp.sec for d in self.got} & sent

    def flowing(self, timeout: float = 30.0) -> set[int]:
        """Frames are answered (keeps publishing until 3 are, or ``timeout``)."""
        seen: set[int] = set()
        deadline = time.monotonic() + timeout
        while len(seen) < 3 and time.monotonic() < deadline:
            seen |= self.answered(0.5)
        return seen


@pytest.fixture
def driver(tmp_path: Path, ros_env: dict[str, str]) -> Any:
    model, meta = write_oracle_model(tmp_path / "oracle")
    runner = NodeRunner(tmp_path, ros_env)
    node = runner.start({"model_path": str(model), "metadata_path": str(meta), "qos_reliability": "reliable",
                         "diagnostics_period": 0.5}, module=MODULE)
    probe = RosProbe("lifecycle_probe")
    try:
        yield Driver(node, probe)
    finally:
        probe.close()
        runner.cleanup()


def test_transitions_gate_the_flow_of_detections(driver: Driver) -> None:
    d = driver
    assert d.state() == State.PRIMARY_STATE_UNCONFIGURED
    assert d.answered(1.0) == set() and d.input_subscribers() == 0

    assert d.change(Transition.TRANSITION_CONFIGURE), d.node.output()
    assert d.state() == State.PRIMARY_STATE_INACTIVE
    assert "configured: backend=onnxruntime model=oracle" in d.node.output()
    assert d.answered(1.5) == set(), "detections while inactive"
    assert d.input_subscribers() == 0 and d.probe.node.count_publishers(f"{d.node.namespace}/detections") == 0

    assert d.change(Transition.TRANSITION_ACTIVATE), d.node.output()
    assert d.state() == State.PRIMARY_STATE_ACTIVE
    assert len(d.flowing()) >= 3, "no detections while active:\n" + d.node.output()
    assert all(len(arr.detections) == 2 for arr in d.got)  # the oracle model's two boxes

    assert d.change(Transition.TRANSITION_DEACTIVATE)
    assert d.state() == State.PRIMARY_STATE_INACTIVE
    assert d.probe.spin_until(lambda: d.input_subscribers() == 0, 10), "subscription still there"
    assert d.answered(1.5) == set(), "detections after deactivate"

    assert d.change(Transition.TRANSITION_ACTIVATE)  # the loaded backend is reused, not reopened
    assert len(d.flowing()) >= 3, "no detections after deactivate -> activate:\n" + d.node.output()
    assert d.node.output().count("configured: backend=") == 1

    assert d.change(Transition.TRANSITION_DEACTIVATE) and d.change(Transition.TRANSITION_CLEANUP)
    assert d.state() == State.PRIMARY_STATE_UNCONFIGURED
    assert d.probe.spin_until(lambda: "stopped: worker joined, backend closed" in d.node.output(), 10)
    assert d.change(Transition.TRANSITION_CONFIGURE) and d.change(Transition.TRANSITION_ACTIVATE)
    assert len(d.flowing()) >= 3, "no detections after cleanup -> configure -> activate"
    assert d.change(Transition.TRANSITION_ACTIVE_SHUTDOWN)
    assert d.state() == State.PRIMARY_STATE_FINALIZED
    assert d.node.output().count("stopped: worker joined, backend closed") == 2
    assert d.node.stop() == 0, d.node.output()


def test_a_bad_parameter_fails_configure_and_stays_unconfigured(tmp_path: Path,
                                                               ros_env: dict[str, str]) -> None:
    runner = NodeRunner(tmp_path, ros_env)
    node = runner.start({"confidence_threshold": 1.5}, module=MODULE)
    probe = RosProbe("lifecycle_bad_probe")
    try:
        d = Driver(node, probe)
        assert not d.change(Transition.TRANSITION_CONFIGURE)
        assert d.state() == State.PRIMARY_STATE_UNCONFIGURED
        assert "configure failed" in node.output() and "confidence_threshold" in node.output()
        assert node.stop() == 0, node.output()
    finally:
        probe.close()
        runner.cleanup()


def test_a_bad_parameter_is_set_right_and_configure_retried(tmp_path: Path, ros_env: dict[str, str]) -> None:
    """Parameters exist before the first configure: a bad value is fixed with SetParameters (what
    ``ros2 param set`` calls), a configure-time one included, and configure then succeeds."""
    model, meta = write_oracle_model(tmp_path / "oracle")
    runner = NodeRunner(tmp_path, ros_env)
    node = runner.start({"model_path": str(tmp_path / "missing.onnx"), "metadata_path": str(meta),
                         "confidence_threshold": 1.5}, module=MODULE)
    probe = RosProbe("lifecycle_fix_probe")
    try:
        d = Driver(node, probe)
        assert not d.change(Transition.TRANSITION_CONFIGURE)
        assert "confidence_threshold" in node.output()
        assert [r.successful for r in probe.set_parameters(node.fqn, {"confidence_threshold": 0.5})] == [True]
        assert not d.change(Transition.TRANSITION_CONFIGURE)  # the next problem: the model file
        assert "missing.onnx" in node.output()
        assert [r.successful for r in probe.set_parameters(node.fqn, {"model_path": str(model)})] == [True]
        assert d.change(Transition.TRANSITION_CONFIGURE), node.output()
        assert d.state() == State.PRIMARY_STATE_INACTIVE
        # once configured, what configure read is fixed until cleanup; a live value still changes
        refused = probe.set_parameters(node.fqn, {"model_path": str(tmp_path / "other.onnx")})
        assert not refused[0].successful and "cleanup" in refused[0].reason
        assert [r.successful for r in probe.set_parameters(node.fqn, {"confidence_threshold": 0.3})] == [True]
        assert d.change(Transition.TRANSITION_ACTIVATE)
        assert len(d.flowing()) >= 3, "no detections after the fixed configure:\n" + node.output()
        assert node.stop() == 0, node.output()
    finally:
        probe.close()
        runner.cleanup()


@pytest.mark.parametrize("failure", ["labels_not_a_list", "foreign_exception"])
def test_any_configure_failure_is_one_line_and_the_node_stays_unconfigured(
        failure: str, tmp_path: Path, ros_env: dict[str, str]) -> None:
    """A configure that fails, whatever the error's type, is one log line, and the node stays up,
    unconfigured: metadata whose ``labels`` is a number (the project's own metadata error, naming the key),
    and a backend library raising a plain ``RuntimeError`` (``_crash_lifecycle_node``)."""
    env = dict(ros_env)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "test"), env.get("PYTHONPATH", "")])
    runner = NodeRunner(tmp_path, env)
    if failure == "labels_not_a_list":
        shipped = REPO / "models" / "shapes_yolo.meta.yaml"
        meta = tmp_path / "bad_labels.meta.yaml"
        text = shipped.read_text(encoding="utf-8")
        assert "\nlabels: shapes_yolo.labels.txt\n" in text and "\nclasses:\n" in text
        meta.write_text(text.replace("\nlabels: shapes_yolo.labels.txt\n", "\nlabels: 5\n"), encoding="utf-8")
        node = runner.start({"model_path": str(REPO / "models" / "shapes_yolo.onnx"),
                             "metadata_path": str(meta)}, module=MODULE)
        expected = ("labels",)
    else:
        node = runner.start({}, module="_crash_lifecycle_node")
        expected = ("RuntimeError", "injected by the test")
    probe = RosProbe("lifecycle_fail_probe")
    try:
        d = Driver(node, probe)
        assert not d.change(Transition.TRANSITION_CONFIGURE)
        assert d.state() == State.PRIMARY_STATE_UNCONFIGURED
        lines = [line for line in node.output().splitlines() if line.strip()]
        failed = [line for line in lines if "configure failed" in line]
        assert len(failed) == 1 and all(word in failed[0] for word in expected), node.output()
        assert not any("Traceback" in line for line in lines), node.output()
        assert node.stop() == 0, node.output()
    finally:
        probe.close()
        runner.cleanup()

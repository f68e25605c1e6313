"""The node over real DDS with the oracle model: outputs, encodings, bad input, live parameters, overlay.

One node process serves the whole module (startup is the slow part on a small machine); each test
publishes frames with unique stamps and waits for the detections carrying that stamp.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _node_helpers import (
    ORACLE_CLASSES,
    ORACLE_SOURCE,
    NodeProcess,
    NodeRunner,
    RosProbe,
    diag_values,
    image_msg,
    oracle_expected,
    write_oracle_model,
)

pytest.importorskip("rclpy", reason="rclpy not importable: run the node tests in the project .venv")
pytest.importorskip("vision_msgs.msg", reason="vision_msgs not importable: run `make venv`")

from diagnostic_msgs.msg import DiagnosticArray
from sensor_msgs.msg import Image
from vision_msgs.msg import Detection2DArray, LabelInfo

STAMPS = itertools.count(1000)


class Rig:
    def __init__(self, node: NodeProcess, probe: RosProbe) -> None:
        self.node, self.probe = node, probe
        ns = node.namespace
        self.pub = probe.node.create_publisher(Image, f"{ns}/image", probe.qos(depth=1))
        self.dets: list[Any] = probe.collect(Detection2DArray, f"{ns}/detections")
        self.diags: list[Any] = probe.collect(DiagnosticArray, "/diagnostics")
        ok = probe.spin_until(lambda: (self.pub.get_subscription_count() > 0
                                       and probe.node.count_publishers(f"{ns}/detections") > 0)
                              or node.proc.poll() is not None, 90)
        assert ok and node.proc.poll() is None, node.output()

    def send(self, msg: Any, timeout: float = 30.0) -> Any:
        """Publish one frame and return the Detection2DArray with its stamp."""
        sec = msg.header.stamp.sec

        def found() -> Any:
            return next((d for d in self.dets if d.header.stamp.sec == sec), None)

        out = self.probe.spin_until(found, timeout, every=lambda: self.pub.publish(msg), period=5.0)
        assert out is not None, f"no detections for stamp {sec}; node output:\n{self.node.output()}"
        return out

    def counters(self, timeout: float = 10.0, pred: Callable[[dict[str, str]], bool] | None = None,
                 **expect: int) -> dict[str, str]:
        """Latest diagnostics of the node, once every ``expect``ed counter has the given value (and
        ``pred`` holds)."""
        def ok() -> dict[str, str] | None:
            v = diag_values(self.diags, self.node.fqn)
            good = v and all(v.get(k) == str(n) for k, n in expect.items()) and (pred is None or pred(v))
            return v if good else None

        got = self.probe.spin_until(ok, timeout)
        assert got, f"diagnostics never showed {expect}; last: {diag_values(self.diags, self.node.fqn)}"
        return got


@pytest.fixture(scope="module")
def rig(module_tmp: Path, ros_env: dict[str, str]) -> Iterator[Rig]:
    model, meta = write_oracle_model(module_tmp / "oracle")
    runner = NodeRunner(module_tmp, ros_env)
    node = runner.start({"model_path": str(model), "metadata_path": str(meta), "qos_reliability": "reliable",
                         "diagnostics_period": 0.2, "debug_image": True})
    probe = RosProbe("detections_probe")
    try:
        yield Rig(node, probe)
    finally:
        probe.close()
        rc = node.stop()
        runner.cleanup()
    assert rc == 0, node.output()


def scene(encoding: str = "rgb8") -> np.ndarray:
    rng = np.random.default_rng(7)
    rgb = rng.integers(0, 256, (ORACLE_SOURCE, ORACLE_SOURCE, 3), dtype=np.uint8)
    if encoding == "mono8":
        return rgb[:, :, 0].copy()
    order = {"rgb8": [0, 1, 2], "bgr8": [2, 1, 0], "rgba8": [0, 1, 2], "bgra8": [2, 1, 0]}[encoding]
    out = rgb[:, :, order]
    if encoding in ("rgba8", "bgra8"):
        out = np.concatenate([out, np.full((*out.shape[:2], 1), 255, np.uint8)], axis=2)
    return np.ascontiguousarray(out)


def check_oracle(arr: Any, sec: int, frame_id: str, n: int = 2) -> None:
    assert arr.header.stamp.sec == sec and arr.header.stamp.nanosec == 123 and arr.header.frame_id == frame_id
    assert len(arr.detections) == n
    for det, (name, score, box) in zip(arr.detections, oracle_expected()[:n], strict=True):
        assert det.header.stamp.sec == sec and det.header.frame_id == frame_id
        assert det.results[0].hypothesis.class_id == name
        assert det.results[0].hypothesis.score == pytest.approx(score, abs=1e-4)
        b = det.bbox
        assert b.center.position.x == pytest.approx((box[0] + box[2]) / 2, abs=0.01)
        assert b.center.position.y == pytest.approx((box[1] + box[3]) / 2, abs=0.01)
        assert b.size_x == pytest.approx(box[2] - box[0], abs=0.01)
        assert b.size_y == pytest.approx(box[3] - box[1], abs=0.01)


def test_label_info_is_latched(rig: Rig) -> None:
    box = rig.probe.collect(LabelInfo, f"{rig.node.namespace}/label_info",
                            rig.probe.qos(transient_local=True, depth=1))
    assert rig.probe.spin_until(lambda: box, 20), "no LabelInfo (transient local) received"
    info = box[0]
    assert [(c.class_id, c.class_name) for c in info.class_map] == list(enumerate(ORACLE_CLASSES))
    assert info.threshold == pytest.approx(0.25)


@pytest.mark.parametrize("encoding,pad", [("rgb8", 0), ("bgr8", 0), ("rgba8", 0), ("bgra8", 0),
                                          ("mono8", 0), ("rgb8", 13), ("mono8", 3)])
def test_detections_carry_input_header_and_source_pixel_boxes(rig: Rig, encoding: str, pad: int) -> None:
    sec = next(STAMPS)
    arr = rig.send(image_msg(scene(encoding), encoding, sec, frame_id=f"cam_{encoding}", pad=pad))
    check_oracle(arr, sec, f"cam_{encoding}")


BAD_INPUTS = {
    "unknown encoding": lambda sec: _with(image_msg(scene(), "rgb8", sec), encoding="yuv420"),
    "an encoding the node refuses": lambda sec: _with(image_msg(scene(), "rgb8", sec), encoding="nv24"),
    "YUV 4:2:2 of odd width": lambda sec: _with(image_msg(scene(), "rgb8", sec), encoding="uyvy",
                                                width=ORACLE_SOURCE - 1),
    "16-bit encoding": lambda sec: _with(image_msg(scene(), "rgb8", sec), encoding="16UC1"),
    "data shorter than step*height": lambda sec: _with(image_msg(scene(), "rgb8", sec),
                                                       height=ORACLE_SOURCE + 5),
    "step below width*channels": lambda sec: _with(image_msg(scene(), "rgb8", sec),
                                                   step=ORACLE_SOURCE * 2),
    "zero size": lambda sec: _with(image_msg(scene(), "rgb8", sec), height=0, width=0, step=0, data=b""),
    "empty data": lambda sec: _with(image_msg(scene(), "rgb8", sec), data=b""),
}


def _with(msg: Any, **fields: Any) -> Any:
    for k, v in fields.items():
        setattr(msg, k, v)
    return msg


def test_every_bad_input_is_counted_and_survived(rig: Rig) -> None:
    base = int(rig.counters().get("frames_bad_input", "0"))
    for i, make in enumerate(BAD_INPUTS.values(), start=1):
        rig.pub.publish(make(next(STAMPS)))
        rig.counters(frames_bad_input=base + i)  # counted (reliable QoS: it cannot be lost on the way)
        sec = next(STAMPS)
        check_oracle(rig.send(image_msg(scene(), "rgb8", sec)), sec, "cam")  # and still answering
    assert rig.node.proc.poll() is None
    assert "dropped an unusable frame" in rig.node.output()


def test_serialized_frames_outside_plain_cdr(rig: Rig) -> None:
    # the node reads frames raw (cdr_image); a buffer in another CDR encoding goes through rclpy's own
    # deserializer, and bytes that neither can read are counted as bad input, never a crash
    from rclpy.serialization import serialize_message

    sec = next(STAMPS)
    raw = serialize_message(image_msg(scene(), "rgb8", sec, frame_id="cam_xcdr2"))
    assert raw[:2] == b"\x00\x01"
    xcdr2 = b"\x00\x07" + raw[2:]  # PLAIN_CDR2 LE: same bytes for this type (no 8-byte members)

    def found() -> Any:
        return next((d for d in rig.dets if d.header.stamp.sec == sec), None)

    arr = rig.probe.spin_until(found, 30, every=lambda: rig.pub.publish(xcdr2), period=5.0)
    assert arr is not None, rig.node.output()
    check_oracle(arr, sec, "cam_xcdr2")
    base = int(rig.counters().get("frames_bad_input", "0"))
    rig.pub.publish(b"\x12\x34" + raw[2:])  # an encapsulation nobody knows
    rig.counters(frames_bad_input=base + 1)
    rig.pub.publish(raw[: len(raw) // 2])  # plain CDR, cut in the middle of the pixels
    rig.counters(frames_bad_input=base + 2)
    assert rig.node.proc.poll() is None


def _set(rig: Rig, **values: Any) -> list[Any]:
    return rig.probe.set_parameters(rig.node.fqn, values)


def test_live_thresholds_take_effect_and_bad_values_are_rejected(rig: Rig) -> None:
    try:
        (res,) = _set(rig, confidence_threshold=0.7)
        assert res.successful, res.reason
        sec = next(STAMPS)
        check_oracle(rig.send(image_msg(scene(), "rgb8", sec)), sec, "cam", n=1)
        (res,) = _set(rig, confidence_threshold=0.95)
        assert res.successful
        arr = rig.send(image_msg(scene(), "rgb8", next(STAMPS)))
        assert len(arr.detections) == 0  # an empty array is still published for the processed frame
        for bad, why in (({"confidence_threshold": 1.5}, "out of range"),
                         ({"nms_iou_threshold": -0.2}, "out of range"),
                         ({"max_detections": 0}, "out of range"),
                         ({"confidence_threshold": "high"}, "type")):
            (res,) = _set(rig, **bad)
            assert not res.successful and why in res.reason.lower(), (bad, res.reason)
        (res,) = _set(rig, backend="cudla")
        assert not res.successful and "read-only" in res.reason.lower(), res.reason
        sec = next(STAMPS)  # the rejected values changed nothing
        check_oracle(rig.send(image_msg(scene(), "rgb8", sec)), sec, "cam", n=0)
        results = _set(rig, confidence_threshold=0.25, max_detections=1)
        assert all(r.successful for r in results)
        sec = next(STAMPS)
        check_oracle(rig.send(image_msg(scene(), "rgb8", sec)), sec, "cam", n=1)
        (res,) = _set(rig, nms_iou_threshold=0.3)
        assert res.successful
    finally:
        _set(rig, confidence_threshold=0.25, max_detections=100, nms_iou_threshold=0.45)


def test_debug_image_only_while_subscribed(rig: Rig) -> None:
    rig.send(image_msg(scene(), "rgb8", next(STAMPS)))
    before = int(rig.counters()["debug_images"])
    assert before == 0  # nobody subscribed yet: nothing rendered
    ns = rig.node.namespace
    frames = rig.probe.collect(Image, f"{ns}/debug_image", rig.probe.qos(reliable=False, depth=1))
    assert rig.probe.spin_until(lambda: rig.probe.node.count_publishers(f"{ns}/debug_image") > 0, 20)
    rig.probe.spin_until(lambda: False, 1.0)  # let the node see the new subscription
    sec = next(STAMPS)
    got = rig.probe.spin_until(lambda: next((f for f in frames if f.header.stamp.sec == sec), None), 30,
                               every=lambda: rig.pub.publish(image_msg(scene(), "rgb8", sec)), period=3.0)
    assert got is not None, rig.node.output()
    assert (got.encoding, got.width, got.height, got.step) == ("bgr8", ORACLE_SOURCE, ORACLE_SOURCE,
                                                               ORACLE_SOURCE * 3)
    assert got.header.frame_id == "cam"
    img = np.frombuffer(bytes(got.data), np.uint8).reshape(ORACLE_SOURCE, ORACLE_SOURCE, 3)
    src_bgr = scene("bgr8")
    assert not np.array_equal(img, src_bgr)  # boxes drawn
    x1, y1, x2, y2 = (int(v) for v in oracle_expected()[0][2])
    inner = (slice(y1 + 10, y2 - 5), slice(x1 + 10, x2 - 5))  # inside the box, below its label tag
    assert np.array_equal(img[inner], src_bgr[inner])  # the picture itself is untouched
    rig.counters(pred=lambda v: int(v["debug_images"]) > before)
    (res,) = _set(rig, debug_image=False)  # live toggle: no more overlays even with a subscriber
    assert res.successful
    rig.send(image_msg(scene(), "rgb8", next(STAMPS)))
    settled = int(rig.counters()["debug_images"])
    rig.send(image_msg(scene(), "rgb8", next(STAMPS)))
    rig.send(image_msg(scene(), "rgb8", next(STAMPS)))
    assert int(rig.counters(pred=lambda v: int(v["frames_processed"]) > 0)["debug_images"]) <= settled + 1


def test_diagnostics_report_counts_and_latency(rig: Rig) -> None:
    rig.send(image_msg(scene(), "rgb8", next(STAMPS)))
    v = rig.counters()
    for key in ("frames_in", "frames_processed", "frames_dropped", "frames_bad_input", "frames_failed",
                "latency_ms_p50", "latency_ms_p95", "backend"):
        assert key in v, v
    assert int(v["frames_processed"]) >= 1 and v["backend"] == "onnxruntime"
    assert int(v["frames_in"]) >= int(v["frames_processed"]) + int(v["frames_bad_input"])
    assert float(v["latency_ms_p95"]) >= float(v["latency_ms_p50"]) > 0

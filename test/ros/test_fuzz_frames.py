"""Seeded fuzz of the message path: random and mutated serialized Image / CompressedImage bytes go through
the node's frame path (``FrameInference._process``: CDR view or deserialize -> image view or decode ->
detector with real ONNX Runtime), in-process, thousands of them. Nothing may escape as a crash, and every
frame must be counted exactly once: answered or unusable.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
from _node_helpers import compressed_msg, image_msg, write_oracle_model

pytest.importorskip("rclpy", reason="rclpy not importable: run the node tests in the project .venv")

import rclpy.logging
from rclpy.serialization import serialize_message
from sensor_msgs.msg import CompressedImage, Image

from dla_infer_node.backends.onnxruntime import OnnxRuntimeBackend
from dla_infer_node.core.codec_stderr import CODEC_STDERR, write_stderr
from dla_infer_node.core.model_meta import load_metadata
from dla_infer_node.core.pipeline import Detector
from dla_infer_node.ros.inference import FrameInference

N_MESSAGES = 3000


def _mutate(rng: np.random.Generator, data: bytes) -> bytes:
    b = bytearray(data)
    op = int(rng.integers(0, 5))
    if op == 0 and b:  # flip bytes
        for _ in range(int(rng.integers(1, 8))):
            b[int(rng.integers(0, len(b)))] = int(rng.integers(0, 256))
    elif op == 1:  # truncate
        b = b[: int(rng.integers(0, len(b) + 1))]
    elif op == 2:  # append garbage
        b += rng.integers(0, 256, int(rng.integers(1, 64)), dtype=np.uint8).tobytes()
    elif op == 3 and len(b) > 8:  # overwrite a length / size field near the start
        i = int(rng.integers(4, min(len(b) - 4, 64)))
        b[i:i + 4] = int(rng.integers(0, 2**32)).to_bytes(4, "little")
    else:  # pure random bytes
        b = bytearray(rng.integers(0, 256, int(rng.integers(0, 256)), dtype=np.uint8).tobytes())
    return bytes(b)


def _seeds() -> tuple[list[bytes], list[bytes]]:
    rng = np.random.default_rng(1)
    img = rng.integers(0, 256, (24, 32, 3), dtype=np.uint8)
    raw = [serialize_message(image_msg(img, enc, 1)) for enc in ("rgb8", "bgr8")]
    raw.append(serialize_message(image_msg(img[:, :, 0].copy(), "mono8", 2, pad=3)))
    comp = [serialize_message(compressed_msg(cv2.imencode(ext, img)[1].tobytes(), 3, fmt))
            for ext, fmt in ((".jpg", "jpeg"), (".png", "png"))]
    return raw, comp


@pytest.mark.parametrize("compressed", [False, True])
def test_fuzzed_messages_are_counted_never_crash(tmp_path: Path, compressed: bool) -> None:
    model, meta_path = write_oracle_model(tmp_path / "oracle")
    meta = load_metadata(meta_path)
    detector = Detector(OnnxRuntimeBackend(model, meta), meta)
    published: list[Any] = []
    captured: list[str] = []
    CODEC_STDERR.sink = captured.append  # libjpeg/libpng chatter is routed, not printed
    inference = FrameInference(detector, CompressedImage if compressed else Image, compressed,
                               lambda *args: published.append(args), rclpy.logging.get_logger("fuzz"),
                               max_input_pixels=4096 * 4096)
    raw_seeds, comp_seeds = _seeds()
    seeds = comp_seeds if compressed else raw_seeds
    rng = np.random.default_rng(1234 + compressed)
    try:
        for i in range(N_MESSAGES):
            pick = seeds[int(rng.integers(0, len(seeds)))]
            data = seeds[i % len(seeds)] if i % 10 == 0 else _mutate(rng, pick)
            answer = inference._start((data, 0.0))  # what the worker runs per frame; an escape fails the test
            if answer is not None:
                answer.finish()
    finally:
        CODEC_STDERR.sink = write_stderr
        detector.close()
    c = inference.counters()
    assert c["frames_processed"] + c["frames_bad_input"] == N_MESSAGES
    assert c["frames_processed"] == len(published) >= N_MESSAGES // 10  # every pristine seed answered
    assert c["frames_bad_input"] > N_MESSAGES // 4  # the mutations do reach the error paths


def test_fuzzed_non_finite_dfl_logits_never_take_a_detection_slot() -> None:
    """yolov8_raw outputs with NaN / +-Inf sprinkled into the box bins and class logits (a broken model or
    an accelerator fault): the detections equal those of the same outputs with the broken cells removed
    beforehand, every box is finite, and numpy prints no warning."""
    import warnings

    from dla_infer_node.core.decode import make_decoder
    from dla_infer_node.core.model_meta import parse_metadata

    nc, reg_max, strides, size = 3, 16, (8, 16), 64
    outputs = []
    for s in strides:
        outputs += [{"name": f"box{s}", "shape": [1, 4 * reg_max, size // s, size // s]},
                    {"name": f"cls{s}", "shape": [1, nc, size // s, size // s]}]
    meta = parse_metadata({"input": {"name": "images", "width": size, "height": size},
                           "decoder": {"kind": "yolov8_raw", "num_classes": nc, "strides": list(strides)},
                           "outputs": outputs, "classes": ["a", "b", "c"]}, Path("fuzz_v8.meta.yaml"))
    decoder, reference = make_decoder(meta), make_decoder(meta)
    rng = np.random.default_rng(42)
    for _ in range(300):
        tensors = [rng.normal(0, 3, o["shape"]).astype(np.float32) for o in outputs]
        clean = [t.copy() for t in tensors]
        for i in range(0, len(tensors), 2):
            box, cls_clean = tensors[i], clean[i + 1]
            for _ in range(int(rng.integers(0, 6))):
                c, y, x = (int(rng.integers(0, n)) for n in box.shape[1:])
                box[0, c, y, x] = rng.choice([np.nan, np.inf, -np.inf])
            # a cell with a NaN/+Inf bin decodes to a non-finite box; -Inf bins alone are probability 0
            broken = np.isnan(box[0]).any(axis=0) | np.isposinf(box[0]).any(axis=0)
            cls_clean[0][:, broken] = -np.inf  # the same cells, never candidates
            clean[i] = box.copy()
        max_det = int(rng.integers(1, 40))
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            got = decoder(tensors, 0.2, 0.5, max_det)
        want = reference(clean, 0.2, 0.5, max_det)
        assert np.isfinite(got.boxes).all()
        # (the softmax's overflow guard is decided per gathered batch: a NaN in it moves other cells ~1e-6)
        np.testing.assert_allclose(got.boxes, want.boxes, rtol=1e-5, atol=1e-4)
        np.testing.assert_array_equal(got.scores, want.scores)
        np.testing.assert_array_equal(got.class_ids, want.class_ids)
    assert decoder.nonfinite_dropped > 0 and reference.nonfinite_dropped == 0

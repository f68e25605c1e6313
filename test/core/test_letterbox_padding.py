"""Boxes lying wholly in the letterbox padding are dropped before NMS and max_detections, so a frame still
gets max_detections real boxes when the padding is full of high-scored junk (both decoder paths: boxes
decoded up front, and yolov8_raw's lazily decoded boxes)."""

from __future__ import annotations

import numpy as np
import pytest
from _core_fixtures import make_metadata

from dla_infer_node.core.backend import RawOutputs
from dla_infer_node.core.decode import decode_yolov8_raw, in_padding, make_decoder, nms, yolov8_raw_lazy
from dla_infer_node.core.pipeline import Detector
from dla_infer_node.core.preprocess import Letterbox

NET, SRC_W, SRC_H = 64, 64, 32  # a 2:1 frame in a square input: image rows 16..48, padding above and below
STRIDES, REG_MAX, NC, MAX_DET = (8, 16, 32), 16, 2, 5
LB = Letterbox.fit(SRC_W, SRC_H, NET, NET)


class StubBackend:
    """Hands the detector fixed raw tensors, as a backend would after running the network."""

    name = "stub"

    def __init__(self, tensors: list[np.ndarray]) -> None:
        self.tensors = tensors

    def infer(self, image: np.ndarray, encoding: str) -> RawOutputs:
        return RawOutputs(self.tensors, Letterbox.fit(image.shape[1], image.shape[0], NET, NET))

    def close(self) -> None:
        pass


def detect(meta_kind: str, tensors: list[np.ndarray], **meta: object) -> np.ndarray:
    detector = Detector(StubBackend(tensors), make_metadata(meta_kind, num_classes=NC, width=NET, height=NET,
                                                            strides=STRIDES, **meta),  # type: ignore[arg-type]
                        conf_threshold=0.001, iou_threshold=0.5, max_detections=MAX_DET)
    return detector.detect(np.zeros((SRC_H, SRC_W, 3), np.uint8), "rgb8").boxes


def test_letterbox_content_region() -> None:
    assert LB.content == (0.0, 16.0, 64.0, 48.0)
    boxes = np.array([[2, 2, 10, 14], [2, 40, 10, 50], [2, 48, 10, 60], [0, 0, 64, 16]], np.float32)
    assert in_padding(boxes, LB.content).tolist() == [True, False, True, True]


def test_final_output_decoder_fills_max_detections_past_padding_boxes() -> None:
    n = sum((NET // s) ** 2 for s in STRIDES)
    t = np.zeros((1, 4 + NC, n), np.float32)
    # ten padding boxes (rows 0..14 and 50..62), scored above every real one
    for i in range(10):
        cy = 6.0 if i < 5 else 56.0
        t[0, :4, i] = [6 + 12 * (i % 5), cy, 8, 8]
        t[0, 4, i] = 0.9
    # ten real boxes inside the image rows, apart from each other
    for i in range(10):
        t[0, :4, 20 + i] = [6 + 12 * (i % 5), 22.0 if i < 5 else 40.0, 8, 8]
        t[0, 4, 20 + i] = 0.5 - 0.01 * i
    boxes = detect("yolov8", [t])
    assert len(boxes) == MAX_DET  # before: 0 (the five best were padding, dropped after max_det)
    assert np.all(boxes[:, 1] >= 0) and np.all(boxes[:, 3] <= SRC_H)


def _raw_heads(rng: np.random.Generator) -> list[np.ndarray]:
    """Per stride a box tensor (DFL logits: one hot bin per side) and class logits, junk in the padding."""
    out = []
    for s in STRIDES:
        g = NET // s
        box = np.full((1, 4 * REG_MAX, g, g), -10.0, np.float32)
        cls = np.full((1, NC, g, g), -10.0, np.float32)
        for gy in range(g):
            for gx in range(g):
                sides = rng.integers(0, 3, 4)  # l, t, r, b in strides: small boxes around the anchor
                if s == 8 and gy == 6:
                    sides[1] = 4  # reaching up from the lower padding into the image: a real box
                for k, d in enumerate(sides):
                    box[0, k * REG_MAX + d, gy, gx] = 10.0
                anchor_y = (gy + 0.5) * s
                in_image = 16 < anchor_y < 48
                cls[0, gx % NC, gy, gx] = (0.0 if in_image else 6.0) + rng.uniform(-1, 1)
        out += [box, cls]
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_lazy_raw_decoder_drops_padding_boxes_before_nms(seed: int) -> None:
    tensors = _raw_heads(np.random.default_rng(seed))
    outputs = [{"name": f"{k}{s}", "shape": list(t.shape)}
               for s, pair in zip(STRIDES, zip(tensors[::2], tensors[1::2], strict=True), strict=True)
               for k, t in zip(("box", "cls"), pair, strict=True)]
    meta = make_metadata("yolov8_raw", num_classes=NC, width=NET, height=NET, strides=STRIDES,
                         outputs=outputs)
    got = make_decoder(meta)(tensors, 0.001, 0.5, MAX_DET, LB.content)
    # the reference: every box decoded, the padding ones removed, then NMS
    c = decode_yolov8_raw(tensors, STRIDES, REG_MAX, NC, 0.001)
    real = ~in_padding(c.boxes, LB.content)
    keep = nms(c.boxes[real], c.scores[real], c.class_ids[real], 0.5, MAX_DET)
    np.testing.assert_allclose(got.boxes, c.boxes[real][keep], atol=1e-4)  # DFL of a subset: float rounding
    np.testing.assert_array_equal(got.scores, c.scores[real][keep])
    assert len(got) == MAX_DET and not in_padding(got.boxes, LB.content).any()
    # the lazy candidates are exactly the reference's: padding cells whose box reaches into the image stay
    lazy = yolov8_raw_lazy(tensors, STRIDES, REG_MAX, NC, 0.001, LB.content)
    np.testing.assert_allclose(lazy.boxes(), c.boxes[real], atol=1e-4)
    anchor_in_padding = (c.boxes[real][:, 1] + c.boxes[real][:, 3]) / 2 > 48  # reaching up from below
    assert anchor_in_padding.any()
    # through the pipeline: max_det boxes in source pixels (before: the padding junk took the places)
    boxes = detect("yolov8_raw", tensors, outputs=outputs)
    assert len(boxes) == MAX_DET

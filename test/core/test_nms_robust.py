"""NMS and decoder robustness: non-finite candidates, huge coordinates, class separation, output shapes.

The reference is a plain greedy NMS in float64 Python, per class (written from the definition, not the
module), so the blocked numpy implementation is checked against the classic result.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _core_fixtures import make_metadata

from dla_infer_node.core.decode import make_decoder, nms
from dla_infer_node.core.errors import ModelError
from dla_infer_node.core.model_meta import parse_metadata


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    iw = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    ih = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = iw * ih
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def reference_nms(boxes: np.ndarray, scores: np.ndarray, ids: np.ndarray, thr: float, cap: int) -> list[int]:
    order = sorted(range(len(scores)), key=lambda i: (-float(scores[i]), i))
    kept: list[int] = []
    for i in order:
        if len(kept) == cap:
            break
        b64 = boxes[i].astype(np.float64)
        if all(ids[k] != ids[i] or _iou(boxes[k].astype(np.float64), b64) <= thr for k in kept):
            kept.append(i)
    return kept


def test_huge_coordinate_does_not_merge_or_shift_other_classes() -> None:
    # before: the class offset was (max - min + 1) * class_id; a box at 1e9 makes it ~1e9, where float32
    # steps are 64 px, so class 1's two overlapping 10-px boxes collapsed and both survived
    boxes = np.array([[1e9, 1e9, 1e9 + 1e6, 1e9 + 1e6],  # class 0, huge but finite
                      [0, 0, 10, 10], [1, 1, 11, 11],  # class 1: IoU 0.68 -> one survives
                      [0, 0, 10, 10]], np.float32)  # class 2: same place as class 1, must survive
    scores = np.array([0.9, 0.8, 0.7, 0.6], np.float32)
    ids = np.array([0, 1, 1, 2], np.int64)
    keep = nms(boxes, scores, ids, 0.45, 100)
    assert keep.tolist() == [0, 1, 3]
    assert keep.tolist() == reference_nms(boxes, scores, ids, 0.45, 100)


def test_classes_with_identical_boxes_never_suppress_each_other() -> None:
    boxes = np.tile(np.array([[5, 5, 50, 50]], np.float32), (6, 1))
    scores = np.linspace(0.9, 0.4, 6).astype(np.float32)
    ids = np.array([3, 0, 3, 1, 0, 7], np.int64)
    assert nms(boxes, scores, ids, 0.45, 100).tolist() == [0, 1, 3, 5]
    assert nms(boxes, scores, ids, 0.45, 2).tolist() == [0, 1]  # the cap counts across classes


@pytest.mark.parametrize("seed", range(6))
def test_matches_the_classic_greedy_result(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400))
    xy = rng.uniform(-50, 600, (n, 2))
    wh = rng.uniform(0, 120, (n, 2))
    scale = 10.0 ** rng.integers(0, 8)  # coordinates up to 1e9: separation must not depend on them
    boxes = (np.concatenate([xy, xy + wh], axis=1) * scale).astype(np.float32)
    scores = rng.choice(np.linspace(0.05, 1.0, 40), n).astype(np.float32)  # ties included
    ids = rng.integers(0, 5, n).astype(np.int64)
    cap = int(rng.integers(1, 150))
    assert nms(boxes, scores, ids, 0.5, cap).tolist() == reference_nms(boxes, scores, ids, 0.5, cap)


def _yolov5_final(rows: list[list[float]], nc: int = 3) -> np.ndarray:
    return np.asarray(rows, np.float32).reshape(1, len(rows), 5 + nc)


def test_non_finite_candidates_are_dropped_and_counted() -> None:
    meta = make_metadata("yolov5_final", num_classes=3)
    decoder = make_decoder(meta)
    nan, inf = float("nan"), float("inf")
    t = _yolov5_final([
        [20, 20, 10, 10, 0.9, 1, 0, 0],  # class 0
        [21, 21, 10, 10, 0.8, 1, 0, 0],  # class 0, suppressed by the first
        [20, 20, 10, 10, 0.7, 0, 1, 0],  # class 1, same place: kept
        [nan, 20, 10, 10, 0.95, 1, 0, 0],  # before: one NaN made every coordinate NaN (no separation)
        [20, 20, inf, 10, 0.85, 0, 0, 1],
        [20, 20, 10, 10, inf, 0, 0, 1],  # an infinite score
    ])
    dets = decoder([t], 0.25, 0.45, 100)
    assert dets.class_ids.tolist() == [0, 1]
    np.testing.assert_allclose(dets.boxes, [[15, 15, 25, 25], [15, 15, 25, 25]])
    assert decoder.nonfinite_dropped == 3
    decoder([t], 0.25, 0.45, 100)
    assert decoder.nonfinite_dropped == 6


@pytest.mark.parametrize("kind,outputs", [
    ("yolov8", [{"name": "output0", "shape": [1, 4 + 3, 100]}]),
    ("yolov5_final", [{"name": "output0", "shape": [1, 100, 5 + 3]}]),
    ("yolov5_raw", [{"name": f"head{i}", "shape": [1, 3 * (5 + 3), 4, 4]} for i in range(3)]),
])
def test_class_count_that_does_not_fit_the_outputs_fails_at_startup(kind: str, outputs: list) -> None:
    meta = make_metadata(kind, num_classes=2, outputs=outputs)  # outputs carry 3 classes
    with pytest.raises(ModelError) as info:
        make_decoder(meta)
    text = str(info.value)
    assert "\n" not in text and "num_classes=2" in text and "output" in text


def test_exact_raw_heads_fit() -> None:
    outputs = [{"name": f"head{i}", "shape": [1, 21, 4, 4]} for i in range(3)]  # 3*(5+2)
    make_decoder(make_metadata("yolov5_raw", num_classes=2, outputs=outputs))


@pytest.mark.parametrize("method", ["sparse", "blocks"])
def test_identical_huge_boxes_suppress_each_other(method: str) -> None:
    # sides past ~2e19 px: w*h overflowed float32 to inf, the union became inf - inf = NaN, and both stayed
    for side in (3e19, 1e30, 3.4e38):
        boxes = np.array([[0, 0, side, side], [0, 0, side, side], [0, 0, 10, 10], [1, 1, 11, 11]], np.float32)
        scores = np.array([0.9, 0.8, 0.7, 0.6], np.float32)
        ids = np.zeros(4, np.int64)
        assert nms(boxes, scores, ids, 0.5, 100, method=method).tolist() == [0, 2]
    # finite corners whose width (6e38) is not a float32: scaled first, they still suppress each other
    huge = np.array([[-3e38, -3e38, 3e38, 3e38], [-3e38, -3e38, 3e38, 3e38]], np.float32)
    assert nms(huge, np.array([0.9, 0.8], np.float32), np.zeros(2, np.int64), 0.5, 100,
               method=method).tolist() == [0]


def _v8_raw(reg_max: int, nc: int = 2, grid: int = 8, stride: int = 8) -> tuple[Any, np.ndarray, np.ndarray]:
    """A yolov8_raw decoder of one stride (paired box / class tensors) and zero-filled tensors for it."""
    outputs = [{"name": "box", "shape": [1, 4 * reg_max, grid, grid]},
               {"name": "cls", "shape": [1, nc, grid, grid]}]
    meta = parse_metadata({"input": {"name": "images", "width": grid * stride, "height": grid * stride},
                           "decoder": {"kind": "yolov8_raw", "num_classes": nc, "strides": [stride],
                                       "reg_max": reg_max},
                           "outputs": outputs, "classes": [f"c{i}" for i in range(nc)]}, Path("v8.yaml"))
    return make_decoder(meta), np.zeros((1, 4 * reg_max, grid, grid), np.float32), \
        np.full((1, nc, grid, grid), -10.0, np.float32)


def test_reg_max_1_reads_the_box_channels_as_distances() -> None:
    # ultralytics: reg_max 1 has no DFL (identity), the 4 channels are l, t, r, b in strides; before, the
    # one-bin softmax made every distance 0 and every box empty, so nothing was ever detected
    decoder, box, cls = _v8_raw(reg_max=1)
    box[0, :, 2, 3] = [1.0, 0.5, 2.0, 1.5]
    cls[0, 1, 2, 3] = 3.0
    d = decoder([box, cls], 0.25, 0.5, 10)
    assert d.class_ids.tolist() == [1]
    np.testing.assert_allclose(d.boxes, [[(3.5 - 1) * 8, (2.5 - 0.5) * 8, (3.5 + 2) * 8, (2.5 + 1.5) * 8]])


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_dfl_logit_takes_no_nms_slot(bad: float) -> None:
    decoder, box, cls = _v8_raw(reg_max=16)
    cls[0, 0] = np.linspace(0, 6, 64, dtype=np.float32).reshape(8, 8)  # 64 confident cells, best at [7, 7]
    box[0, 17, 7, 7] = bad  # one bin of the best cell's top side
    broken = 0 if bad < 0 else 1  # a -inf bin is a bin of probability 0: the box stays finite and counts
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's RuntimeWarning (inf - inf in the softmax shift) fails too
        d = decoder([box, cls], 0.25, 1.0, 10)  # IoU threshold 1: nothing suppressed, 10 slots to fill
    assert len(d) == 10 and np.isfinite(d.boxes).all()
    assert decoder.nonfinite_dropped == broken
    d = decoder([box, cls], 0.25, 1.0, 64)  # the broken cell is counted once per frame, not per NMS pass
    assert len(d) == 64 - broken and decoder.nonfinite_dropped == 2 * broken

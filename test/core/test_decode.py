"""Decoders and NMS against expectations computed by hand from the formulas (not from the module)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from _core_fixtures import make_metadata

from dla_infer_node.core.decode import decode_yolov5_raw, make_decoder, nms
from dla_infer_node.core.errors import DlaInferError

LN3, LN4, LN9 = math.log(3.0), math.log(4.0), math.log(9.0)
OFF = -20.0  # a logit whose sigmoid (2e-9) is far below any threshold


def raw_heads(width: int, height: int, nc: int, na: int = 3, strides: tuple[int, ...] = (8, 16, 32),
              pad_to: int = 0, pad_fill: float = 30.0) -> list[np.ndarray]:
    """Empty raw heads: every objectness logit 'off'; pad channels hold garbage to prove they are ignored."""
    heads = []
    for s in strides:
        c = na * (5 + nc)
        t = np.zeros((1, max(c, pad_to), height // s, width // s), np.float32)
        t[0, c:] = pad_fill
        for a in range(na):
            t[0, a * (5 + nc) + 4] = OFF
        heads.append(t)
    return heads


def test_single_raw_candidate_non_640_input() -> None:
    # 320x256 input, nc=2. One candidate on the stride-16 head (16 rows x 20 cols), anchor 1 = (62, 45).
    meta = make_metadata("yolov5_raw", num_classes=2, width=320, height=256)
    heads = raw_heads(320, 256, nc=2, pad_to=24)
    a, gy, gx, no = 1, 5, 7, 7
    ch = a * no
    t = heads[1]
    t[0, ch + 0, gy, gx] = 0.0  # s=0.5  -> cx = (2*0.5 - 0.5 + 7) * 16 = 120
    t[0, ch + 1, gy, gx] = LN3  # s=0.75 -> cy = (1.5 - 0.5 + 5) * 16 = 96
    t[0, ch + 2, gy, gx] = 0.0  # s=0.5  -> w  = (2*0.5)^2 * 62 = 62
    t[0, ch + 3, gy, gx] = LN3  # s=0.75 -> h  = (1.5)^2 * 45 = 101.25
    t[0, ch + 4, gy, gx] = LN9  # obj 0.9
    t[0, ch + 5, gy, gx] = OFF
    t[0, ch + 6, gy, gx] = LN4  # class 1 prob 0.8 -> score 0.72
    dets = make_decoder(meta)(heads, 0.25, 0.45, 100)
    assert len(dets) == 1
    np.testing.assert_allclose(dets.boxes[0], [89.0, 45.375, 151.0, 146.625], atol=1e-4)
    assert dets.scores[0] == pytest.approx(0.72, abs=1e-6)
    assert dets.class_ids[0] == 1
    # score 0.72 is below 0.75: gone
    assert len(make_decoder(meta)(heads, 0.75, 0.45, 100)) == 0


def _cell_by_cell(heads: list[np.ndarray], strides: tuple[int, ...], anchors: list[list[tuple[float, float]]],
                  nc: int, conf: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The yolov5_raw formulas applied head by head, anchor by anchor, cell by cell, in float32 for the
    activations and float64 where the grid index joins (numpy's promotion of int64 grid indices)."""
    no = 5 + nc
    boxes, scores, ids = [], [], []
    for t, stride, anc in zip(heads, strides, anchors, strict=True):
        for a, (aw, ah) in enumerate(anc):
            for gy in range(t.shape[2]):
                for gx in range(t.shape[3]):
                    s = 1.0 / (1.0 + np.exp(-np.clip(t[0, a * no: a * no + no, gy, gx], -80.0, 80.0)))
                    k = int(np.argmax(s[5:]))
                    score = np.float32(s[4] * s[5 + k])
                    if not score >= conf:
                        continue
                    cx = (s[0] * np.float32(2.0) - np.float32(0.5) + np.int64(gx)) * np.int64(stride)
                    cy = (s[1] * np.float32(2.0) - np.float32(0.5) + np.int64(gy)) * np.int64(stride)
                    bw = np.float64((s[2] * np.float32(2.0)) ** 2 * np.float32(aw))
                    bh = np.float64((s[3] * np.float32(2.0)) ** 2 * np.float32(ah))
                    boxes.append([cx - bw * 0.5, cy - bh * 0.5, cx + bw * 0.5, cy + bh * 0.5])
                    scores.append(score)
                    ids.append(k)
    return (np.array(boxes, np.float64).reshape(-1, 4).astype(np.float32), np.array(scores, np.float32),
            np.array(ids, np.int64))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_raw_candidates_equal_the_formulas_cell_by_cell(seed: int) -> None:
    """Every head gathered, then activated at once: the same candidates, bit for bit and in the same order
    (head, anchor, row, column), as the formulas applied one cell at a time."""
    rng = np.random.default_rng(seed)
    nc, strides = 3, (8, 16, 32)
    anchors = [[(10.0, 13.0), (16.0, 30.5)], [(30.0, 61.0), (62.0, 45.0)], [(116.0, 90.0), (156.25, 198.0)]]
    heads = [(rng.normal(-1.0, 2.5, (1, 2 * (5 + nc) + 1, 64 // s, 96 // s))).astype(np.float32)
             for s in strides]
    heads[1][0, 4] = OFF  # an empty anchor, and an empty head
    heads[2][0, 4::8] = OFF
    want = _cell_by_cell(heads, strides, anchors, nc, 0.3)
    got = decode_yolov5_raw(heads, strides, anchors, nc, 0.3)
    assert want[0].shape[0] > 10
    for g, w in zip((got.boxes, got.scores, got.class_ids), want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape and g.tobytes() == w.tobytes()


def test_255_channels_padded_to_256() -> None:
    # COCO-like head: na=3, nc=80 -> 255 channels, delivered as 256 with a garbage pad channel
    nc, width, height = 80, 640, 640
    heads = raw_heads(width, height, nc=nc, pad_to=256, pad_fill=50.0)
    assert heads[2].shape == (1, 256, 20, 20)
    no = 85
    a, gy, gx = 2, 3, 4
    t = heads[2]  # stride 32, anchor 2 = (373, 326)
    t[0, a * no + 0: a * no + 4, gy, gx] = 0.0  # all s = 0.5
    t[0, a * no + 4, gy, gx] = 10.0
    t[0, a * no + 5: a * no + 85, gy, gx] = OFF
    t[0, a * no + 5 + 42, gy, gx] = 10.0
    anchors = [[(10, 13), (16, 30), (33, 23)], [(30, 61), (62, 45), (59, 119)],
               [(116, 90), (156, 198), (373, 326)]]
    out = decode_yolov5_raw(heads, (8, 16, 32), anchors, nc, 0.5)
    assert len(out.scores) == 1
    # cx = (1 - 0.5 + 4) * 32 = 144, cy = (0.5 + 3) * 32 = 112, w = 373, h = 326
    np.testing.assert_allclose(out.boxes[0], [144 - 186.5, 112 - 163, 144 + 186.5, 112 + 163], atol=1e-3)
    assert out.class_ids[0] == 42
    s = 1 / (1 + math.exp(-10.0))
    assert out.scores[0] == pytest.approx(s * s, rel=1e-6)


def test_raw_head_too_few_channels_is_an_error() -> None:
    meta = make_metadata("yolov5_raw", num_classes=2)
    heads = raw_heads(320, 256, nc=2)
    heads[0] = heads[0][:, :20]
    with pytest.raises(DlaInferError, match=r"\[decode\]"):
        make_decoder(meta)(heads, 0.25, 0.45, 100)


def test_yolov5_final() -> None:
    meta = make_metadata("yolov5_final", num_classes=3, width=416, height=416)
    n = 37  # deliberately not any grid size
    x = np.zeros((1, n, 8), np.float32)
    x[0, 10] = [100, 50, 20, 40, 0.9, 0.1, 0.2, 0.5]  # score 0.45 class 2, box 90,30,110,70
    x[0, 20] = [10, 10, 4, 4, 0.1, 0.9, 0, 0]  # score 0.09: under threshold
    dets = make_decoder(meta)([x], 0.3, 0.5, 10)
    assert len(dets) == 1 and dets.class_ids[0] == 2
    np.testing.assert_allclose(dets.boxes[0], [90, 30, 110, 70])
    assert dets.scores[0] == pytest.approx(0.45)


@pytest.mark.parametrize("transposed", [False, True])
def test_yolov8(transposed: bool) -> None:
    meta = make_metadata("yolov8", num_classes=2, width=480, height=288)
    n = 29
    x = np.zeros((1, 6, n), np.float32)
    x[0, :, 3] = [200, 100, 50, 30, 0.1, 0.8]  # class 1, 0.8, box 175,85,225,115
    x[0, :, 7] = [205, 100, 50, 30, 0.7, 0.2]  # class 0, overlaps but other class: kept
    x[0, :, 9] = [202, 100, 50, 30, 0.05, 0.6]  # class 1, IoU with #3 = 46*30/(54*30) = 0.852: suppressed
    if transposed:
        x = np.ascontiguousarray(x.transpose(0, 2, 1))
    dets = make_decoder(meta)([x], 0.25, 0.5, 10)
    assert dets.class_ids.tolist() == [1, 0]
    np.testing.assert_allclose(dets.scores, [0.8, 0.7], rtol=1e-6)
    np.testing.assert_allclose(dets.boxes, [[175, 85, 225, 115], [180, 85, 230, 115]])


def test_nms_hand_made_ious() -> None:
    boxes = np.array([[0, 0, 10, 10], [1, 0, 11, 10], [5, 0, 15, 10], [0, 0, 10, 10]], np.float32)
    scores = np.array([0.9, 0.8, 0.7, 0.6], np.float32)
    ids = np.array([0, 0, 0, 1])
    # IoU(A,B) = 90/110 = 0.818, IoU(A,C) = 50/150 = 0.333, IoU(B,C) = 60/140 = 0.429; D is another class
    assert nms(boxes, scores, ids, 0.5, 100).tolist() == [0, 2, 3]
    assert nms(boxes, scores, ids, 0.3, 100).tolist() == [0, 3]
    assert nms(boxes, scores, ids, 0.9, 100).tolist() == [0, 1, 2, 3]
    assert nms(boxes, scores, ids, 0.5, 2).tolist() == [0, 2]
    # same class everywhere: D (identical to A) is now suppressed
    assert nms(boxes, scores, np.zeros(4, np.int64), 0.5, 100).tolist() == [0, 2]
    assert nms(boxes[:0], scores[:0], ids[:0], 0.5, 100).tolist() == []


def test_nms_order_is_by_score() -> None:
    boxes = np.array([[0, 0, 1, 1], [10, 10, 11, 11], [20, 20, 21, 21]], np.float32)
    scores = np.array([0.3, 0.9, 0.6], np.float32)
    assert nms(boxes, scores, np.zeros(3, np.int64), 0.5, 10).tolist() == [1, 2, 0]


def test_many_candidates_any_size() -> None:
    # 8400 = 640x640 grid sum for strides 8/16/32, but nothing may depend on it: use 1000 and 8400
    for n in (1000, 8400):
        meta = make_metadata("yolov8", num_classes=4, width=640, height=640)
        rng = np.random.default_rng(n)
        x = np.zeros((1, 8, n), np.float32)
        x[0, 0] = rng.uniform(0, 640, n)
        x[0, 1] = rng.uniform(0, 640, n)
        x[0, 2:4] = 8.0
        x[0, 4:] = rng.uniform(0, 0.3, (4, n))
        dets = make_decoder(meta)([x], 0.25, 0.45, 300)
        assert 0 < len(dets) <= 300
        assert np.all(np.diff(dets.scores) <= 0)


def naive_greedy_nms(boxes: list[list[float]], scores: list[float], ids: list[int], thr: float,
                     max_det: int) -> list[int]:
    """The textbook algorithm in plain Python, as an independent reference."""
    def iou(a: list[float], b: list[float]) -> float:
        iw = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
        ih = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
        inter = iw * ih
        union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
        return inter / union if union > 0 else 0.0

    order = sorted(range(len(scores)), key=lambda i: -scores[i])
    keep: list[int] = []
    for i in order:
        if len(keep) == max_det:
            break
        if all(ids[k] != ids[i] or iou(boxes[k], boxes[i]) <= thr for k in keep):
            keep.append(i)
    return keep


@pytest.mark.parametrize("seed", range(40))
def test_nms_equals_textbook_greedy(seed: int) -> None:
    rng = np.random.default_rng(seed)
    m = int(rng.integers(1, 400))
    xy = rng.uniform(0, 200, (m, 2))
    wh = rng.uniform(2, 60, (m, 2))
    boxes = np.concatenate([xy, xy + wh], axis=1).astype(np.float32)
    scores = rng.permutation(m).astype(np.float32) / m + 0.001  # distinct: the order is unambiguous
    ids = rng.integers(0, 3, m)
    thr = float(rng.uniform(0.1, 0.9))
    max_det = int(rng.integers(1, 300))
    got = nms(boxes, scores, ids, thr, max_det).tolist()
    want = naive_greedy_nms(boxes.astype(np.float64).tolist(), scores.tolist(), ids.tolist(), thr, max_det)
    assert got == want

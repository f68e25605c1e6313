"""YOLO decoders and class-aware NMS, vectorised numpy, for any input size.

Kinds (``metadata.decoder.kind``):

- ``yolov5_raw``: one ``[1, na*(5+nc)(+pad), H, W]`` tensor per stride (the DLA-trimmed form, no decode in
  the graph). Channel ``a*(5+nc)+k``: k=0..3 tx,ty,tw,th; 4 objectness; 5.. class logits. With
  ``s = sigmoid(v)``: ``cx = (2*s_tx - 0.5 + gx)*stride``, ``w = (2*s_tw)^2 * anchor_w`` (likewise y/h),
  ``score = s_obj * s_cls``. Channels past ``na*(5+nc)`` (e.g. 255 padded to 256) are ignored.
- ``yolov5_final``: ``[1, N, 5+nc]`` rows ``cx, cy, w, h, obj, cls...`` (already activated), score = obj*cls.
- ``yolov8`` (also v11): ``[1, 4+nc, N]`` rows ``cx, cy, w, h, cls...`` (already activated, no objectness).

Boxes come out in network-input pixels; the pipeline maps them to the source image with the letterbox.
Every candidate takes its best class (one label per box), as the detection message carries one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dla_infer_node.core.detections import Detections
from dla_infer_node.core.errors import ModelError, ParameterError
from dla_infer_node.core.model_meta import ModelMetadata
from dla_infer_node.core.output_shapes import check_output_shapes

# Candidates beyond this many (highest scores first) never reach NMS; bounds worst-case latency.
MAX_NMS_CANDIDATES = 30000
# Boxes compared against the rest per NMS step (trade-off between numpy call count and wasted work).
NMS_BLOCK = 32
NMS_BLOCK_ELEMS = 8192  # when few boxes remain, take them all as one block (a small full matrix)


class DecodeError(ModelError):
    """The raw outputs do not have the shapes the metadata promises."""

    stage = "decode"


def sigmoid(x: np.ndarray) -> np.ndarray:
    # clipped so that exp cannot overflow float32 (s(80) is 1.0 and s(-80) ~ 1.8e-35 anyway)
    return 1.0 / (1.0 + np.exp(-np.clip(x, -80.0, 80.0)))


def _logit(p: float) -> float:
    """Inverse sigmoid; lets a threshold on s(x) be applied to x before any exp is computed."""
    if p <= 0.0:
        return -math.inf
    if p >= 1.0:
        return math.inf
    return math.log(p / (1.0 - p))


def cxcywh_to_xyxy(b: np.ndarray) -> np.ndarray:
    half = b[:, 2:4] * 0.5
    return np.concatenate([b[:, 0:2] - half, b[:, 0:2] + half], axis=1).astype(np.float32, copy=False)


def _best_class(obj: np.ndarray | None, cls: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(score, class id) per row of ``cls`` (M, nc), score = obj * best class probability."""
    ids = np.argmax(cls, axis=1)
    best = cls[np.arange(cls.shape[0]), ids]
    return (best if obj is None else obj * best).astype(np.float32, copy=False), ids.astype(np.int64)


def check_threshold(name: str, value: float) -> float:
    """Thresholds are probabilities/IoUs: a finite number in [0, 1]."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ParameterError(name, value, "a number in [0, 1]") from None
    if not (0.0 <= v <= 1.0):
        raise ParameterError(name, value, "a number in [0, 1]")
    return v


def nms(boxes: np.ndarray, scores: np.ndarray, class_ids: np.ndarray, iou_threshold: float,
        max_detections: int) -> np.ndarray:
    """Greedy class-aware NMS; returns kept indices, highest score first.

    A box is suppressed by a higher-scoring box of the same class when their IoU is > ``iou_threshold``.
    Each class is suppressed on its own (its boxes only), so no box value can make two classes interact:
    a coordinate offset per class (the usual trick) rounds boxes together in float32 once coordinates
    are large, and one NaN/Inf in the frame would disable it. Boxes and scores must be finite
    (:func:`finite_candidates`); the per-class results are merged by score.

    Exactly the classic greedy result, computed in blocks to keep numpy calls few: the next
    ``NMS_BLOCK`` unsuppressed boxes (in score order) are compared with all remaining ones at once; the
    greedy order inside the block is resolved by a fixed-point iteration on its (upper-triangular)
    suppression matrix, and the block's survivors then suppress the rest.
    """
    m = int(scores.shape[0])
    if m == 0 or max_detections <= 0:
        return np.zeros(0, dtype=np.int64)
    order = np.argsort(-scores, kind="stable")
    if m > MAX_NMS_CANDIDATES:
        order = order[:MAX_NMS_CANDIDATES]
    ids = class_ids[order]
    if ids.size and ids.min() == ids.max():  # one class (the common case): no grouping needed
        return order[_nms_sorted(boxes[order], iou_threshold, max_detections)]
    # group by class keeping score order inside each group (stable sort), suppress each group alone
    by_class = np.argsort(ids, kind="stable")
    starts = np.flatnonzero(np.r_[True, ids[by_class][1:] != ids[by_class][:-1]])
    kept: list[np.ndarray] = []
    for group in np.split(by_class, starts[1:]):
        kept.append(group[_nms_sorted(boxes[order[group]], iou_threshold, max_detections)])
    positions = np.sort(np.concatenate(kept))  # a position in ``order`` is a rank by score
    return order[positions[:max_detections]]


def _nms_sorted(boxes: np.ndarray, iou_threshold: float, max_detections: int) -> np.ndarray:
    """Greedy NMS of one class's boxes, already in descending score order: kept positions, ascending."""
    b = boxes.astype(np.float32, copy=False)
    area = np.clip(b[:, 2] - b[:, 0], 0, None) * np.clip(b[:, 3] - b[:, 1], 0, None)
    thr = np.float32(iou_threshold)
    rem = np.arange(b.shape[0])
    kept: list[np.ndarray] = [np.zeros(0, dtype=np.int64)]
    n_kept = 0
    while rem.size and n_kept < max_detections:
        k = min(int(rem.size), max(NMS_BLOCK, NMS_BLOCK_ELEMS // int(rem.size)))
        rows = rem[:k]
        bq, br = b[rows], b[rem]
        inter = np.minimum(bq[:, 2:3], br[:, 2])
        inter -= np.maximum(bq[:, 0:1], br[:, 0])
        np.maximum(inter, 0, out=inter)
        ih = np.minimum(bq[:, 3:4], br[:, 3])
        ih -= np.maximum(bq[:, 1:2], br[:, 1])
        np.maximum(ih, 0, out=ih)
        inter *= ih
        union = area[rows][:, None] + area[rem][None, :]
        union -= inter
        union *= thr
        sup = inter > union  # IoU > t  <=>  inter > t*union; zero-area boxes (union 0) never suppress
        tri = np.triu(sup[:, :k], 1)
        alive = np.ones(k, dtype=bool)
        while True:  # converges in (longest suppression chain) steps; the fixed point is the greedy one
            nxt = ~tri[alive].any(axis=0)
            if np.array_equal(nxt, alive):
                break
            alive = nxt
        kept.append(rows[alive])
        n_kept += int(alive.sum())
        gone = sup[alive].any(axis=0)
        gone[:k] = True
        rem = rem[~gone]
    return np.concatenate(kept)[:max_detections]


def finite_candidates(c: Candidates) -> tuple[Candidates, int]:
    """``c`` without rows whose box or score is NaN/Inf, and how many were dropped.

    A broken model (or a fault in the accelerator) can emit them; IoU with a non-finite box is undefined,
    so such a row cannot take part in NMS.
    """
    ok = np.isfinite(c.boxes).all(axis=1) & np.isfinite(c.scores)
    dropped = int(ok.size - np.count_nonzero(ok))
    if not dropped:
        return c, 0
    return Candidates(c.boxes[ok], c.scores[ok], c.class_ids[ok]), dropped


@dataclass(frozen=True)
class Candidates:
    boxes: np.ndarray  # (M, 4) float32 xyxy, network-input pixels
    scores: np.ndarray  # (M,) float32
    class_ids: np.ndarray  # (M,) int64


def _empty() -> Candidates:
    return Candidates(np.zeros((0, 4), np.float32), np.zeros(0, np.float32), np.zeros(0, np.int64))


def _concat(parts: list[Candidates]) -> Candidates:
    parts = [p for p in parts if p.scores.size]
    if not parts:
        return _empty()
    if len(parts) == 1:
        return parts[0]
    return Candidates(np.concatenate([p.boxes for p in parts]), np.concatenate([p.scores for p in parts]),
                      np.concatenate([p.class_ids for p in parts]))


def _filter(boxes: np.ndarray, scores: np.ndarray, ids: np.ndarray, conf: float) -> Candidates:
    keep = scores >= conf
    return Candidates(boxes[keep], scores[keep], ids[keep])


def decode_yolov5_raw(tensors: Sequence[np.ndarray], strides: Sequence[int],
                      anchors: Sequence[Sequence[tuple[float, float]]], num_classes: int,
                      conf_threshold: float) -> Candidates:
    """YOLOv5 raw heads -> candidates with score >= ``conf_threshold`` (see the module docstring)."""
    if len(tensors) != len(strides) or len(strides) != len(anchors):
        raise DecodeError(f"{len(tensors)} head tensors for {len(strides)} strides / "
                          f"{len(anchors)} anchor sets", call="decode_yolov5_raw")
    no = 5 + num_classes
    gate = _logit(conf_threshold)  # s_obj*s_cls >= conf needs s_obj >= conf: filter on raw logits first
    parts = []
    for t, stride, anc in zip(tensors, strides, anchors, strict=True):
        na = len(anc)
        if t.ndim != 4 or t.shape[0] != 1 or t.shape[1] < na * no:
            raise DecodeError(f"head tensor shape {t.shape}; expected [1, >={na * no}, H, W] "
                              f"({na} anchors x (5+{num_classes}))", call="decode_yolov5_raw",
                              params={"stride": stride})
        _, _, h, w = t.shape
        v = t[0, : na * no].reshape(na, no, h, w)
        a, gy, gx = np.nonzero(v[:, 4] >= gate)
        if a.size == 0:
            continue
        sel = sigmoid(v[a, :, gy, gx].astype(np.float32))  # (M, no)
        anc_arr = np.asarray(anc, dtype=np.float32)[a]  # (M, 2)
        cx = (sel[:, 0] * 2.0 - 0.5 + gx) * stride
        cy = (sel[:, 1] * 2.0 - 0.5 + gy) * stride
        bw = (sel[:, 2] * 2.0) ** 2 * anc_arr[:, 0]
        bh = (sel[:, 3] * 2.0) ** 2 * anc_arr[:, 1]
        scores, ids = _best_class(sel[:, 4], sel[:, 5:no])
        boxes = cxcywh_to_xyxy(np.stack([cx, cy, bw, bh], axis=1))
        parts.append(_filter(boxes, scores, ids, conf_threshold))
    return _concat(parts)


def decode_yolov5_final(tensor: np.ndarray, num_classes: int, conf_threshold: float) -> Candidates:
    """``[1, N, 5+nc]`` (cx, cy, w, h, obj, cls...) -> candidates."""
    no = 5 + num_classes
    if tensor.ndim != 3 or tensor.shape[0] != 1 or tensor.shape[2] < no:
        raise DecodeError(f"output shape {tensor.shape}; expected [1, N, {no}]", call="decode_yolov5_final")
    x = tensor[0]
    rows = np.nonzero(x[:, 4] >= conf_threshold)[0]
    sel = x[rows, :no].astype(np.float32)
    scores, ids = _best_class(sel[:, 4], sel[:, 5:no])
    return _filter(cxcywh_to_xyxy(sel[:, :4]), scores, ids, conf_threshold)


def decode_yolov8(tensor: np.ndarray, num_classes: int, conf_threshold: float) -> Candidates:
    """``[1, 4+nc, N]`` (cx, cy, w, h, cls...; no objectness) -> candidates; ``[1, N, 4+nc]`` works too."""
    no = 4 + num_classes
    if tensor.ndim != 3 or tensor.shape[0] != 1 or no not in tensor.shape[1:]:
        raise DecodeError(f"output shape {tensor.shape}; expected [1, {no}, N]", call="decode_yolov8")
    x = tensor[0] if tensor.shape[1] == no else tensor[0].T  # (4+nc, N)
    cls = x[4:no]
    # max over classes is cheap; argmax along axis 0 is not (measured ~30x slower): argmax survivors only
    cols = np.nonzero(cls.max(axis=0) >= conf_threshold)[0]
    sel = cls[:, cols]
    ids = np.argmax(sel, axis=0)
    best = sel[ids, np.arange(cols.size)]
    boxes = cxcywh_to_xyxy(x[:4, cols].T.astype(np.float32))
    return Candidates(boxes, best.astype(np.float32), ids.astype(np.int64))


class Decoder:
    """Raw tensors (metadata output order) -> NMS-filtered :class:`Detections` in network-input pixels."""

    def __init__(self, metadata: ModelMetadata) -> None:
        d = metadata.decoder
        self.kind = d.kind
        self.num_classes = d.num_classes
        self.strides = tuple(d.strides)
        self.anchors = tuple(d.anchors)
        self.num_outputs = len(metadata.outputs)
        if self.kind == "yolov5_raw" and len(self.strides) != self.num_outputs:
            raise DecodeError(f"yolov5_raw: {len(self.strides)} strides but {self.num_outputs} outputs",
                              call="make_decoder", params={"metadata": str(metadata.path)})
        check_output_shapes(metadata)
        # candidates with a NaN/Inf box or score, dropped before NMS (a broken model or accelerator fault)
        self.nonfinite_dropped = 0

    def candidates(self, tensors: Sequence[np.ndarray], conf_threshold: float) -> Candidates:
        if len(tensors) < 1:
            raise DecodeError("no output tensors", call="Decoder", params={"kind": self.kind})
        if self.kind == "yolov5_raw":
            return decode_yolov5_raw(tensors, self.strides, self.anchors, self.num_classes, conf_threshold)
        if self.kind == "yolov5_final":
            return decode_yolov5_final(tensors[0], self.num_classes, conf_threshold)
        return decode_yolov8(tensors[0], self.num_classes, conf_threshold)

    def __call__(self, tensors: Sequence[np.ndarray], conf_threshold: float, iou_threshold: float,
                 max_detections: int) -> Detections:
        c, dropped = finite_candidates(self.candidates(tensors, conf_threshold))
        if dropped:
            self.nonfinite_dropped += dropped
        keep = nms(c.boxes, c.scores, c.class_ids, iou_threshold, max_detections)
        return Detections(c.boxes[keep], c.scores[keep], c.class_ids[keep])


def make_decoder(metadata: ModelMetadata) -> Decoder:
    """The decoder ``metadata.decoder.kind`` names."""
    return Decoder(metadata)

"""YOLO decoders and class-aware NMS, vectorised numpy, for any input size.

Kinds (``metadata.decoder.kind``):

- ``yolov5_raw``: one ``[1, na*(5+nc)(+pad), H, W]`` tensor per stride (the DLA-trimmed form, no decode in
  the graph). Channel ``a*(5+nc)+k``: k=0..3 tx,ty,tw,th; 4 objectness; 5.. class logits. With
  ``s = sigmoid(v)``: ``cx = (2*s_tx - 0.5 + gx)*stride``, ``w = (2*s_tw)^2 * anchor_w`` (likewise y/h),
  ``score = s_obj * s_cls``. Channels past ``na*(5+nc)`` (e.g. 255 padded to 256) are ignored.
- ``yolov5_final``: ``[1, N, 5+nc]`` rows ``cx, cy, w, h, obj, cls...`` (already activated), score = obj*cls.
- ``yolov8`` (also v11): ``[1, 4+nc, N]`` rows ``cx, cy, w, h, cls...`` (already activated, no objectness).
- ``yolov8_raw`` (also v11, v5u): the graph cut after the per-level head convolutions, before the DFL;
  per stride a box tensor ``[1, 4*reg_max, H, W]`` and a class-logit tensor ``[1, nc, H, W]``
  (see :func:`decode_yolov8_raw`).

Boxes come out in network-input pixels; the pipeline maps them to the source image with the letterbox.
Every candidate takes its best class (one label per box), as the detection message carries one.

Given the letterbox's ``region`` (where the image lies in the network input), candidates whose box lies
wholly in the padding (no overlap of positive area with the image) are dropped before NMS and
``max_detections``: they are no objects, and dropping them after would return fewer boxes than asked for
and let them suppress real ones. (``yolov8_raw`` decodes boxes lazily: a box contains its anchor point, so
only the cells whose anchor point lies in the padding are decoded for this.)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dla_infer_node.core.detections import Detections
from dla_infer_node.core.dfl import LazyBoxes, argmax_rows
from dla_infer_node.core.errors import ModelError
from dla_infer_node.core.model_meta import ModelMetadata
from dla_infer_node.core.nms import MAX_NMS_CANDIDATES, nms
from dla_infer_node.core.output_shapes import check_output_shapes

__all__ = ["MAX_NMS_CANDIDATES", "Candidates", "DecodeError", "Decoder", "make_decoder", "nms"]



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


Region = tuple[float, float, float, float]  # (x0, y0, x1, y1) of the image in network-input pixels


def in_padding(boxes: np.ndarray, region: Region) -> np.ndarray:
    """Rows of xyxy ``boxes`` with no positive-area overlap with ``region``: wholly in the padding."""
    x0, y0, x1, y1 = region
    return ((np.minimum(boxes[:, 2], x1) <= np.maximum(boxes[:, 0], x0))
            | (np.minimum(boxes[:, 3], y1) <= np.maximum(boxes[:, 1], y0)))


def _keep_out_of_padding(box: np.ndarray, cols: np.ndarray, width: int, stride: int, reg_max: int,
                         region: Region) -> np.ndarray:
    """Mask of the cells ``cols`` whose box is not wholly in the padding; only cells whose anchor point
    lies outside the region's interior are decoded to find out."""
    x0, y0, x1, y1 = region
    ax = (cols % width + 0.5) * stride
    ay = (cols // width + 0.5) * stride
    near = np.flatnonzero(~((ax > x0) & (ax < x1) & (ay > y0) & (ay < y1)))
    keep = np.ones(cols.size, bool)
    if near.size:
        edge = LazyBoxes(reg_max)  # scores and classes do not matter here: only the boxes are asked for
        edge.add(box, cols[near], width, stride, np.zeros(near.size, np.float32),
                 np.zeros(near.size, np.int64))
        keep[near[in_padding(edge.boxes(), region)]] = False
    return keep


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
    """YOLOv5 raw heads -> candidates with score >= ``conf_threshold`` (see the module docstring).

    Per head only the objectness gate and the gather of the cells that pass it; the activation and the
    box arithmetic then run once over every head's rows (same per-element arithmetic, same order: head,
    anchor, row, column)."""
    if len(tensors) != len(strides) or len(strides) != len(anchors):
        raise DecodeError(f"{len(tensors)} head tensors for {len(strides)} strides / "
                          f"{len(anchors)} anchor sets", call="decode_yolov5_raw")
    no = 5 + num_classes
    gate = _logit(conf_threshold)  # s_obj*s_cls >= conf needs s_obj >= conf: filter on raw logits first
    rows, gxs, gys, cell_strides, cell_anchors = [], [], [], [], []
    for t, stride, anc in zip(tensors, strides, anchors, strict=True):
        na = len(anc)
        if t.ndim != 4 or t.shape[0] != 1 or t.shape[1] < na * no:
            raise DecodeError(f"head tensor shape {t.shape}; expected [1, >={na * no}, H, W] "
                              f"({na} anchors x (5+{num_classes}))", call="decode_yolov5_raw",
                              params={"stride": stride})
        _, _, h, w = t.shape
        v = t[0, : na * no].reshape(na, no, h * w)
        hit = np.flatnonzero(v[:, 4] >= gate)  # anchor-major, then row, then column
        if hit.size == 0:
            continue
        a, cell = np.divmod(hit, h * w)
        rows.append(v[a, :, cell])  # (M, no)
        gy, gx = np.divmod(cell, w)
        gxs.append(gx)
        gys.append(gy)
        cell_strides.append(np.full(hit.size, stride, np.int64))
        cell_anchors.append(np.asarray(anc, dtype=np.float32)[a])
    if not rows:
        return _empty()
    sel = sigmoid(np.concatenate(rows).astype(np.float32, copy=False))
    gx, gy, step = np.concatenate(gxs), np.concatenate(gys), np.concatenate(cell_strides)
    anc_arr = np.concatenate(cell_anchors)  # (M, 2)
    cx = (sel[:, 0] * 2.0 - 0.5 + gx) * step
    cy = (sel[:, 1] * 2.0 - 0.5 + gy) * step
    bw = (sel[:, 2] * 2.0) ** 2 * anc_arr[:, 0]
    bh = (sel[:, 3] * 2.0) ** 2 * anc_arr[:, 1]
    scores, ids = _best_class(sel[:, 4], sel[:, 5:no])
    boxes = cxcywh_to_xyxy(np.stack([cx, cy, bw, bh], axis=1))
    return _filter(boxes, scores, ids, conf_threshold)


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
    cls, box = x[4:no], x[:4]
    best = cls.max(axis=0)  # max over classes is cheap; everything else only for the columns that pass
    cols = np.flatnonzero(best >= conf_threshold)
    if cols.size < best.size:
        cls, box, best = cls[:, cols], box[:, cols], best[cols]
    ids = argmax_rows(cls, best)
    return Candidates(cxcywh_to_xyxy(box.T.astype(np.float32)), best.astype(np.float32), ids)


def yolov8_raw_lazy(tensors: Sequence[np.ndarray], strides: Sequence[int], reg_max: int,
                    num_classes: int, conf_threshold: float, region: Region | None = None) -> LazyBoxes:
    """YOLOv8 / YOLO11 raw heads (the graph cut before the DFL) -> candidates, boxes decoded on demand.

    Per stride either two tensors, box ``[1, 4*reg_max, H, W]`` then class logits ``[1, nc, H, W]``
    (what ``dla_build trim`` writes: box_s8, cls_s8, box_s16, ...), or one ``[1, 4*reg_max+nc, H, W]``
    holding both. Channel ``side*reg_max + k`` is bin k of side l, t, r, b; each side's distance (in strides)
    is the softmax expectation over its bins; the box is ``(gx+0.5-l, gy+0.5-t, gx+0.5+r, gy+0.5+b)*stride``,
    the score ``sigmoid(best class logit)``. Channels past those (DLA padding) are ignored.
    """
    nb = 4 * reg_max
    paired = len(tensors) == 2 * len(strides)
    if not paired and len(tensors) != len(strides):
        raise DecodeError(f"{len(tensors)} head tensors for {len(strides)} strides; expected "
                          f"{2 * len(strides)} (box, cls per stride) or {len(strides)}",
                          call="decode_yolov8_raw")
    gate = _logit(conf_threshold)
    lazy = LazyBoxes(reg_max)
    for i, stride in enumerate(strides):
        tb, tc = (tensors[2 * i], tensors[2 * i + 1]) if paired else (tensors[i], tensors[i][:, nb:])
        if (tb.ndim != 4 or tc.ndim != 4 or tb.shape[0] != 1 or tb.shape[1] < nb or tc.shape[1] < num_classes
                or tb.shape[2:] != tc.shape[2:]):
            raise DecodeError(f"head tensors {tb.shape} / {tc.shape}; expected [1, >={nb}, H, W] box and "
                              f"[1, >={num_classes}, H, W] class logits", call="decode_yolov8_raw",
                              params={"stride": stride})
        h, w = tb.shape[2:]
        cls = tc[0, :num_classes].reshape(num_classes, h * w)
        best = cls.max(axis=0)
        cols = np.flatnonzero(best >= gate)
        if cols.size < best.size:
            cls, best = cls[:, cols], best[cols]
        scores = sigmoid(best.astype(np.float32))
        keep = scores >= conf_threshold  # the gate was on logits; the threshold is on the probability
        ids = argmax_rows(cls, best)
        box = tb[0, :nb].reshape(nb, h * w)
        if region is not None:
            keep &= _keep_out_of_padding(box, cols, w, stride, reg_max, region)
        if not keep.all():
            cols, scores, ids = cols[keep], scores[keep], ids[keep]
        lazy.add(box, cols, w, stride, scores, ids)
    return lazy


def decode_yolov8_raw(tensors: Sequence[np.ndarray], strides: Sequence[int], reg_max: int,
                      num_classes: int, conf_threshold: float) -> Candidates:
    """YOLOv8 / YOLO11 raw heads -> candidates (see :func:`yolov8_raw_lazy`)."""
    lazy = yolov8_raw_lazy(tensors, strides, reg_max, num_classes, conf_threshold)
    return Candidates(lazy.boxes(), lazy.scores, lazy.class_ids)


class Decoder:
    """Raw tensors (metadata output order) -> NMS-filtered :class:`Detections` in network-input pixels."""

    def __init__(self, metadata: ModelMetadata) -> None:
        d = metadata.decoder
        self.kind = d.kind
        self.num_classes = d.num_classes
        self.strides = tuple(d.strides)
        self.anchors = tuple(d.anchors)
        self.reg_max = d.reg_max
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
        if self.kind == "yolov8_raw":
            return decode_yolov8_raw(tensors, self.strides, self.reg_max, self.num_classes, conf_threshold)
        return decode_yolov8(tensors[0], self.num_classes, conf_threshold)

    def __call__(self, tensors: Sequence[np.ndarray], conf_threshold: float, iou_threshold: float,
                 max_detections: int, region: Region | None = None) -> Detections:
        """``region``: the image's place in the network input; boxes wholly outside it are dropped before
        NMS (see the module docstring)."""
        if self.kind == "yolov8_raw":  # boxes only for what NMS looks at (see dfl.LazyBoxes)
            lazy = yolov8_raw_lazy(tensors, self.strides, self.reg_max, self.num_classes, conf_threshold,
                                   region)
            scores, ids = lazy.scores, lazy.class_ids
            finite = np.isfinite(scores)
            if not finite.all():  # a non-finite score cannot be ranked: ranked last, then dropped, counted
                self.nonfinite_dropped += int(finite.size - np.count_nonzero(finite))
                scores = np.where(finite, scores, np.float32(-1))
            broken: set[int] = set()  # candidates whose box the DFL made non-finite (non-finite logits)

            def boxes_of(idx: np.ndarray) -> np.ndarray:
                b = lazy.boxes(idx)
                ok = np.isfinite(b).all(axis=1)
                if not ok.all():  # NMS never keeps them; counted once however often NMS asks
                    broken.update(idx[~ok].tolist())
                return b

            keep = nms(boxes_of, scores, ids, iou_threshold, max_detections)
            self.nonfinite_dropped += len(broken)
            keep = keep[finite[keep]]
            return Detections(lazy.boxes(keep), scores[keep], ids[keep])
        c, dropped = finite_candidates(self.candidates(tensors, conf_threshold))
        if dropped:
            self.nonfinite_dropped += dropped
        if region is not None:
            real = ~in_padding(c.boxes, region)
            c = Candidates(c.boxes[real], c.scores[real], c.class_ids[real])
        keep = nms(c.boxes, c.scores, c.class_ids, iou_threshold, max_detections)
        return Detections(c.boxes[keep], c.scores[keep], c.class_ids[keep])


def make_decoder(metadata: ModelMetadata) -> Decoder:
    """The decoder ``metadata.decoder.kind`` names."""
    return Decoder(metadata)

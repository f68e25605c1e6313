"""COCO-style box mAP without pycocotools: what ``COCOeval(..., "bbox")`` computes for one area range ("all"),
crowd regions included, and a per-image cap of ``max_dets`` detections per class.

Per class: each image's detections, best score first, claim the unclaimed ground-truth box of highest IoU at
or above the threshold; over all images, detections sorted by score (stable) give the precision/recall
curve; precision is made non-increasing from the right and read at 101 recall points (0, 0.01, ... 1). AP
is their mean, mAP the mean over classes that have ground truth, at IoU 0.50 and over 0.50:0.05:0.95.

Crowd regions (``iscrowd: 1``) as COCOeval treats them: they are not objects to find (no recall counts
them), and a detection that matches no object but lies on a crowd region (intersection over the
*detection's* area at or above the threshold) is ignored, neither a true nor a false positive; one crowd
region absorbs any number of detections. ``test/cli/test_coco_map.py`` holds it to pycocotools on random
sets.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

IOU_THRESHOLDS = np.linspace(0.5, 0.95, 10)
RECALL_POINTS = np.linspace(0.0, 1.0, 101)

Boxes = np.ndarray  # (N, 4) float xyxy


def box_iou(a: Boxes, b: Boxes, crowd: np.ndarray | None = None) -> np.ndarray:
    """(len(a), len(b)) IoU of xyxy boxes (COCO's convention: width = x2 - x1, no +1); for a column ``j``
    with ``crowd[j]`` the union is ``a``'s own area (COCOeval's overlap with a crowd region)."""
    if len(a) == 0 or len(b) == 0:
        return np.zeros((len(a), len(b)))
    lt = np.maximum(a[:, None, :2], b[None, :, :2])
    rb = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.prod(np.clip(rb - lt, 0, None), axis=2)
    area_a = np.prod(a[:, 2:] - a[:, :2], axis=1)
    area_b = np.prod(b[:, 2:] - b[:, :2], axis=1)
    union = area_a[:, None] + area_b[None, :] - inter
    if crowd is not None:
        union = np.where(crowd[None, :], area_a[:, None], union)
    return np.where(union > 0, inter / np.where(union > 0, union, 1), 0.0)


def _match(iou: np.ndarray, crowd: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(thresholds, dets) bools: det i is a true positive / is ignored (on a crowd region) at threshold t;
    greedy in the dets' order, ground truth ordered objects first, crowd regions last (as COCOeval)."""
    n_det, n_gt = iou.shape
    tp = np.zeros((len(IOU_THRESHOLDS), n_det), bool)
    ignored = np.zeros((len(IOU_THRESHOLDS), n_det), bool)
    for t, thr in enumerate(IOU_THRESHOLDS):
        taken = np.zeros(n_gt, bool)
        for i in range(n_det):
            best, m = min(thr, 1 - 1e-10), -1
            for g in range(n_gt):  # the last gt of the highest IoU >= thr wins, as in COCOeval
                if taken[g] and not crowd[g]:
                    continue
                if m >= 0 and not crowd[m] and crowd[g]:
                    break  # matched an object: crowd regions (after the objects) cannot take it
                if iou[i, g] >= best:
                    best, m = iou[i, g], g
            if m >= 0:
                taken[m] = True
                tp[t, i] = not crowd[m]
                ignored[t, i] = bool(crowd[m])
    return tp, ignored


def class_ap(gts: Sequence[Boxes], dets: Sequence[tuple[Boxes, np.ndarray]], max_dets: int,
             crowds: Sequence[Boxes] | None = None) -> np.ndarray:
    """AP of one class at each IoU threshold, -1 where the class has no ground truth (crowd regions are
    not ground truth to find; ``crowds[i]`` are image i's)."""
    n_gt = sum(len(g) for g in gts)
    if n_gt == 0:
        return np.full(len(IOU_THRESHOLDS), -1.0)
    crowds = crowds if crowds is not None else [np.zeros((0, 4))] * len(gts)
    scores, hits, skips = [], [], []
    for g, c, (boxes, s) in zip(gts, crowds, dets, strict=True):
        order = np.argsort(-s, kind="mergesort")[:max_dets]
        scores.append(s[order])
        is_crowd = np.r_[np.zeros(len(g), bool), np.ones(len(c), bool)]
        tp_i, ignored_i = _match(box_iou(boxes[order], np.concatenate([g, c]), is_crowd), is_crowd)
        hits.append(tp_i)
        skips.append(ignored_i)
    all_scores = np.concatenate(scores) if scores else np.zeros(0)
    tp = np.concatenate(hits, axis=1) if hits else np.zeros((len(IOU_THRESHOLDS), 0), bool)
    ignored = np.concatenate(skips, axis=1) if skips else np.zeros((len(IOU_THRESHOLDS), 0), bool)
    order = np.argsort(-all_scores, kind="mergesort")
    tp, ignored = tp[:, order], ignored[:, order]
    out = np.zeros(len(IOU_THRESHOLDS))
    for t in range(len(IOU_THRESHOLDS)):
        tps = np.cumsum(tp[t]).astype(float)
        fps = np.cumsum(~tp[t] & ~ignored[t]).astype(float)
        recall = tps / n_gt
        precision = tps / (tps + fps + np.spacing(1))
        precision = np.maximum.accumulate(precision[::-1])[::-1] if len(precision) else precision
        idx = np.searchsorted(recall, RECALL_POINTS, side="left")
        q = np.zeros(len(RECALL_POINTS))
        reached = idx < len(precision)  # recall points beyond the last detection's recall count as 0
        q[reached] = precision[idx[reached]]
        out[t] = float(np.mean(q))
    return out


def class_aps(table: np.ndarray) -> list[tuple[float, float] | None]:
    """Per class of a :func:`coco_map` table: (AP50, AP50:95), None for a class without ground truth."""
    return [(float(row[0]), float(row.mean())) if row[0] > -1 else None for row in table]


def _of_class(boxes: Boxes, class_ids: np.ndarray, k: int) -> Boxes:
    return np.asarray(boxes, float).reshape(-1, 4)[np.asarray(class_ids) == k]


def coco_map(gts: Sequence[tuple[Boxes, np.ndarray]], dets: Sequence[tuple[Boxes, np.ndarray, np.ndarray]],
             num_classes: int, max_dets: int = 300, crowds: Sequence[tuple[Boxes, np.ndarray]] | None = None
             ) -> tuple[float, float, np.ndarray]:
    """mAP50, mAP50:95 and the (classes, thresholds) AP table (-1 rows: classes without ground truth).

    ``gts[i]`` = (boxes xyxy, class ids) of image i, ``dets[i]`` = (boxes xyxy, scores, class ids),
    ``crowds[i]`` = (boxes xyxy, class ids) of image i's crowd regions (none when not given).
    """
    table = np.zeros((num_classes, len(IOU_THRESHOLDS)))
    for k in range(num_classes):
        g_k = [_of_class(b, c, k) for b, c in gts]
        c_k = None if crowds is None else [_of_class(b, c, k) for b, c in crowds]
        d_k = [(_of_class(b, c, k), np.asarray(s, float)[np.asarray(c) == k]) for b, s, c in dets]
        table[k] = class_ap(g_k, d_k, max_dets, c_k)
    valid = table[:, 0] > -1
    if not np.any(valid):
        return 0.0, 0.0, table
    return float(table[valid, 0].mean()), float(table[valid].mean()), table

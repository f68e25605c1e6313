"""pycocotools' COCOeval as the reference the package's own mAP (dla_infer_node.cli.coco_map) is held to."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Sequence
from typing import Any

import numpy as np


def pycocotools_map(gts: Sequence[tuple[np.ndarray, np.ndarray]],
             dets: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]],
             classes: Sequence[str], crowds: Sequence[tuple[np.ndarray, np.ndarray]] | None = None
             ) -> tuple[float, float, dict[str, float]]:
    """COCO mAP@0.5 and mAP@0.5:0.95 via pycocotools.

    ``gts[i]`` = (boxes xyxy, class_ids) of image i; ``dets[i]`` = (boxes xyxy, scores, class_ids);
    ``crowds[i]`` = (boxes xyxy, class_ids) of image i's crowd regions (annotations with iscrowd 1).
    """
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    images: list[dict[str, Any]] = []
    annotations: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    no_crowds = [(np.zeros((0, 4)), np.zeros(0, int))] * len(gts)
    for i, ((boxes, cls), (crowd_boxes, crowd_cls)) in enumerate(zip(gts, crowds or no_crowds, strict=True)):
        images.append({"id": i})
        for crowd, bs, cs in ((0, boxes, cls), (1, crowd_boxes, crowd_cls)):
            for b, c in zip(bs.tolist(), cs.tolist(), strict=True):
                w, h = b[2] - b[0], b[3] - b[1]
                annotations.append({"id": len(annotations) + 1, "image_id": i, "category_id": int(c),
                                    "bbox": [b[0], b[1], w, h], "area": w * h, "iscrowd": crowd})
    for i, (boxes, scores, cls) in enumerate(dets):
        for b, s, c in zip(boxes.tolist(), scores.tolist(), cls.tolist(), strict=True):
            results.append({"image_id": i, "category_id": int(c), "score": float(s),
                            "bbox": [b[0], b[1], b[2] - b[0], b[3] - b[1]]})
    gt = COCO()
    gt.dataset = {"images": images, "annotations": annotations,
                  "categories": [{"id": k, "name": n} for k, n in enumerate(classes)]}
    with contextlib.redirect_stdout(io.StringIO()):  # pycocotools chats on stdout
        gt.createIndex()
        if not results:
            return 0.0, 0.0, dict.fromkeys(classes, 0.0)
        dt = gt.loadRes(results)
        ev = COCOeval(gt, dt, "bbox")
        ev.params.maxDets = [1, 10, 300]  # scenes hold up to 10 objects; do not cap the candidates at 100
        ev.evaluate()
        ev.accumulate()
    # read the accumulated table directly (summarize() hard-codes maxDets=100 for its AP line):
    # precision[iou thr 0.50:0.05:0.95, recall pts, class, area range (0 = all), max dets (-1 = 300)]
    precision = ev.eval["precision"]

    def mean_valid(a: np.ndarray) -> float:
        return float(a[a > -1].mean()) if np.any(a > -1) else 0.0

    per_class = {}
    for k, name in enumerate(classes):
        per_class[name] = mean_valid(precision[:, :, k, 0, -1])
    return mean_valid(precision[0, :, :, 0, -1]), mean_valid(precision[:, :, :, 0, -1]), per_class

"""The detector every accuracy figure runs (the mAP setting), and running it over labelled frames.

Shared by ``evaluate`` on generated scenes, ``evaluate`` on the user's data (``cli.evaluate_user``) and the
robustness benchmark, so that all of them measure the same thing.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from dla_infer_node.core.pipeline import Detector

Labelled = tuple[np.ndarray, str, np.ndarray, np.ndarray]  # image, encoding, boxes xyxy, class ids
Truth = tuple[np.ndarray, np.ndarray]  # boxes xyxy, class ids
Found = tuple[np.ndarray, np.ndarray, np.ndarray]  # boxes xyxy (source pixels), scores, class ids


def evaluation_detector(backend: Any, meta: Any, conf_threshold: float = 0.001, iou_threshold: float = 0.6
                        ) -> Detector:
    """The Detector every accuracy measurement runs: the mAP setting (conf 0.001, up to 300 detections)."""
    return Detector(backend, meta, conf_threshold, iou_threshold, max_detections=300)


def detect_all(detector: Any, frames: Iterable[Labelled]) -> tuple[list[Truth], list[Found]]:
    """Ground truth and detections (boxes in source pixels) of labelled frames, through an open Detector."""
    gts: list[Truth] = []
    dets: list[Found] = []
    for image, encoding, boxes, class_ids in frames:
        d = detector.detect(image, encoding)
        gts.append((boxes, class_ids))
        dets.append((d.boxes, d.scores, d.class_ids))
    return gts, dets

"""The detector: backend (preprocess + inference) -> decoder + NMS -> boxes in source pixels.

Thresholds are plain attributes, validated by the settings table's rows (the node's parameters), so the
node's parameter callback can change them between frames; a frame in flight reads each one once, so a
change never splits a frame.
"""

from __future__ import annotations

import numpy as np

from dla_infer_node.core.backend import Backend
from dla_infer_node.core.decode import make_decoder
from dla_infer_node.core.detections import Detections
from dla_infer_node.core.model_meta import ModelMetadata
from dla_infer_node.core.settings import validate_integer, validate_number


class Detector:
    """Owns a backend; ``detect(image, encoding)`` returns :class:`Detections` in source-image pixels."""

    def __init__(self, backend: Backend, metadata: ModelMetadata, conf_threshold: float = 0.25,
                 iou_threshold: float = 0.45, max_detections: int = 100) -> None:
        self.backend = backend
        self.metadata = metadata
        self.classes = tuple(metadata.classes)
        self._decoder = make_decoder(metadata)
        self.conf_threshold = conf_threshold
        self.iou_threshold = iou_threshold
        self.max_detections = max_detections

    # validated, live-changeable thresholds ------------------------------------------------------------
    @property
    def conf_threshold(self) -> float:
        return self._conf

    @conf_threshold.setter
    def conf_threshold(self, value: float) -> None:
        self._conf = validate_number("confidence_threshold", value)

    @property
    def iou_threshold(self) -> float:
        return self._iou

    @iou_threshold.setter
    def iou_threshold(self, value: float) -> None:
        self._iou = validate_number("nms_iou_threshold", value)

    @property
    def max_detections(self) -> int:
        return self._max_det

    @max_detections.setter
    def max_detections(self, value: int) -> None:
        self._max_det = validate_integer("max_detections", value)

    # -------------------------------------------------------------------------------------------------
    def detect(self, image: np.ndarray, encoding: str) -> Detections:
        conf, iou, max_det = self._conf, self._iou, self._max_det  # one consistent set per frame
        raw = self.backend.infer(image, encoding)
        # boxes wholly in the letterbox padding are dropped before NMS and max_det (decode's docstring)
        net = self._decoder(raw.tensors, conf, iou, max_det, raw.letterbox.content)
        if len(net) == 0:
            return net
        boxes = raw.letterbox.to_source(net.boxes)
        # what float rounding leaves at the image's edge collapses to zero area once clipped: not objects
        real = (boxes[:, 2] > boxes[:, 0]) & (boxes[:, 3] > boxes[:, 1])
        return Detections(boxes[real], net.scores[real], net.class_ids[real])

    @property
    def nonfinite_dropped(self) -> int:
        """Candidates with a NaN/Inf box or score dropped before NMS, since startup."""
        return self._decoder.nonfinite_dropped

    def close(self) -> None:
        self.backend.close()

    def __enter__(self) -> Detector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

"""The detector: backend (preprocess + inference) -> decoder + NMS -> boxes in source pixels.

Thresholds are plain attributes, validated by the settings table's rows (the node's parameters), so the
node's parameter callback can change them between frames; a frame in flight reads each one once, so a
change never splits a frame.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar, overload

import numpy as np

from dla_infer_node.core.backend import Backend
from dla_infer_node.core.decode import make_decoder
from dla_infer_node.core.detections import Detections
from dla_infer_node.core.model_meta import ModelMetadata
from dla_infer_node.core.settings import validate_integer, validate_number

T = TypeVar("T")


class _Validated(Generic[T]):
    """An attribute whose every assignment is checked by one settings row (same error, same message)."""

    def __init__(self, parameter: str, validate: Callable[[str, Any], T]) -> None:
        self._parameter = parameter
        self._validate = validate

    def __set_name__(self, owner: type, name: str) -> None:
        self._slot = "_" + name

    @overload
    def __get__(self, obj: None, owner: type) -> _Validated[T]: ...
    @overload
    def __get__(self, obj: object, owner: type) -> T: ...
    def __get__(self, obj: object | None, owner: type) -> _Validated[T] | T:
        if obj is None:
            return self
        value: T = getattr(obj, self._slot)
        return value

    def __set__(self, obj: object, value: T) -> None:
        setattr(obj, self._slot, self._validate(self._parameter, value))


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

    # validated, live-changeable thresholds (each assignment goes through the settings table's row)
    conf_threshold = _Validated("confidence_threshold", validate_number)
    iou_threshold = _Validated("nms_iou_threshold", validate_number)
    max_detections = _Validated("max_detections", validate_integer)

    # -------------------------------------------------------------------------------------------------
    def detect(self, image: np.ndarray, encoding: str) -> Detections:
        # one consistent set per frame: each attribute is read once
        conf, iou, max_det = self.conf_threshold, self.iou_threshold, self.max_detections
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

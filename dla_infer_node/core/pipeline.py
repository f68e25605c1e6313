"""The detector: backend (preprocess + inference) -> decoder + NMS -> boxes in source pixels.

Thresholds are plain attributes, validated by the settings table's rows (the node's parameters), so the
node's parameter callback can change them between frames; a frame in flight reads each one once (when it
starts), so a change never splits a frame.

``detect`` is :meth:`Detector.start` then :meth:`Detector.finish`. A caller may start up to
``frames_in_flight`` frames before finishing the first (with a :class:`PipelinedBackend`, e.g. the DLA:
the next frame is prepared and submitted while the accelerator runs the one before); with any other
backend ``start`` runs the whole inference and ``frames_in_flight`` is 1.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, overload

import numpy as np

from dla_infer_node.core.backend import Backend, PipelinedBackend, RawOutputs
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


@dataclass(frozen=True)
class Started:
    """A frame started by :meth:`Detector.start`: the thresholds it read, and its outputs or its ticket."""

    conf: float
    iou: float
    max_det: int
    raw: RawOutputs | None  # a backend that is not pipelined answered at once
    ticket: Any = None


class Detector:
    """Owns a backend; ``detect(image, encoding)`` returns :class:`Detections` in source-image pixels."""

    def __init__(self, backend: Backend, metadata: ModelMetadata, conf_threshold: float = 0.25,
                 iou_threshold: float = 0.45, max_detections: int = 100) -> None:
        self.backend = backend
        # the same backend when it takes frames in two halves (checked once: isinstance on a protocol is slow)
        self._pipelined = backend if isinstance(backend, PipelinedBackend) else None
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
    @property
    def frames_in_flight(self) -> int:
        """How many frames may be started and not yet finished."""
        return max(1, int(self._pipelined.frames_in_flight)) if self._pipelined is not None else 1

    def detect(self, image: np.ndarray, encoding: str) -> Detections:
        return self.finish(self.start(image, encoding))

    def start(self, image: np.ndarray, encoding: str) -> Started:
        """Preprocess and submit one frame (a backend that is not pipelined runs it all here)."""
        # one consistent set per frame: each attribute is read once
        conf, iou, max_det = self.conf_threshold, self.iou_threshold, self.max_detections
        if self._pipelined is not None:
            return Started(conf, iou, max_det, None, self._pipelined.submit(image, encoding))
        return Started(conf, iou, max_det, self.backend.infer(image, encoding))

    def ready(self, started: Started) -> bool:
        """Whether :meth:`finish` would not wait for the accelerator."""
        return started.raw is not None or self._pipelined is None or self._pipelined.ready(started.ticket)

    def finish(self, started: Started) -> Detections:
        """Wait for the frame's outputs, then decode + NMS into source pixels."""
        raw = started.raw
        if raw is None:
            assert self._pipelined is not None
            raw = self._pipelined.collect(started.ticket)
        # boxes wholly in the letterbox padding are dropped before NMS and max_det (decode's docstring)
        net = self._decoder(raw.tensors, started.conf, started.iou, started.max_det, raw.letterbox.content)
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

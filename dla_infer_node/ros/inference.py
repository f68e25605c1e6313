"""The node's inference side: serialized frame -> image view -> detections, on the latest-frame worker.

The subscription callback only hands bytes to :meth:`FrameInference.submit` (one per camera); everything
after that runs on the worker thread of the camera's :class:`CoreService` (one per detector, i.e. per DLA
core: its thread serves the latest frame of each of its cameras in turn). A frame is taken in two stages:
read + preprocess + submit (:meth:`Detector.start`), then wait + decode + publish (:meth:`Detector.finish`);
with a DLA backend (two frames in flight) the core's next frame is submitted before the last one is
decoded, so the core does not idle while the CPU works. Frames that cannot be used are counted and skipped
(never a crash); a DLA fault, after which CUDA documents the process as inconsistent, stops the worker and
is kept in ``fatal_error`` for ``main`` to exit non-zero.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from rclpy.impl.rcutils_logger import RcutilsLogger
from rclpy.serialization import deserialize_message
from std_msgs.msg import Header

from dla_infer_node.core.cdr_image import UnsupportedEncoding
from dla_infer_node.core.detections import Detections
from dla_infer_node.core.errors import BackendError, DlaInferError, InputError
from dla_infer_node.core.image_io import DEFAULT_MAX_INPUT_PIXELS
from dla_infer_node.core.pipeline import Detector, Started
from dla_infer_node.ros import ros_convert
from dla_infer_node.ros.worker import FairFrameWorker

# what the worker hands to the publishing side for one answered frame
Publish = Callable[[Detections, Header, np.ndarray, str], None]


def apply_to_detector(detector: Detector, values: Mapping[str, Any]) -> None:
    """Validated live changes of the detector's thresholds (a frame in flight keeps the ones it read)."""
    if "confidence_threshold" in values:
        detector.conf_threshold = values["confidence_threshold"]
    if "nms_iou_threshold" in values:
        detector.iou_threshold = values["nms_iou_threshold"]
    if "max_detections" in values:
        detector.max_detections = values["max_detections"]


class CoreService:
    """One detector (one backend: a DLA core, or the CPU) and the worker thread that serves the latest frame
    of each of its cameras in turn, with as many frames in flight as the detector takes."""

    def __init__(self, detector: Detector, logger: RcutilsLogger, name: str = "dla_infer_worker") -> None:
        self.detector = detector
        self.fatal_error: BaseException | None = None
        self._logger = logger
        self.worker = FairFrameWorker(on_error=self._on_worker_error, name=name,
                                      depth=detector.frames_in_flight)

    def start(self) -> None:
        self.worker.start()

    def _on_worker_error(self, exc: BaseException) -> bool:
        if isinstance(exc, BackendError) and exc.stage == "execution":
            # CUDA documents the process as inconsistent after a DLA fault: stop, exit non-zero, respawn
            self._logger.fatal(f"accelerator fault, exiting: {exc}")
            self.fatal_error = exc
            return False
        if isinstance(exc, DlaInferError):
            self._logger.error(f"frame failed: {exc}", throttle_duration_sec=5.0)
        else:  # a bug: keep serving, but show where it happened
            self._logger.error("frame failed with an unexpected error:\n" + "".join(
                traceback.format_exception(type(exc), exc, exc.__traceback__)), throttle_duration_sec=5.0)
        return True

    def close(self) -> bool:
        """Stop the worker, then close the detector (and its backend). False if the worker did not stop
        (the backend is then left to process exit: closing it under a running inference would be worse)."""
        if not self.worker.stop(timeout=10.0):
            return False
        self.detector.close()
        return True


class FrameInference:
    """One camera's frames: its slot on a :class:`CoreService`, and every frame's fate counted.

    Without ``service`` it makes and owns one of its own around ``detector`` (the single-camera node);
    with one, ``detector`` is that service's and the service's owner starts and closes it."""

    def __init__(self, detector: Detector, msg_type: Any, compressed: bool, publish: Publish,
                 logger: RcutilsLogger, max_input_pixels: int = DEFAULT_MAX_INPUT_PIXELS, *,
                 service: CoreService | None = None, key: str = "camera") -> None:
        self._owns = service is None
        self.service = service if service is not None else CoreService(detector, logger)
        self._key = key
        self._max_pixels = max_input_pixels
        self._msg_type = msg_type
        self._compressed = compressed
        self._publish = publish
        self._logger = logger
        self._lock = threading.Lock()
        self._bad_input = 0
        self._published = 0
        self._detections = 0
        self._latency_s: deque[float] = deque(maxlen=512)
        self.service.worker.add_staged_slot(key, self._start)

    @property
    def detector(self) -> Detector:
        return self.service.detector

    @property
    def fatal_error(self) -> BaseException | None:
        return self.service.fatal_error

    def start(self) -> None:
        if self._owns:
            self.service.start()

    def wait_idle(self, timeout: float) -> bool:
        """Wait until this camera's frame in hand (and one waiting) is answered; True if idle in time."""
        return self.service.worker.wait_idle(timeout, self._key)

    def submit(self, raw: bytes) -> None:
        """Never blocks: the newest frame replaces one still waiting (counted as dropped)."""
        self.service.worker.submit(self._key, (raw, time.monotonic()))

    def _frame(self, raw: bytes) -> tuple[np.ndarray, str, Header]:
        try:
            return ros_convert.frame_from_serialized(raw, self._compressed, self._max_pixels)
        except UnsupportedEncoding:  # not plain CDR (another rmw's encoding): the general deserializer
            try:
                msg = deserialize_message(raw, self._msg_type)
            except Exception as exc:  # rclpy raises plain exceptions for undecodable bytes
                raise InputError(f"cannot deserialize: {exc}", call="rclpy.serialization.deserialize_message",
                                 params={"bytes": len(raw)}, stage="input") from exc
            frame, encoding = ros_convert.frame_from_msg(msg, self._max_pixels)
            return frame, encoding, msg.header

    def _start(self, item: tuple[bytes, float]) -> _Answer | None:
        """The frame read, preprocessed and submitted; None when it was unusable (counted)."""
        raw, t_in = item
        try:
            frame, encoding, header = self._frame(raw)
            started = self.detector.start(frame, encoding)
        except InputError as exc:
            self._count_bad(exc)
            return None
        return _Answer(self, started, frame, encoding, header, t_in)

    def _count_bad(self, exc: InputError) -> None:
        with self._lock:
            self._bad_input += 1
            n = self._bad_input
        self._logger.warning(f"dropped an unusable frame ({n} so far): {exc}", throttle_duration_sec=5.0)

    def _answer(self, answer: _Answer) -> None:
        """Wait for the frame's outputs, decode, publish (the worker calls this in start order)."""
        try:
            dets = self.detector.finish(answer.started)
        except InputError as exc:
            self._count_bad(exc)
            return
        self._publish(dets, answer.header, answer.frame, answer.encoding)
        with self._lock:
            self._latency_s.append(time.monotonic() - answer.t_in)
            self._published += 1
            self._detections += len(dets)

    def counters(self) -> dict[str, Any]:
        """Frame counters and node-internal latency (receive -> detections published) of this camera;
        ``candidates_nonfinite`` is its detector's (shared by the cameras of one core)."""
        s = self.service.worker.stats(self._key)
        with self._lock:
            lat = np.asarray(self._latency_s, dtype=np.float64) * 1e3
            out: dict[str, Any] = {"frames_in": s.submitted, "frames_processed": self._published,
                                   "frames_dropped": s.dropped, "frames_bad_input": self._bad_input,
                                   "frames_failed": s.failed, "detections": self._detections,
                                   "candidates_nonfinite": self.detector.nonfinite_dropped}
        out["latency_ms_p50"] = float(np.percentile(lat, 50)) if lat.size else 0.0
        out["latency_ms_p95"] = float(np.percentile(lat, 95)) if lat.size else 0.0
        return out

    def close(self) -> bool:
        """Stop the worker, then close the detector (and its backend), when this camera owns them; a shared
        service is its owner's to close. False if the worker did not stop."""
        return self.service.close() if self._owns else True


@dataclass(frozen=True)
class _Answer:
    """One camera frame in flight: what its publication needs once its outputs are there. The frame view
    (over the message's bytes) is kept for the debug overlay."""

    owner: FrameInference
    started: Started
    frame: np.ndarray
    encoding: str
    header: Header
    t_in: float

    def ready(self) -> bool:
        return self.owner.detector.ready(self.started)

    def finish(self) -> None:
        self.owner._answer(self)

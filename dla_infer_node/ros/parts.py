"""The node's parts, built in one place: detector and worker, input watch, outputs and diagnostics.

Both node kinds drive one :class:`DetectorParts`: the plain node (``node.py``) calls :meth:`configure` and
:meth:`activate` in its constructor; the managed node (``lifecycle_node.py``) calls them, and
:meth:`deactivate` / :meth:`cleanup`, from its transitions. So the subscription, the worker, the outputs and
``/diagnostics`` are made by the same code whichever node runs them.

- configure: the backend opened (:func:`open_detector`: the ONNX Runtime session, or the DLA module
  loaded and its memory registered; the labels read and the Detector built around them), the worker made
  (and started), the input subscription's watchers made; the diagnostics reporter made once, at the first
  configure (its period is read-only), and kept for the node's life, so a monitor sees a
  configured-then-cleaned-up node as well.
- activate: outputs (detections, latched label_info, debug_image), the raw image subscription, the
  other-transport hint.
- deactivate: the subscription first (no new frame), the frame in hand answered, then the outputs.
- cleanup: deactivate, worker stopped, detector and backend closed, input watch closed.

With ``cameras`` the same phases run over a :class:`~dla_infer_node.ros.camera_parts.CameraSet`: one
backend per DLA core, each camera with its own subscription, slot, outputs and status.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from rclpy.impl.rcutils_logger import RcutilsLogger
from rclpy.node import Node
from sensor_msgs.msg import CompressedImage, Image
from std_msgs.msg import Header

from dla_infer_node.backends.factory import BackendSettings, open_backend
from dla_infer_node.core.backend import Backend
from dla_infer_node.core.detections import Detections
from dla_infer_node.core.model_meta import ModelMetadata
from dla_infer_node.core.pipeline import Detector
from dla_infer_node.ros.camera_parts import CameraSet
from dla_infer_node.ros.diagnostics import DiagnosticsReporter, StatusSource
from dla_infer_node.ros.inference import FrameInference, apply_to_detector
from dla_infer_node.ros.input_subscription import InputWatch
from dla_infer_node.ros.node_config import NodeConfig, load_labels
from dla_infer_node.ros.outputs import DetectionOutputs
from dla_infer_node.ros.qos import image_qos
from dla_infer_node.ros.topic_hints import OtherTransportHint

Injected = tuple[Backend, ModelMetadata]

# counters summed over configure cycles (a lifecycle node may configure several times)
_COUNTS = ("frames_in", "frames_processed", "frames_dropped", "frames_bad_input", "frames_failed",
           "detections", "candidates_nonfinite")
_OK: tuple[str, str, Mapping[str, Any]] = ("ok", "ok", {})


def open_configured_backend(config: NodeConfig) -> Injected:
    """The backend the configuration names (the factory imports ONNX Runtime / CUDA only when chosen)."""
    return open_backend(BackendSettings(
        backend=config.backend, model_path=config.model_path, metadata_path=config.metadata_path,
        loadable_path=config.loadable_path, artifact_path=config.artifact_path,
        runtime_mode=config.runtime_mode, dla_core=config.dla_core, frames_in_flight=config.frames_in_flight,
        ort_providers=config.ort_providers, ort_threads=config.ort_threads,
        preprocess_device=config.preprocess_device))


@dataclass(frozen=True)
class OpenedDetector:
    detector: Detector
    classes: tuple[str, ...]
    backend_name: str
    model_name: str
    preprocess: str  # where the backend's input path runs: "cpu" or "gpu" (the fused kernel)


def open_detector(config: NodeConfig, injected: Injected | None = None) -> OpenedDetector:
    """Open the configured backend (or take the injected one) and build the detector; on any failure the
    backend is closed again before the error propagates."""
    backend, metadata = injected if injected is not None else open_configured_backend(config)
    try:
        classes = (load_labels(config.labels_path, len(metadata.classes))
                   if config.labels_path else tuple(metadata.classes))
        detector = Detector(backend, metadata, config.confidence_threshold, config.nms_iou_threshold,
                            config.max_detections)
    except BaseException:
        backend.close()
        raise
    # a backend without the attribute (a stand-in injected by tests or benchmarks) preprocesses on the CPU
    preprocess = str(getattr(backend, "preprocess_device", "cpu"))
    return OpenedDetector(detector, classes, backend.name, metadata.name, preprocess)


def input_of(config: NodeConfig) -> tuple[Any, str, bool]:
    """(message type, relative topic name, compressed?) of the image input ``input_transport`` selects."""
    compressed = config.input_transport == "compressed"
    msg_type = CompressedImage if compressed else Image
    return msg_type, ("image/compressed" if compressed else "image"), compressed


def stop_inference(inference: FrameInference, logger: RcutilsLogger) -> bool:
    """Stop the worker, then close the detector (and its backend), and log the frame counts. False when
    the worker did not stop (the backend is then left to process exit)."""
    if not inference.close():
        logger.error("worker did not stop within 10 s; backend left to process exit")
        return False
    c = inference.counters()
    logger.info(f"stopped: worker joined, backend closed (frames in {c['frames_in']}, processed "
                f"{c['frames_processed']}, dropped {c['frames_dropped']}, bad input {c['frames_bad_input']}, "
                f"failed {c['frames_failed']})")
    return True


class DetectorParts:
    """Everything between the node's parameters and its topics, for one node (either kind)."""

    def __init__(self, node: Node, *, report_state: bool = False) -> None:
        self._node = node
        self._report_state = report_state  # the lifecycle node adds its state to /diagnostics
        self.config: NodeConfig | None = None
        self.opened: OpenedDetector | None = None
        self.state = "unconfigured"
        self._inference: FrameInference | None = None
        self._watch: InputWatch | None = None
        self._outputs: DetectionOutputs | None = None
        self._outputs_lock = threading.Lock()  # the worker publishes while deactivate withdraws outputs
        self._sub: Any = None
        self._hint: OtherTransportHint | None = None
        self._diagnostics: DiagnosticsReporter | None = None
        self._debug_image = False  # the live value; outputs made at activate start from it
        self._past: dict[str, int] = dict.fromkeys(_COUNTS, 0)
        self._fatal: BaseException | None = None
        self._cameras: CameraSet | None = None  # several cameras: they replace the single-camera parts

    # ---- the transitions --------------------------------------------------------------------------------
    def configure(self, config: NodeConfig, injected: Injected | None = None) -> OpenedDetector:
        """Open the backend and make the worker; on any failure everything made so far is released."""
        if config.camera_configs:
            return self._configure_cameras(config, injected)
        opened = open_detector(config, injected)
        self.config, self.opened = config, opened
        self._debug_image = config.debug_image
        try:
            msg_type, _, compressed = input_of(config)
            self._inference = FrameInference(opened.detector, msg_type, compressed, self._publish,
                                             self._node.get_logger(), config.max_input_pixels)
            self._inference.start()
            self._watch = InputWatch(self._node, config, self.counters,
                                     image_qos(config.qos_reliability, config.qos_depth))
            if self._diagnostics is None:
                sources: list[StatusSource] = [self._health_status, self._monitor_status, self._hint_status]
                self._diagnostics = DiagnosticsReporter(self._node, config.diagnostics_period, self.counters,
                                                        self._info, opened.backend_name, sources=sources)
        except BaseException:
            self.cleanup()
            raise
        self.state = "inactive"
        return opened

    def _configure_cameras(self, config: NodeConfig, injected: Injected | None) -> OpenedDetector:
        def open_core(core: int) -> tuple[Detector, OpenedDetector]:  # an injected backend serves every core
            opened = open_detector(replace(config, dla_core=core), injected)
            return opened.detector, opened

        self._cameras = CameraSet(self._node, config, open_core)
        assert isinstance(self._cameras.opened, OpenedDetector)
        self.config, self.opened = config, self._cameras.opened
        self.state = "inactive"
        return self.opened

    def activate(self) -> str:
        """Outputs, then the subscription; returns the resolved input topic (with several cameras, each
        camera's topic, core and QoS)."""
        if self._cameras is not None:
            topics = self._cameras.activate()
            self.state = "active"
            return ", ".join(f"{c.camera.name}={t} (core {c.camera.dla_core}, {c.config.qos_reliability}, "
                             f"depth {c.config.qos_depth})" for c, t in zip(self._cameras.cameras, topics,
                                                                          strict=True))
        assert self.config is not None and self.opened is not None and self._watch is not None
        cfg = self.config
        with self._outputs_lock:
            self._outputs = DetectionOutputs(self._node, self.opened.classes, cfg.class_id_mode,
                                             self.opened.detector.conf_threshold, self._debug_image)
        msg_type, input_name, compressed = input_of(cfg)
        # raw (serialized) frames: the worker reads the few header fields and views the pixels in place
        # (cdr_image), instead of rclpy copying every frame into Python objects on the executor thread
        self._sub = self._watch.subscribe(msg_type, input_name, self._on_image)
        self._hint = OtherTransportHint(self._node, self._sub.topic_name, compressed)
        self.state = "active"
        return str(self._sub.topic_name)

    def deactivate(self) -> None:
        """The subscription first (no new frame), the frame in hand answered, then the outputs."""
        if self._cameras is not None:
            self._cameras.deactivate()
        if self._sub is not None:
            self._node.destroy_subscription(self._sub)
            self._sub = None
            if self._watch is not None:
                self._watch.unsubscribed()
        if self._hint is not None:
            self._hint.close()
            self._hint = None
        if self._inference is not None and not self._inference.wait_idle(10.0):
            self._node.get_logger().warning("the frame in hand did not finish within 10 s; its result is "
                                            "dropped")
        with self._outputs_lock:
            outputs, self._outputs = self._outputs, None
        if outputs is not None:
            outputs.close()
        if self.state == "active":
            self.state = "inactive"

    def cleanup(self) -> None:
        """Everything the transitions made, released in reverse order. Idempotent."""
        self.deactivate()
        if self._cameras is not None:
            self._fatal = self._cameras.fatal_error
            self._cameras.close()
            self._cameras = None
        if self._inference is not None:
            self._fatal = self._inference.fatal_error
            counts = self._inference.counters()
            self._past = {k: self._past[k] + int(counts[k]) for k in _COUNTS}
            stop_inference(self._inference, self._node.get_logger())
            self._inference = None
        if self._watch is not None:
            self._watch.close()
            self._watch = None
        self.opened = None
        self.state = "unconfigured"

    # ---- running ----------------------------------------------------------------------------------------
    def _on_image(self, raw: bytes) -> None:
        inference = self._inference
        assert inference is not None  # the subscription exists only while it does
        inference.submit(raw)  # the executor thread never waits for inference
        # Let the worker (just notified) take the GIL now: otherwise it waits until this thread has run
        # the executor's Python back into rcl_wait, measured at ~0.45 ms per frame on a 2-core machine
        # (0.09 ms with this line). sleep(0) only releases and re-acquires the GIL.
        time.sleep(0)

    def _publish(self, dets: Detections, header: Header, frame: np.ndarray, encoding: str) -> None:
        with self._outputs_lock:
            if self._outputs is not None:  # not active: the result of a frame taken before is dropped
                self._outputs.publish(dets, header, frame, encoding)

    def apply(self, values: Mapping[str, Any]) -> None:
        """Validated live parameter changes, applied to whatever exists now (and kept for what comes)."""
        if "debug_image" in values:
            self._debug_image = bool(values["debug_image"])
        if self._cameras is not None:
            self._cameras.apply(values)
        if self._inference is not None:
            apply_to_detector(self._inference.detector, values)
        with self._outputs_lock:
            if self._outputs is not None:
                self._outputs.debug_enabled = self._debug_image
                if "confidence_threshold" in values and self.opened is not None:
                    # label_info carries the threshold: a latched stale value would mislead late joiners
                    self._outputs.publish_label_info(self.opened.detector.conf_threshold)
        if self._watch is not None:
            self._watch.apply(values)

    @property
    def fatal_error(self) -> BaseException | None:
        if self._cameras is not None:
            return self._cameras.fatal_error
        return self._inference.fatal_error if self._inference is not None else self._fatal

    def counters(self) -> dict[str, Any]:
        """Frame counters summed over configure cycles; node-internal latency of the current one. With
        several cameras, the current cameras' sum and each camera's under ``cameras``."""
        if self._cameras is not None:
            return self._cameras.counters()
        live = self._inference.counters() if self._inference is not None else {}
        out: dict[str, Any] = {k: self._past[k] + int(live.get(k, 0)) for k in _COUNTS}
        out["latency_ms_p50"] = live.get("latency_ms_p50", 0.0)
        out["latency_ms_p95"] = live.get("latency_ms_p95", 0.0)
        outputs = self._outputs
        out["debug_images"] = outputs.debug_images if outputs is not None else 0
        out["detections_subscribers"] = outputs.detection_subscribers() if outputs is not None else 0
        return out

    # ---- diagnostics: stable sources over parts that come and go -----------------------------------------
    def _info(self) -> dict[str, Any]:
        info: dict[str, Any] = {}
        if self.opened is not None:
            info = {"backend": self.opened.backend_name, "preprocess": self.opened.preprocess,
                    "model": self.opened.model_name,
                    "confidence_threshold": self.opened.detector.conf_threshold}
        if self._report_state:
            info["lifecycle_state"] = self.state
        return info

    def _health_status(self) -> tuple[str, str, Mapping[str, Any]]:
        return self._watch.health() if self._watch is not None else _OK

    def _monitor_status(self) -> tuple[str, str, Mapping[str, Any]]:
        return self._watch.monitor_status() if self._watch is not None else _OK

    def _hint_status(self) -> tuple[str, str, Mapping[str, Any]]:
        return self._hint.status() if self._hint is not None else _OK

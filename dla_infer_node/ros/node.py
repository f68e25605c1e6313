"""The ROS 2 node: a short composition of parameters, topics, inference, outputs and diagnostics.

Data path: subscription callback (executor thread; serialized bytes, ``raw=True``) ->
:class:`~dla_infer_node.ros.inference.FrameInference` (latest-frame worker thread: bytes -> header +
zero-copy ndarray view -> ``Detector.detect``) -> :class:`~dla_infer_node.ros.outputs.DetectionOutputs`
(``detections``, ``debug_image`` while subscribed);
:class:`~dla_infer_node.ros.diagnostics.DiagnosticsReporter` publishes the counters.
Everything below the wiring is ROS-free.
Exit codes of :func:`main`: 0 after SIGINT/SIGTERM, 2 for an invalid configuration (one line naming it: a
parameter, a parameters file, or a key of the model metadata / artifact sidecar, none of which a restart
can fix), 1 for a backend that cannot start or a fatal accelerator fault (so a launch file's respawn
restarts it).
Written against rclpy's Humble API (with fallbacks for anything newer).
"""

from __future__ import annotations

import sys
import time
from dataclasses import replace
from typing import Any

from rclpy.node import Node

from dla_infer_node.core.errors import DlaInferError
from dla_infer_node.ros.camera_parts import CameraSet
from dla_infer_node.ros.diagnostics import DiagnosticsReporter
from dla_infer_node.ros.executors import (
    NODE_NAME,
    executor_factory,
    has_events_executor,
    shutdown_executor,
)
from dla_infer_node.ros.inference import FrameInference
from dla_infer_node.ros.input_watch import InputWatch
from dla_infer_node.ros.outputs import DetectionOutputs
from dla_infer_node.ros.param_binding import declare_parameters
from dla_infer_node.ros.qos import image_qos
from dla_infer_node.ros.startup import (
    Injected,
    OpenedDetector,
    apply_live_changes,
    input_of,
    open_detector,
    run_node,
    stop_inference,
)
from dla_infer_node.ros.topic_hints import OtherTransportHint

__all__ = ["NODE_NAME", "DlaInferNode", "executor_factory", "has_events_executor", "main",
           "shutdown_executor"]


class DlaInferNode(Node):
    """Images in, ``vision_msgs/Detection2DArray`` out.

    ``injected`` = (backend, metadata) replaces the configured backend (benchmarks, tests): there is no
    user-facing backend value for it. Parameters are validated before any backend is opened; a
    :class:`ParameterError` or backend error propagates out of the constructor.
    """

    def __init__(self, *, injected: Injected | None = None, node_name: str = NODE_NAME,
                 **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        self._closed = False
        self._inference: FrameInference | None = None
        self._watch: InputWatch | None = None
        self._cameras: CameraSet | None = None
        try:
            self.config = declare_parameters(self, check_files=injected is None,
                                             on_change=self._on_parameters_changed)
            executor_factory(self.config.executor)  # refused here, before any backend opens
            if self.config.camera_configs:
                self._start_cameras(injected)
            else:
                self._start(injected)
        except BaseException as exc:
            if isinstance(exc, DlaInferError):  # main reports it under this node's namespaced name
                exc.logger_name = self.get_logger().name
            self.close()
            self.destroy_node()
            raise
        if self._cameras is not None:
            return
        self.get_logger().info(
            f"ready: backend={self._backend_name} model={self._model_name} classes={len(self.classes)} "
            f"input={self._sub.topic_name} ({self.config.qos_reliability}, depth {self.config.qos_depth})")

    def _start_cameras(self, injected: Injected | None) -> None:
        def open_core(core: int) -> tuple[Any, OpenedDetector]:  # an injected backend serves every core
            opened = open_detector(replace(self.config, dla_core=core), injected)
            return opened.detector, opened

        self._cameras = cameras = CameraSet(self, self.config, open_core)
        assert cameras.opened is not None
        self.classes = cameras.opened.classes
        topics = cameras.activate()
        listed = ", ".join(f"{c.camera.name}={t} (core {c.camera.dla_core}, {c.config.qos_reliability}, "
                           f"depth {c.config.qos_depth})"
                           for c, t in zip(cameras.cameras, topics, strict=True))
        self.get_logger().info(
            f"ready: backend={cameras.opened.backend_name} model={cameras.opened.model_name} "
            f"classes={len(self.classes)} cores={list(cameras.services)} cameras: {listed}")

    def _start(self, injected: Injected | None) -> None:
        cfg = self.config
        opened = open_detector(cfg, injected)
        detector = opened.detector
        self.classes = opened.classes
        self._backend_name = opened.backend_name
        self._model_name = opened.model_name
        self._outputs = DetectionOutputs(self, self.classes, cfg.class_id_mode, cfg.confidence_threshold,
                                         cfg.debug_image)
        msg_type, input_name, compressed = input_of(cfg)
        self._inference = FrameInference(detector, msg_type, compressed, self._outputs.publish,
                                         self.get_logger(), cfg.max_input_pixels)
        self._watch = InputWatch(self, cfg, self.counters, image_qos(cfg.qos_reliability, cfg.qos_depth))
        # raw (serialized) frames: the worker reads the few header fields and views the pixels in place
        # (cdr_image), instead of rclpy copying every frame into Python objects on the executor thread
        self._sub = self._watch.subscribe(msg_type, input_name, self._on_image)
        self._hint = OtherTransportHint(self, self._sub.topic_name, compressed)
        self._diagnostics = DiagnosticsReporter(
            self, cfg.diagnostics_period, self.counters, self._diagnostic_info, self._backend_name,
            sources=[*self._watch.sources(), self._hint.status])
        self._inference.start()

    @property
    def fatal_error(self) -> BaseException | None:
        if self._cameras is not None:
            return self._cameras.fatal_error
        return self._inference.fatal_error if self._inference is not None else None

    def _on_image(self, raw: bytes) -> None:
        assert self._inference is not None  # the subscription exists only after it
        self._inference.submit(raw)  # the executor thread never waits for inference
        # Let the worker (just notified) take the GIL now: otherwise it waits until this thread has run
        # the executor's Python back into rcl_wait, measured at ~0.45 ms per frame on a 2-core machine
        # (0.09 ms with this line). sleep(0) only releases and re-acquires the GIL.
        time.sleep(0)

    def _on_parameters_changed(self, values: dict[str, Any]) -> None:
        if self._cameras is not None:
            self._cameras.apply(values)
            self.get_logger().info(f"parameters updated: {values}")
            return
        if self._inference is None:  # declaring at startup
            return
        apply_live_changes(values, self._inference.detector, self._outputs)
        if self._watch is not None:
            self._watch.apply(values)
        self.get_logger().info(f"parameters updated: {values}")

    def _diagnostic_info(self) -> dict[str, Any]:
        assert self._inference is not None
        return {"backend": self._backend_name, "model": self._model_name,
                "confidence_threshold": self._inference.detector.conf_threshold}

    def counters(self) -> dict[str, Any]:
        """Frame counters and node-internal latency (receive -> detections published); with several
        cameras, their sum and each camera's under ``cameras``."""
        if self._cameras is not None:
            return self._cameras.counters()
        assert self._inference is not None
        return {**self._inference.counters(), "debug_images": self._outputs.debug_images,
                "detections_subscribers": self._outputs.detection_subscribers()}

    def close(self) -> None:
        """Stop the worker, then close the detector (and its backend). Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._cameras is not None:
            self._cameras.close()
        if self._watch is not None:
            self._watch.close()
        if self._inference is None:
            return
        stop_inference(self._inference, self.get_logger())


def main(argv: list[str] | None = None, *, injected: Injected | None = None) -> int:
    """Run the node until SIGINT/SIGTERM (exit 0), a fatal fault (1) or a bad startup (2 or 1)."""
    return run_node(NODE_NAME, lambda: DlaInferNode(injected=injected), lambda node: node.config.executor,
                    argv)


if __name__ == "__main__":
    sys.exit(main())

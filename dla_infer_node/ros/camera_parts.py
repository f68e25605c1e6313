"""Several cameras in one node: one detector per DLA core, and each camera's own topics, slot and status.

:class:`CameraSet` opens one backend per core of ``dla_cores`` (the loadable loaded once per core; the
cuDLA backends share the process's one CUDA context, the device's primary context) and wraps each in a
:class:`~dla_infer_node.ros.inference.CoreService`, whose worker thread serves the newest frame of each of
its cameras in turn (round robin: a 60 Hz camera cannot starve a 10 Hz one). Each camera is a
:class:`CameraParts`: its subscription (own topic, transport, QoS), its latest-frame slot on its core,
its outputs under its name (``<camera>/detections``, ``<camera>/debug_image``, ``<camera>/label_info``),
its input watch and its own ``/diagnostics`` status (``<node>: <camera>``).

The phases follow the node's: configure (backends, slots, watches), activate (outputs, subscriptions),
deactivate (subscriptions, then the frames in hand, then outputs), cleanup (workers stopped, backends
closed). Live parameters reach every camera and every core's detector.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import numpy as np
from rclpy.node import Node
from sensor_msgs.msg import CompressedImage, Image
from std_msgs.msg import Header

from dla_infer_node.core.detections import Detections
from dla_infer_node.core.settings import CameraConfig
from dla_infer_node.ros.diagnostics import DiagnosticsReporter
from dla_infer_node.ros.inference import CoreService, FrameInference, apply_to_detector
from dla_infer_node.ros.input_subscription import InputWatch
from dla_infer_node.ros.node_config import NodeConfig
from dla_infer_node.ros.outputs import DetectionOutputs
from dla_infer_node.ros.qos import image_qos
from dla_infer_node.ros.topic_hints import OtherTransportHint


class Opened(Protocol):
    """What the node opened: the classes it names and the backend and model it reports."""

    @property
    def classes(self) -> tuple[str, ...]: ...

    @property
    def backend_name(self) -> str: ...

    @property
    def model_name(self) -> str: ...

    @property
    def preprocess(self) -> str: ...


# counters a node reports as the sum over its cameras
SUMMED = ("frames_in", "frames_processed", "frames_dropped", "frames_bad_input", "frames_failed",
          "detections", "debug_images", "detections_subscribers")


class CameraParts:
    """One camera of a :class:`CameraSet`: its slot on its core's worker, input watch, outputs and status."""

    def __init__(self, node: Node, config: NodeConfig, camera: CameraConfig, service: CoreService,
                 opened: Opened) -> None:
        self._node = node
        self.config = config  # the node's configuration as this camera sees it (config.for_camera)
        self.camera = camera
        self._opened = opened
        self._outputs: DetectionOutputs | None = None
        self._outputs_lock = threading.Lock()  # the worker publishes while deactivate withdraws outputs
        self._debug_image = config.debug_image
        self._sub: Any = None
        self._hint: OtherTransportHint | None = None
        self._compressed = compressed = camera.input_transport == "compressed"
        msg_type = CompressedImage if compressed else Image
        self.inference = FrameInference(service.detector, msg_type, compressed, self._publish,
                                        node.get_logger(), config.max_input_pixels, service=service,
                                        key=camera.name)
        self.watch = InputWatch(node, config, self.counters,
                                image_qos(config.qos_reliability, config.qos_depth))
        self._diagnostics = DiagnosticsReporter(
            node, config.diagnostics_period, self.counters, self._info, opened.backend_name,
            sources=[self.watch.health, self.watch.monitor_status, self._hint_status],
            label=camera.name)

    def activate(self) -> str:
        """Outputs, then the subscription; returns the resolved input topic."""
        with self._outputs_lock:
            self._outputs = DetectionOutputs(self._node, self._opened.classes, self.config.class_id_mode,
                                             self.inference.detector.conf_threshold, self._debug_image,
                                             namespace=self.camera.name)
        msg_type = CompressedImage if self._compressed else Image
        self._sub = self.watch.subscribe(msg_type, self.camera.topic, self._on_image)
        self._hint = OtherTransportHint(self._node, self._sub.topic_name, self._compressed)
        return str(self._sub.topic_name)

    def deactivate(self) -> None:
        """The subscription first (no new frame), this camera's frame in hand answered, then the outputs."""
        if self._sub is not None:
            self._node.destroy_subscription(self._sub)
            self._sub = None
        if self._hint is not None:
            self._hint.close()
            self._hint = None
        if not self.inference.wait_idle(10.0):
            self._node.get_logger().warning(f"camera {self.camera.name}: the frame in hand did not finish "
                                            "within 10 s; its result is dropped")
        with self._outputs_lock:
            outputs, self._outputs = self._outputs, None
        if outputs is not None:
            outputs.close()

    def close(self) -> None:
        self.deactivate()
        self.watch.close()
        self._diagnostics.close()

    def _on_image(self, raw: bytes) -> None:
        self.inference.submit(raw)  # the executor thread never waits for inference
        time.sleep(0)  # let the worker take the GIL now (see DlaInferNode._on_image)

    def _publish(self, dets: Detections, header: Header, frame: np.ndarray, encoding: str) -> None:
        with self._outputs_lock:
            if self._outputs is not None:  # withdrawn: the result of a frame taken before is dropped
                self._outputs.publish(dets, header, frame, encoding)

    def apply(self, values: Mapping[str, Any]) -> None:
        """Live changes that concern this camera (the core's detector is the set's to change)."""
        if "debug_image" in values:
            self._debug_image = bool(values["debug_image"])
        with self._outputs_lock:
            if self._outputs is not None:
                self._outputs.debug_enabled = self._debug_image
                if "confidence_threshold" in values:  # label_info carries it
                    self._outputs.publish_label_info(self.inference.detector.conf_threshold)
        self.watch.apply(values)

    def counters(self) -> dict[str, Any]:
        out = self.inference.counters()
        outputs = self._outputs
        out["debug_images"] = outputs.debug_images if outputs is not None else 0
        out["detections_subscribers"] = outputs.detection_subscribers() if outputs is not None else 0
        return out

    def _info(self) -> dict[str, Any]:
        return {"camera": self.camera.name, "input": self._sub.topic_name if self._sub is not None else "",
                "dla_core": self.camera.dla_core, "backend": self._opened.backend_name,
                "preprocess": self._opened.preprocess, "model": self._opened.model_name,
                "confidence_threshold": self.inference.detector.conf_threshold}

    def _hint_status(self) -> tuple[str, str, Mapping[str, Any]]:
        return self._hint.status() if self._hint is not None else ("ok", "ok", {})


class CameraSet:
    """The cameras of one node and the cores that serve them; see the module docstring."""

    def __init__(self, node: Node, config: NodeConfig,
                 open_core: Callable[[int], tuple[Any, Opened]]) -> None:
        """``open_core(core)`` opens one core's backend: (its Detector, what was opened)."""
        self._node = node
        self.services: dict[int, CoreService] = {}
        self.cameras: list[CameraParts] = []
        self.opened: Opened | None = None
        try:
            for core in config.cores:  # one backend per core, the loadable loaded once on each
                detector, opened = open_core(core)
                self.opened = self.opened or opened
                self.services[core] = CoreService(detector, node.get_logger(), name=f"dla_infer_core{core}")
            assert self.opened is not None
            for camera in config.camera_configs:
                self.cameras.append(CameraParts(node, config.for_camera(camera), camera,
                                                self.services[camera.dla_core], self.opened))
            for service in self.services.values():
                service.start()
        except BaseException:
            self.close()
            raise

    def activate(self) -> list[str]:
        """Every camera's outputs and subscription; their resolved input topics."""
        return [camera.activate() for camera in self.cameras]

    def deactivate(self) -> None:
        for camera in self.cameras:
            camera.deactivate()

    def close(self) -> bool:
        """Cameras withdrawn, then each core's worker stopped and backend closed. False if a worker did not
        stop. Idempotent."""
        for camera in self.cameras:
            camera.close()
        self.cameras = []
        ok = True
        for core, service in list(self.services.items()):
            if not service.close():
                self._node.get_logger().error(f"core {core}: worker did not stop within 10 s; backend left "
                                              "to process exit")
                ok = False
            del self.services[core]
        return ok

    @property
    def fatal_error(self) -> BaseException | None:
        return next((s.fatal_error for s in self.services.values() if s.fatal_error is not None), None)

    def apply(self, values: Mapping[str, Any]) -> None:
        """Validated live changes: thresholds to every core's detector, the rest to every camera."""
        for service in self.services.values():
            apply_to_detector(service.detector, values)
        for camera in self.cameras:
            camera.apply(values)

    def counters(self) -> dict[str, Any]:
        """The cameras' counters summed, and each camera's under ``cameras``."""
        per = {camera.camera.name: camera.counters() for camera in self.cameras}
        out: dict[str, Any] = {k: sum(int(c[k]) for c in per.values()) for k in SUMMED}
        out["candidates_nonfinite"] = sum(s.detector.nonfinite_dropped for s in self.services.values())
        out["latency_ms_p50"] = max((c["latency_ms_p50"] for c in per.values()), default=0.0)
        out["latency_ms_p95"] = max((c["latency_ms_p95"] for c in per.values()), default=0.0)
        out["cameras"] = per
        return out

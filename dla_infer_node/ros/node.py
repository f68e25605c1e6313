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

import signal
import sys
import threading
import time
import traceback
from collections.abc import Mapping
from typing import Any

import rclpy
from rclpy.executors import Executor
from rclpy.node import Node
from rclpy.qos import QoSCompatibility, qos_check_compatible
from rclpy.signals import SignalHandlerOptions
from sensor_msgs.msg import CompressedImage, Image

from dla_infer_node.core.backend import Backend
from dla_infer_node.core.codec_stderr import CODEC_STDERR, write_stderr
from dla_infer_node.core.errors import DlaInferError, ModelError, ParameterError
from dla_infer_node.core.model_meta import ModelMetadata
from dla_infer_node.ros.diagnostics import DiagnosticsReporter
from dla_infer_node.ros.executors import (
    NODE_NAME,
    executor_factory,
    has_events_executor,
    shutdown_executor,
    try_shutdown,
)
from dla_infer_node.ros.health import InputHealth
from dla_infer_node.ros.image_subscription import image_subscription
from dla_infer_node.ros.inference import FrameInference
from dla_infer_node.ros.input_monitor import InputMonitor
from dla_infer_node.ros.outputs import DetectionOutputs
from dla_infer_node.ros.param_binding import declare_parameters, params_file_problem
from dla_infer_node.ros.params import NodeConfig, load_labels
from dla_infer_node.ros.qos import image_qos

try:  # Humble has it; keep a stand-in so an older/newer rclpy without it still imports
    from rclpy.executors import ExternalShutdownException
except ImportError:  # pragma: no cover
    class ExternalShutdownException(Exception):  # type: ignore[no-redef]
        pass

__all__ = ["NODE_NAME", "DlaInferNode", "executor_factory", "has_events_executor", "main",
           "shutdown_executor"]

Injected = tuple[Backend, ModelMetadata]


def open_configured_backend(config: NodeConfig) -> Injected:
    from dla_infer_node.backends.factory import BackendSettings, open_backend  # opens ORT/CUDA lazily

    return open_backend(BackendSettings(
        backend=config.backend, model_path=config.model_path, metadata_path=config.metadata_path,
        loadable_path=config.loadable_path, artifact_path=config.artifact_path,
        runtime_mode=config.runtime_mode, dla_core=config.dla_core, ort_providers=config.ort_providers,
        ort_threads=config.ort_threads, preprocess_device=config.preprocess_device))


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
        try:
            self.config = declare_parameters(self, check_files=injected is None,
                                             on_change=self._on_parameters_changed)
            executor_factory(self.config.executor)  # refused here, before any backend opens
            self._start(injected)
        except BaseException as exc:
            if isinstance(exc, DlaInferError):  # main reports it under this node's namespaced name
                exc.logger_name = self.get_logger().name
            self.close()
            self.destroy_node()
            raise
        self.get_logger().info(
            f"ready: backend={self._backend_name} model={self._model_name} classes={len(self.classes)} "
            f"input={self._sub.topic_name} ({self.config.qos_reliability}, depth {self.config.qos_depth})")

    def _start(self, injected: Injected | None) -> None:
        cfg = self.config
        backend, metadata = injected if injected is not None else open_configured_backend(cfg)
        try:
            self.classes = (load_labels(cfg.labels_path, len(metadata.classes))
                            if cfg.labels_path else tuple(metadata.classes))
            from dla_infer_node.core.pipeline import Detector

            detector = Detector(backend, metadata, cfg.confidence_threshold, cfg.nms_iou_threshold,
                                cfg.max_detections)
        except BaseException:
            backend.close()
            raise
        self._backend_name = backend.name
        self._model_name = metadata.name
        self._outputs = DetectionOutputs(self, self.classes, cfg.class_id_mode, cfg.confidence_threshold,
                                         cfg.debug_image)
        compressed = cfg.input_transport == "compressed"
        msg_type: Any = CompressedImage if compressed else Image
        self._inference = FrameInference(detector, msg_type, compressed, self._outputs.publish,
                                         self.get_logger(), cfg.max_input_pixels)
        CODEC_STDERR.sink = self._codec_output  # libjpeg/libpng warnings: through the throttled logger
        self._health = InputHealth(self.counters, self._incompatible_publishers)
        self._qos = image_qos(cfg.qos_reliability, cfg.qos_depth)
        self._monitor = InputMonitor(cfg.input_loss_warn_ratio, cfg.input_stall_periods)
        # raw=True: the executor thread hands over the serialized bytes; the worker reads the few header
        # fields and views the pixels in place (cdr_image), instead of rclpy copying every frame into
        # Python objects on the executor thread first
        self._sub, self._matched_publishers = image_subscription(
            self, msg_type, "image/compressed" if compressed else "image", self._qos, self._on_image,
            self._monitor, with_info=cfg.executor != "events",
            on_incompatible_qos=self._on_incompatible_qos)
        self._diagnostics = DiagnosticsReporter(
            self, cfg.diagnostics_period, self.counters, self._diagnostic_info, self._backend_name,
            sources=[self._health, lambda: self._monitor.status(self._matched_publishers())])
        self._inference.start()

    @property
    def fatal_error(self) -> BaseException | None:
        return self._inference.fatal_error if self._inference is not None else None

    def _on_image(self, raw: bytes, info: Mapping[str, Any] | None) -> None:
        assert self._inference is not None  # the subscription exists only after it
        self._inference.submit(raw)  # the executor thread never waits for inference
        self._monitor.on_frame(info)
        # Let the worker (just notified) take the GIL now: otherwise it waits until this thread has run
        # the executor's Python back into rcl_wait, measured at ~0.45 ms per frame on a 2-core machine
        # (0.09 ms with this line). sleep(0) only releases and re-acquires the GIL.
        time.sleep(0)

    def _on_incompatible_qos(self, event: Any) -> None:
        policy = getattr(event.last_policy_kind, "name", str(event.last_policy_kind))
        if self._health.note_incompatible_qos(int(event.total_count), policy):
            self.get_logger().warning(
                f"a publisher on {self._sub.topic_name} offers a QoS incompatible with this subscription "
                f"({self.config.qos_reliability}, depth {self.config.qos_depth}; policy {policy}): nothing "
                f"will be received from it; /diagnostics reports WARN while it is there")

    def _incompatible_publishers(self) -> int:
        """Publishers on the input topic whose QoS this subscription cannot match (from the graph)."""
        infos = self.get_publishers_info_by_topic(self._sub.topic_name)
        return sum(1 for i in infos
                   if qos_check_compatible(i.qos_profile, self._qos)[0] == QoSCompatibility.ERROR)

    def _codec_output(self, text: str) -> None:
        for line in text.splitlines():
            if line.startswith("["):  # another thread's log line caught while a decode held stderr
                write_stderr(line + "\n")
            elif line.strip():
                self.get_logger().warning(f"image codec: {line.strip()}", throttle_duration_sec=5.0)

    def _on_parameters_changed(self, values: dict[str, Any]) -> None:
        if self._inference is None:  # declaring at startup
            return
        det = self._inference.detector
        if "confidence_threshold" in values:
            det.conf_threshold = values["confidence_threshold"]
        if "nms_iou_threshold" in values:
            det.iou_threshold = values["nms_iou_threshold"]
        if "max_detections" in values:
            det.max_detections = values["max_detections"]
        if "input_loss_warn_ratio" in values:
            self._monitor.loss_warn_ratio = values["input_loss_warn_ratio"]
        if "input_stall_periods" in values:
            self._monitor.stall_periods = values["input_stall_periods"]
        if "debug_image" in values:
            self._outputs.debug_enabled = values["debug_image"]
        self.get_logger().info(f"parameters updated: {values}")

    def _diagnostic_info(self) -> dict[str, Any]:
        assert self._inference is not None
        return {"backend": self._backend_name, "model": self._model_name,
                "confidence_threshold": self._inference.detector.conf_threshold}

    def counters(self) -> dict[str, Any]:
        """Frame counters and node-internal latency (receive -> detections published)."""
        assert self._inference is not None
        return {**self._inference.counters(), "debug_images": self._outputs.debug_images}

    def close(self) -> None:
        """Stop the worker, then close the detector (and its backend). Idempotent."""
        if self._closed:
            return
        self._closed = True
        if CODEC_STDERR.sink == self._codec_output:
            CODEC_STDERR.sink = write_stderr
        if self._inference is None:
            return
        if not self._inference.close():
            self.get_logger().error("worker did not stop within 10 s; backend left to process exit")
            return
        c = self.counters()
        self.get_logger().info(
            f"stopped: worker joined, backend closed (frames in {c['frames_in']}, processed "
            f"{c['frames_processed']}, dropped {c['frames_dropped']}, bad input {c['frames_bad_input']}, "
            f"failed {c['frames_failed']})")


def main(argv: list[str] | None = None, *, injected: Injected | None = None) -> int:
    """Run the node until SIGINT/SIGTERM (exit 0), a fatal fault (1) or a bad startup (2 or 1)."""
    stop = threading.Event()
    args = list(sys.argv if argv is None else argv)
    problem = params_file_problem(args)
    if problem:  # rcl would report it on several lines, without the column
        print(f"{NODE_NAME}: {problem}", file=sys.stderr)
        return 2
    try:
        # our own handlers: SIGINT and SIGTERM both mean an orderly stop with exit code 0 on every distro
        rclpy.init(args=args,
                   signal_handler_options=SignalHandlerOptions.NO)
    except Exception as exc:
        print(f"{NODE_NAME}: cannot initialise ROS: {exc}", file=sys.stderr)
        return 2
    previous = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGINT, signal.SIGTERM)}
    logger = rclpy.logging.get_logger(NODE_NAME)
    node: DlaInferNode | None = None
    executor: Executor | None = None
    code = 0
    try:
        node = DlaInferNode(injected=injected)
        executor = executor_factory(node.config.executor)()
        executor.add_node(node)
        while not stop.is_set() and node.fatal_error is None:
            executor.spin_once(timeout_sec=0.1)  # short: signals are handled between spins
        code = 1 if node.fatal_error is not None else 0
    except ParameterError as exc:
        rclpy.logging.get_logger(exc.logger_name or NODE_NAME).error(str(exc))
        code = 2
    except ModelError as exc:  # the model metadata or artifact files: configuration, not a runtime fault
        rclpy.logging.get_logger(exc.logger_name or NODE_NAME).error(f"startup failed: {exc}")
        code = 2
    except DlaInferError as exc:
        rclpy.logging.get_logger(exc.logger_name or NODE_NAME).error(f"startup failed: {exc}")
        code = 1
    except (KeyboardInterrupt, ExternalShutdownException):
        code = 0
    except Exception as exc:  # a bug: one line for the log, the traceback for the developer
        logger.error(f"startup failed with an unexpected {type(exc).__name__}: {exc}")
        traceback.print_exc()
        code = 1
    finally:
        if executor is not None:  # torn down in reverse order of creation: executor, node, context
            shutdown_executor(executor)
        if node is not None:
            node.close()
            node.destroy_node()
        try_shutdown()
        for s, handler in previous.items():
            signal.signal(s, handler)
    return code


if __name__ == "__main__":
    sys.exit(main())

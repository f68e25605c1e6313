"""The ROS 2 node: parameters, QoS, topics, the latest-frame worker, diagnostics. The ONLY rclpy module.

Data path: subscription callback (executor thread; serialized bytes, ``raw=True``) ->
``LatestFrameWorker.submit`` (never blocks) -> worker thread: bytes -> header + zero-copy ndarray view
(:mod:`cdr_image`, :mod:`ros_convert`, :mod:`image_io`) -> ``Detector.detect`` ->
``detections`` (+ ``debug_image`` while subscribed). Everything below the wiring is ROS-free.
Exit codes of :func:`main`: 0 after SIGINT/SIGTERM, 2 for an invalid parameter (one line naming it),
1 for a backend that cannot start or a fatal accelerator fault (so a launch file's respawn restarts it).
Written against rclpy's Humble API (with fallbacks for anything newer).
"""

from __future__ import annotations

import signal
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np
import rclpy
from diagnostic_msgs.msg import DiagnosticArray
from rcl_interfaces.msg import (
    FloatingPointRange,
    IntegerRange,
    ParameterDescriptor,
    ParameterType,
    SetParametersResult,
)
from rclpy.executors import Executor, SingleThreadedExecutor
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from rclpy.serialization import deserialize_message
from rclpy.signals import SignalHandlerOptions
from sensor_msgs.msg import CompressedImage, Image
from std_msgs.msg import Header
from vision_msgs.msg import Detection2DArray, LabelInfo

from dla_infer_node import ros_convert
from dla_infer_node.backends.base import Backend
from dla_infer_node.cdr_image import UnsupportedEncoding
from dla_infer_node.errors import BackendError, DlaInferError, InputError, ParameterError
from dla_infer_node.image_io import draw_detections
from dla_infer_node.model_meta import ModelMetadata
from dla_infer_node.params import (
    PARAMETERS,
    SPECS,
    NodeConfig,
    ParamSpec,
    load_labels,
    validate_config,
    validate_value,
)
from dla_infer_node.worker import LatestFrameWorker

try:  # Humble has it; keep a stand-in so an older/newer rclpy without it still imports
    from rclpy.executors import ExternalShutdownException
except ImportError:  # pragma: no cover
    class ExternalShutdownException(Exception):  # type: ignore[no-redef]
        pass

NODE_NAME = "dla_infer_node"
# parameters rclpy or ROS tooling may set on any node; not ours, so not worth a warning
_FOREIGN_PARAMETERS = ("use_sim_time", "start_type_description_service", "qos_overrides")
_ROS_TYPES = {"string": ParameterType.PARAMETER_STRING, "integer": ParameterType.PARAMETER_INTEGER,
              "double": ParameterType.PARAMETER_DOUBLE, "bool": ParameterType.PARAMETER_BOOL,
              "string_array": ParameterType.PARAMETER_STRING_ARRAY}
Injected = tuple[Backend, ModelMetadata]


def descriptor(spec: ParamSpec) -> ParameterDescriptor:
    """The rclpy descriptor of a table row: type, description, range, read-only."""
    d = ParameterDescriptor(name=spec.name, type=_ROS_TYPES[spec.type], description=spec.description,
                            additional_constraints=spec.allowed(), read_only=spec.read_only)
    if spec.type == "double" and spec.min is not None and spec.max is not None:
        d.floating_point_range = [FloatingPointRange(from_value=float(spec.min), to_value=float(spec.max),
                                                     step=0.0)]
    elif spec.type == "integer" and spec.min is not None and spec.max is not None:
        d.integer_range = [IntegerRange(from_value=int(spec.min), to_value=int(spec.max), step=1)]
    return d


def image_qos(reliability: str, depth: int) -> QoSProfile:
    """The input subscription's QoS, from parameters (the one place it is built)."""
    return QoSProfile(
        history=HistoryPolicy.KEEP_LAST, depth=depth,
        reliability=(ReliabilityPolicy.RELIABLE if reliability == "reliable"
                     else ReliabilityPolicy.BEST_EFFORT),
        durability=DurabilityPolicy.VOLATILE)


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
        self.fatal_error: BaseException | None = None
        self._detector: Any = None
        self._closed = False
        self._lock = threading.Lock()
        self._bad_input = 0
        self._published = 0
        self._detections = 0
        self._debug_images = 0
        self._latency_s: deque[float] = deque(maxlen=512)
        self._last_diag = (time.monotonic(), 0, 0, 0)
        self._worker: LatestFrameWorker[tuple[bytes, float]] = LatestFrameWorker(
            self._process, on_error=self._on_worker_error, name="dla_infer_worker")
        try:
            self.config = self._declare_parameters(check_files=injected is None)
            self._debug_enabled = self.config.debug_image
            backend, metadata = injected if injected is not None else open_configured_backend(self.config)
            try:
                self.classes = (load_labels(self.config.labels_path, len(metadata.classes))
                                if self.config.labels_path else tuple(metadata.classes))
                from dla_infer_node.pipeline import Detector

                self._detector = Detector(backend, metadata, self.config.confidence_threshold,
                                          self.config.nms_iou_threshold, self.config.max_detections)
            except BaseException:
                backend.close()
                raise
            self._backend_name = backend.name
            self._model_name = metadata.name
            self._create_topics()
        except BaseException as exc:
            if isinstance(exc, DlaInferError):  # main reports it under this node's namespaced name
                exc.logger_name = self.get_logger().name
            self.close()
            self.destroy_node()
            raise
        self._worker.start()
        self.get_logger().info(
            f"ready: backend={self._backend_name} model={self._model_name} classes={len(self.classes)} "
            f"input={self._sub.topic_name} ({self.config.qos_reliability}, depth {self.config.qos_depth})")

    # ---- parameters -------------------------------------------------------------------------------
    def _declare_parameters(self, check_files: bool) -> NodeConfig:
        # rclpy keeps the -p / params-file values here until a parameter is declared (Humble..Kilted);
        # reading them first lets the whole set be validated, with one clear line, before declaring
        overrides = getattr(self, "_parameter_overrides", {})
        given = {name: p.value for name, p in overrides.items() if name in SPECS}
        unknown = sorted(n for n in overrides if n not in SPECS and not n.startswith(_FOREIGN_PARAMETERS))
        if unknown:
            self.get_logger().warning(f"ignoring unknown parameter(s) {unknown}; known: {sorted(SPECS)}")
        config = validate_config(given, check_files=check_files)
        executor_factory(config.executor)  # refused here, before any backend opens
        self.add_on_set_parameters_callback(self._on_set_parameters)
        for spec in PARAMETERS:
            value = getattr(config, spec.name)
            # declared with the validated, resolved value (e.g. the shipped model's absolute path, a
            # threshold given as the integer 1 widened to 1.0), so `ros2 param get` shows what is used
            self.declare_parameter(spec.name, list(value) if isinstance(value, tuple) else value,
                                   descriptor(spec), ignore_override=True)
        return config

    def _on_set_parameters(self, parameters: list[Parameter]) -> SetParametersResult:
        values: dict[str, Any] = {}
        for p in parameters:
            if p.name in SPECS:
                try:
                    values[p.name] = validate_value(p.name, p.value)
                except ParameterError as exc:
                    return SetParametersResult(successful=False, reason=str(exc))
        det = self._detector
        if det is not None:  # None while declaring at startup
            if "confidence_threshold" in values:
                det.conf_threshold = values["confidence_threshold"]
            if "nms_iou_threshold" in values:
                det.iou_threshold = values["nms_iou_threshold"]
            if "max_detections" in values:
                det.max_detections = values["max_detections"]
            if "debug_image" in values:
                self._debug_enabled = values["debug_image"]
            self.get_logger().info(f"parameters updated: {values}")
        return SetParametersResult(successful=True)

    # ---- topics -----------------------------------------------------------------------------------
    def _create_topics(self) -> None:
        cfg = self.config
        latched = QoSProfile(depth=1, history=HistoryPolicy.KEEP_LAST, reliability=ReliabilityPolicy.RELIABLE,
                             durability=DurabilityPolicy.TRANSIENT_LOCAL)
        self._det_pub = self.create_publisher(Detection2DArray, "detections", 10)
        self._label_pub = self.create_publisher(LabelInfo, "label_info", latched)
        # an overlay is a sensor-style stream: best effort, never holding the worker back
        self._debug_pub = self.create_publisher(Image, "debug_image", image_qos("best_effort", 1))
        self._diag_pub = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        header = Header()
        header.stamp = self.get_clock().now().to_msg()
        self._label_pub.publish(ros_convert.label_info(self.classes, cfg.confidence_threshold, header))
        self._compressed = cfg.input_transport == "compressed"
        self._msg_type: Any = CompressedImage if self._compressed else Image
        topic = "image/compressed" if self._compressed else "image"
        # raw=True: the executor thread hands over the serialized bytes; the worker reads the few header
        # fields and views the pixels in place (cdr_image), instead of rclpy copying every frame into
        # Python objects on the executor thread first
        self._sub = self.create_subscription(self._msg_type, topic, self._on_image,
                                             image_qos(cfg.qos_reliability, cfg.qos_depth), raw=True)
        if cfg.diagnostics_period > 0:
            self._diag_timer = self.create_timer(cfg.diagnostics_period, self._publish_diagnostics)

    def _on_image(self, raw: bytes) -> None:
        self._worker.submit((raw, time.monotonic()))  # the executor thread never waits for inference
        # Let the worker (just notified) take the GIL now: otherwise it waits until this thread has run
        # the executor's Python back into rcl_wait, measured at ~0.45 ms per frame on a 2-core machine
        # (0.09 ms with this line). sleep(0) only releases and re-acquires the GIL.
        time.sleep(0)

    # ---- worker thread ----------------------------------------------------------------------------
    def _frame(self, raw: bytes) -> tuple[np.ndarray, str, Header]:
        try:
            return ros_convert.frame_from_serialized(raw, self._compressed)
        except UnsupportedEncoding:  # not plain CDR (another rmw's encoding): the general deserializer
            try:
                msg = deserialize_message(raw, self._msg_type)
            except Exception as exc:  # rclpy raises plain exceptions for undecodable bytes
                raise InputError(f"cannot deserialize: {exc}", call="rclpy.serialization.deserialize_message",
                                 params={"bytes": len(raw)}, stage="input") from exc
            frame, encoding = ros_convert.frame_from_msg(msg)
            return frame, encoding, msg.header

    def _process(self, item: tuple[bytes, float]) -> None:
        raw, t_in = item
        try:
            frame, encoding, header = self._frame(raw)
            dets = self._detector.detect(frame, encoding)
        except InputError as exc:
            with self._lock:
                self._bad_input += 1
                n = self._bad_input
            self.get_logger().warning(f"dropped an unusable frame ({n} so far): {exc}",
                                      throttle_duration_sec=5.0)
            return
        self._det_pub.publish(ros_convert.detection_array(dets, header, self.classes,
                                                          self.config.class_id_mode))
        with self._lock:
            self._latency_s.append(time.monotonic() - t_in)
            self._published += 1
            self._detections += len(dets)
        if self._debug_enabled and self._debug_pub.get_subscription_count() > 0:
            canvas = draw_detections(frame, encoding, dets, self.classes)
            self._debug_pub.publish(ros_convert.bgr8_image(canvas, header))
            with self._lock:
                self._debug_images += 1

    def _on_worker_error(self, exc: BaseException) -> bool:
        if isinstance(exc, BackendError) and exc.stage == "execution":
            # CUDA documents the process as inconsistent after a DLA fault: stop, exit non-zero, respawn
            self.get_logger().fatal(f"accelerator fault, exiting: {exc}")
            self.fatal_error = exc
            return False
        if isinstance(exc, DlaInferError):
            self.get_logger().error(f"frame failed: {exc}", throttle_duration_sec=5.0)
        else:  # a bug: keep serving, but show where it happened
            self.get_logger().error("frame failed with an unexpected error:\n" + "".join(
                traceback.format_exception(type(exc), exc, exc.__traceback__)), throttle_duration_sec=5.0)
        return True

    # ---- diagnostics ------------------------------------------------------------------------------
    def counters(self) -> dict[str, Any]:
        """Frame counters and node-internal latency (receive -> detections published)."""
        s = self._worker.stats()
        with self._lock:
            lat = np.asarray(self._latency_s, dtype=np.float64) * 1e3
            out: dict[str, Any] = {"frames_in": s.submitted, "frames_processed": self._published,
                                   "frames_dropped": s.dropped, "frames_bad_input": self._bad_input,
                                   "frames_failed": s.failed, "detections": self._detections,
                                   "debug_images": self._debug_images}
        out["latency_ms_p50"] = float(np.percentile(lat, 50)) if lat.size else 0.0
        out["latency_ms_p95"] = float(np.percentile(lat, 95)) if lat.size else 0.0
        return out

    def _publish_diagnostics(self) -> None:
        c = self.counters()
        now = time.monotonic()
        t0, in0, out0, bad0 = self._last_diag
        dt = max(now - t0, 1e-6)
        self._last_diag = (now, c["frames_in"], c["frames_processed"], c["frames_bad_input"])
        values = {**c, "input_fps": (c["frames_in"] - in0) / dt,
                  "output_fps": (c["frames_processed"] - out0) / dt,
                  "backend": self._backend_name, "model": self._model_name,
                  "confidence_threshold": self._detector.conf_threshold}
        new_bad = c["frames_bad_input"] - bad0
        level, text = (("warn", f"{new_bad} unusable input frame(s) in the last period") if new_bad
                       else ("ok", "ok"))
        header = Header()
        header.stamp = self.get_clock().now().to_msg()
        self._diag_pub.publish(ros_convert.diagnostics(header, f"{self.get_fully_qualified_name()}: detector",
                                                       self._backend_name, level, text, values))

    # ---- teardown ---------------------------------------------------------------------------------
    def close(self) -> None:
        """Stop the worker, then close the detector (and its backend). Idempotent."""
        if self._closed:
            return
        self._closed = True
        if not self._worker.stop(timeout=10.0):
            # closing a backend under a running inference would be worse than leaving it to process exit
            self.get_logger().error("worker did not stop within 10 s; backend left to process exit")
            return
        if self._detector is not None:
            self._detector.close()
            c = self.counters()
            self.get_logger().info(
                f"stopped: worker joined, backend closed (frames in {c['frames_in']}, processed "
                f"{c['frames_processed']}, dropped {c['frames_dropped']}, bad input {c['frames_bad_input']}, "
                f"failed {c['frames_failed']})")


def _try_shutdown() -> None:
    shutdown: Callable[[], Any] | None = getattr(rclpy, "try_shutdown", None)  # not in Humble
    if shutdown is not None:
        shutdown()
    elif rclpy.ok():
        rclpy.shutdown()


def shutdown_executor(executor: Executor) -> None:
    """Stop the executor before the node goes, so that it holds none of the node's handles when they are
    destroyed (rclpy's C++ EventsExecutor keeps callbacks on them). Bounded: an exit must not hang here."""
    if not executor.shutdown(timeout_sec=5.0):
        rclpy.logging.get_logger(NODE_NAME).warning("executor did not shut down within 5 s; going on")


def has_events_executor() -> bool:
    """Whether this rclpy has EventsExecutor (rclpy.experimental, Kilted or newer)."""
    try:
        from rclpy.experimental import EventsExecutor  # noqa: F401
    except ImportError:
        return False
    return True


def executor_factory(kind: str) -> Callable[[], Executor]:
    """What builds the executor named by the ``executor`` parameter (checked with the other parameters).

    'events' is rclpy's C++ EventsExecutor (rclpy.experimental, Kilted or newer); where rclpy lacks it the
    parameter is refused rather than silently replaced.
    """
    if kind == "events":
        if not has_events_executor():
            raise ParameterError("executor", kind, "'single' on this ROS 2 distro (its rclpy has no "
                                 "rclpy.experimental.EventsExecutor; Kilted or newer has)")
        from rclpy.experimental import EventsExecutor

        return EventsExecutor
    return SingleThreadedExecutor


def main(argv: list[str] | None = None, *, injected: Injected | None = None) -> int:
    """Run the node until SIGINT/SIGTERM (exit 0), a fatal fault (1) or a bad startup (2 or 1)."""
    stop = threading.Event()
    try:
        # our own handlers: SIGINT and SIGTERM both mean an orderly stop with exit code 0 on every distro
        rclpy.init(args=list(sys.argv if argv is None else argv),
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
        _try_shutdown()
        for s, handler in previous.items():
            signal.signal(s, handler)
    return code


if __name__ == "__main__":
    sys.exit(main())

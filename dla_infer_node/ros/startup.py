"""The parts of the node's start-up that the plain node and the managed (lifecycle) node share.

:func:`open_detector` is everything between "parameters validated" and "ready to take frames": the
backend opened (ONNX Runtime session, or the DLA module loaded and its memory registered), the labels
read and the :class:`~dla_infer_node.core.pipeline.Detector` built around them. :func:`run_node` is the
process around a node: rclpy with our own signal handling, the spin loop and the exit codes (0 after
SIGINT/SIGTERM, 2 for an invalid configuration, 1 for a backend that cannot start or a fatal fault).
"""

from __future__ import annotations

import sys
import threading
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import rclpy
from rclpy.executors import Executor
from rclpy.impl.rcutils_logger import RcutilsLogger
from rclpy.node import Node
from rclpy.signals import SignalHandlerOptions
from sensor_msgs.msg import CompressedImage, Image

from dla_infer_node.core.backend import Backend
from dla_infer_node.core.errors import DlaInferError, ModelError, ParameterError
from dla_infer_node.core.model_meta import ModelMetadata
from dla_infer_node.core.pipeline import Detector
from dla_infer_node.core.stop_signals import stop_on_signals
from dla_infer_node.ros.executors import executor_factory, shutdown_executor, try_shutdown
from dla_infer_node.ros.frame_memory import keep_frame_buffers
from dla_infer_node.ros.inference import FrameInference, apply_to_detector
from dla_infer_node.ros.param_binding import params_file_problem
from dla_infer_node.ros.params import NodeConfig, load_labels

try:  # Humble has it; keep a stand-in so an older/newer rclpy without it still imports
    from rclpy.executors import ExternalShutdownException
except ImportError:  # pragma: no cover
    class ExternalShutdownException(Exception):  # type: ignore[no-redef]
        pass

Injected = tuple[Backend, ModelMetadata]
N = TypeVar("N", bound=Node)


def open_configured_backend(config: NodeConfig) -> Injected:
    from dla_infer_node.backends.factory import BackendSettings, open_backend  # opens ORT/CUDA lazily

    return open_backend(BackendSettings(
        backend=config.backend, model_path=config.model_path, metadata_path=config.metadata_path,
        loadable_path=config.loadable_path, artifact_path=config.artifact_path,
        runtime_mode=config.runtime_mode, dla_core=config.dla_core, ort_providers=config.ort_providers,
        ort_threads=config.ort_threads, preprocess_device=config.preprocess_device))


@dataclass(frozen=True)
class OpenedDetector:
    detector: Detector
    classes: tuple[str, ...]
    backend_name: str
    model_name: str


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
    return OpenedDetector(detector, classes, backend.name, metadata.name)


def input_of(config: NodeConfig) -> tuple[Any, str, bool]:
    """(message type, relative topic name, compressed?) of the image input ``input_transport`` selects."""
    compressed = config.input_transport == "compressed"
    msg_type = CompressedImage if compressed else Image
    return msg_type, ("image/compressed" if compressed else "image"), compressed


def apply_live_changes(values: Mapping[str, Any], detector: Detector, outputs: Any | None) -> None:
    """Apply validated live parameter changes to the running parts (``outputs`` may not exist yet)."""
    apply_to_detector(detector, values)
    if "debug_image" in values and outputs is not None:
        outputs.debug_enabled = values["debug_image"]


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


def run_node(name: str, make_node: Callable[[], N], executor_kind: Callable[[N], str],
             argv: list[str] | None = None) -> int:
    """Run the node ``make_node()`` builds until SIGINT/SIGTERM (0), a fatal fault (1) or a bad start
    (2 for an invalid configuration, 1 otherwise). The node must have ``fatal_error`` and ``close()``."""
    stop = threading.Event()
    args = list(sys.argv if argv is None else argv)
    problem = params_file_problem(args)
    if problem:  # rcl would report it on several lines, without the column
        print(f"{name}: {problem}", file=sys.stderr)
        return 2
    keep_frame_buffers()  # before the first frame: each frame's buffers reuse the last one's pages
    try:
        # our own handlers: SIGINT and SIGTERM both mean an orderly stop with exit code 0 on every distro
        rclpy.init(args=args,
                   signal_handler_options=SignalHandlerOptions.NO)
    except Exception as exc:
        print(f"{name}: cannot initialise ROS: {exc}", file=sys.stderr)
        return 2
    restore_signals = stop_on_signals(stop)
    node: Any = None
    executor: Executor | None = None
    code = 0
    try:
        node = make_node()
        executor = executor_factory(executor_kind(node))()
        executor.add_node(node)
        while not stop.is_set() and node.fatal_error is None:
            executor.spin_once(timeout_sec=0.1)  # short: signals are handled between spins
        code = 1 if node.fatal_error is not None else 0
    except ParameterError as exc:
        rclpy.logging.get_logger(exc.logger_name or name).error(str(exc))
        code = 2
    except ModelError as exc:  # the model metadata or artifact files: configuration, not a runtime fault
        rclpy.logging.get_logger(exc.logger_name or name).error(f"startup failed: {exc}")
        code = 2
    except DlaInferError as exc:
        rclpy.logging.get_logger(exc.logger_name or name).error(f"startup failed: {exc}")
        code = 1
    except (KeyboardInterrupt, ExternalShutdownException):
        code = 0
    except Exception as exc:  # a bug: one line for the log, the traceback for the developer
        rclpy.logging.get_logger(name).error(f"startup failed with an unexpected {type(exc).__name__}: {exc}")
        traceback.print_exc()
        code = 1
    finally:
        if executor is not None:  # torn down in reverse order of creation: executor, node, context
            shutdown_executor(executor)
        if node is not None:
            node.close()
            node.destroy_node()
        try_shutdown()
        restore_signals()
    return code

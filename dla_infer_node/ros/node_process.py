"""The process around a node, either kind: :func:`run_node` runs rclpy with our own signal handling, the
spin loop and the exit codes (0 after SIGINT/SIGTERM, 2 for an invalid configuration, 1 for a backend
that cannot start or a fatal fault). Before its participant exists it removes the Fast DDS shared-memory
segments dead processes left (``dds_shm``).
"""

from __future__ import annotations

import sys
import threading
import traceback
from collections.abc import Callable
from typing import Any, TypeVar

import rclpy
from rclpy.executors import Executor
from rclpy.node import Node
from rclpy.signals import SignalHandlerOptions

from dla_infer_node.core.errors import DlaInferError, ModelError, ParameterError
from dla_infer_node.core.stop_signals import stop_on_signals
from dla_infer_node.ros.dds_shm import remove_orphans
from dla_infer_node.ros.executors import executor_factory, shutdown_executor, try_shutdown
from dla_infer_node.ros.frame_memory import keep_frame_buffers
from dla_infer_node.ros.param_binding import params_file_problem

try:  # Humble has it; keep a stand-in so an older/newer rclpy without it still imports
    from rclpy.executors import ExternalShutdownException
except ImportError:  # pragma: no cover
    class ExternalShutdownException(Exception):  # type: ignore[no-redef]
        pass

N = TypeVar("N", bound=Node)


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
    # before our own participant exists: what an earlier run killed hard (respawn after a crash) left in RAM
    orphans = remove_orphans()
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
        if orphans:
            node.get_logger().info(
                f"removed {len(orphans)} Fast DDS shared-memory segment(s) of processes that died without "
                f"closing them ({sum(o.ram_bytes for o in orphans) / 2**20:.0f} MiB of RAM back)")
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

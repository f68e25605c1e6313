"""Executor choice and orderly teardown of executor and context (rclpy Humble..Kilted)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import rclpy
from rclpy.executors import Executor, SingleThreadedExecutor

from dla_infer_node.core.errors import ParameterError

NODE_NAME = "dla_infer_node"


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


def shutdown_executor(executor: Executor) -> None:
    """Stop the executor before the node goes, so that it holds none of the node's handles when they are
    destroyed (rclpy's C++ EventsExecutor keeps callbacks on them). Bounded: an exit must not hang here."""
    if not executor.shutdown(timeout_sec=5.0):
        rclpy.logging.get_logger(NODE_NAME).warning("executor did not shut down within 5 s; going on")


def try_shutdown() -> None:
    """Shut the default context down if it is still up (``rclpy.try_shutdown`` is not in Humble)."""
    shutdown: Callable[[], Any] | None = getattr(rclpy, "try_shutdown", None)
    if shutdown is not None:
        shutdown()
    elif rclpy.ok():
        rclpy.shutdown()

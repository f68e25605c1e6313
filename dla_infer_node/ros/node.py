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
from typing import Any

from rclpy.node import Node

from dla_infer_node.core.errors import DlaInferError
from dla_infer_node.ros.executors import (
    NODE_NAME,
    executor_factory,
    has_events_executor,
    shutdown_executor,
)
from dla_infer_node.ros.node_process import run_node
from dla_infer_node.ros.param_binding import declare_parameters
from dla_infer_node.ros.parts import DetectorParts, Injected

__all__ = ["NODE_NAME", "DlaInferNode", "executor_factory", "has_events_executor", "main",
           "shutdown_executor"]


class DlaInferNode(Node):
    """Images in, ``vision_msgs/Detection2DArray`` out.

    The node drives its :class:`~dla_infer_node.ros.parts.DetectorParts` through configure and activate
    in its constructor (the managed node does it per transition). ``injected`` = (backend, metadata)
    replaces the configured backend (benchmarks, tests): there is no user-facing backend value for it.
    Parameters are validated before any backend is opened; a :class:`ParameterError` or backend error
    propagates out of the constructor.
    """

    def __init__(self, *, injected: Injected | None = None, node_name: str = NODE_NAME,
                 **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        self.parts = DetectorParts(self)
        try:
            self.config = declare_parameters(self, check_files=injected is None,
                                             on_change=self._on_parameters_changed)
            executor_factory(self.config.executor)  # refused here, before any backend opens
            opened = self.parts.configure(self.config, injected)
            topic = self.parts.activate()
        except BaseException as exc:
            if isinstance(exc, DlaInferError):  # main reports it under this node's namespaced name
                exc.logger_name = self.get_logger().name
            self.close()
            self.destroy_node()
            raise
        self.classes = opened.classes
        where = (f"cores={list(self.config.cores)} cameras: {topic}" if self.config.camera_configs
                 else f"input={topic} ({self.config.qos_reliability}, depth {self.config.qos_depth})")
        self.get_logger().info(f"ready: backend={opened.backend_name} model={opened.model_name} "
                               f"preprocess={opened.preprocess} classes={len(self.classes)} {where}")

    @property
    def fatal_error(self) -> BaseException | None:
        return self.parts.fatal_error

    def _on_parameters_changed(self, values: dict[str, Any]) -> None:
        self.parts.apply(values)
        self.get_logger().info(f"parameters updated: {values}")

    def counters(self) -> dict[str, Any]:
        """Frame counters and node-internal latency (receive -> detections published)."""
        return self.parts.counters()

    def close(self) -> None:
        """Stop the worker, then close the detector (and its backend). Idempotent."""
        self.parts.cleanup()


def main(argv: list[str] | None = None, *, injected: Injected | None = None) -> int:
    """Run the node until SIGINT/SIGTERM (exit 0), a fatal fault (1) or a bad startup (2 or 1)."""
    return run_node(NODE_NAME, lambda: DlaInferNode(injected=injected), lambda node: node.config.executor,
                    argv)


if __name__ == "__main__":
    sys.exit(main())

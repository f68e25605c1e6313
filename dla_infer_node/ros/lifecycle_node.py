"""The node as a managed (lifecycle) node, for Nav2-style bringup: ``dla_infer_lifecycle`` /
``ros2 launch dla_infer_node dla_infer.launch.py lifecycle:=true``.

Transitions (driven with the ``~/change_state`` service, or a lifecycle manager):

- configure: parameters validated, the artifact checked, the backend
  opened (ONNX Runtime session, or the DLA module loaded and its memory registered), the detector and the
  inference worker made. Any failure (a bad parameter, a backend that cannot open, bad model metadata,
  whatever the error's type) fails the transition with one log line, the same reason the plain node
  exits with; the node stays unconfigured.
- activate: the output topics (detections, label_info, debug_image) and the image subscription appear.
- deactivate: the subscription goes first (no frame is taken any more), the frame in hand is answered,
  then the outputs go; the backend and its DLA state stay loaded for the next activate.
- cleanup / shutdown: reverse order: (deactivate if active,) worker stopped, detector and backend closed.

Parameters are declared when the node starts, with the values given, and validated at configure: a bad
one fails configure, can be set right with ``ros2 param set`` and configure retried. What configure reads
(every parameter not changeable at run time, except ``executor``) can be set only while unconfigured.

``/diagnostics`` reports in every state once configured (``lifecycle_state`` among the values), so a
monitor can tell an inactive node from a dead one. The plain node (``dla_infer_node``) stays the default.
"""

from __future__ import annotations

import sys
import traceback
from pathlib import Path
from typing import Any

from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn

from dla_infer_node.core.errors import DlaInferError
from dla_infer_node.core.settings import SPECS, camera_spec
from dla_infer_node.ros.executors import NODE_NAME
from dla_infer_node.ros.node_config import NodeConfig, validate_config
from dla_infer_node.ros.node_process import run_node
from dla_infer_node.ros.param_binding import declare_for_configure, declared_values, given_value
from dla_infer_node.ros.parts import DetectorParts

OK = TransitionCallbackReturn.SUCCESS
FAILED = TransitionCallbackReturn.FAILURE


def failure_line(exc: BaseException) -> str:
    """One log line for a failed configure: the project's errors as the plain node would exit with them;
    anything else (a bug, or bad input a check missed) with its type and where it was raised."""
    if isinstance(exc, DlaInferError):
        text = str(exc)
    else:
        frames = traceback.extract_tb(exc.__traceback__)
        where = f" (at {Path(frames[-1].filename).name}:{frames[-1].lineno})" if frames else ""
        text = f"unexpected {type(exc).__name__}: {exc}{where}"
    return " ".join(text.split())  # a multi-line message would be read as several events


class DlaInferLifecycleNode(LifecycleNode):
    """Images in, detections out, in the managed states; see the module docstring for each transition."""

    def __init__(self, node_name: str = NODE_NAME, **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        # a process-level choice, needed before configure: refused (exit 2) at start like the plain node's
        self.executor_kind: str = given_value(self, "executor")
        self.parts = DetectorParts(self, report_state=True)
        # declared now, validated at configure: a bad value can be set right and configure retried
        declare_for_configure(self, on_change=self._on_parameters_changed, refuse=self._refused_set)

    # ---- transitions ------------------------------------------------------------------------------------
    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        try:
            opened = self.parts.configure(self._validated_config())
        except Exception as exc:  # whatever its type: one line, and the node stays unconfigured
            self.get_logger().error(f"configure failed: {failure_line(exc)}")
            return FAILED
        self.get_logger().info(f"configured: backend={opened.backend_name} model={opened.model_name} "
                               f"preprocess={opened.preprocess} classes={len(opened.classes)}")
        return super().on_configure(state)

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        topic = self.parts.activate()
        cfg = self.parts.config
        assert cfg is not None
        self.get_logger().info(f"active: input={topic} ({cfg.qos_reliability}, depth {cfg.qos_depth})")
        return super().on_activate(state)

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.parts.deactivate()
        self.get_logger().info("inactive: input and outputs withdrawn, backend kept loaded")
        return super().on_deactivate(state)

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.parts.cleanup()
        return super().on_cleanup(state)

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.close()
        return super().on_shutdown(state)

    def on_error(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.close()  # back to unconfigured with nothing held
        return OK

    def close(self) -> None:
        """Everything the transitions made, released in reverse order. Idempotent (exit path too)."""
        self.parts.cleanup()

    # ---- parts ------------------------------------------------------------------------------------------
    def _validated_config(self) -> NodeConfig:
        return validate_config(declared_values(self), check_files=True)

    def _refused_set(self, name: str) -> str | None:
        spec = SPECS.get(name) or camera_spec(name)
        if spec is not None and spec.read_only and self.parts.state != "unconfigured":
            return (f"{name} is read at configure and the node is {self.parts.state}: cleanup, set it, then "
                    f"configure again")
        return None

    def _on_parameters_changed(self, values: dict[str, Any]) -> None:
        self.parts.apply(values)
        self.get_logger().info(f"parameters updated: {values}")

    @property
    def fatal_error(self) -> BaseException | None:
        return self.parts.fatal_error

    def counters(self) -> dict[str, Any]:
        """The plain node's counters, summed over configure cycles (latency: the current cycle)."""
        return self.parts.counters()


def main(argv: list[str] | None = None) -> int:
    """Run the lifecycle node (starts unconfigured) until SIGINT/SIGTERM (0) or a fatal fault (1)."""
    return run_node(NODE_NAME, DlaInferLifecycleNode, lambda node: node.executor_kind, argv)


if __name__ == "__main__":
    sys.exit(main())

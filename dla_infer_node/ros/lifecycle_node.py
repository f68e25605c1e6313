"""The node as a managed (lifecycle) node, for Nav2-style bringup: ``dla_infer_lifecycle`` /
``ros2 launch dla_infer_node dla_infer.launch.py lifecycle:=true``.

Transitions (driven with the ``~/change_state`` service, or a lifecycle manager):

- configure: parameters validated (declared on the first configure), the artifact checked, the backend
  opened (ONNX Runtime session, or the DLA module loaded and its memory registered), the detector and the
  inference worker made. A bad parameter or a backend that cannot open fails the transition (the node
  stays unconfigured) with the same one-line reason the plain node exits with.
- activate: the output topics (detections, label_info, debug_image) and the image subscription appear.
- deactivate: the subscription goes first (no frame is taken any more), the frame in hand is answered,
  then the outputs go; the backend and its DLA state stay loaded for the next activate.
- cleanup / shutdown: reverse order: (deactivate if active,) worker stopped, detector and backend closed.

``/diagnostics`` reports in every state once configured (``lifecycle_state`` among the values), so a
monitor can tell an inactive node from a dead one. The plain node (``dla_infer_node``) stays the default.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Mapping
from typing import Any

import numpy as np
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from std_msgs.msg import Header

from dla_infer_node.core.detections import Detections
from dla_infer_node.core.errors import DlaInferError
from dla_infer_node.ros.diagnostics import DiagnosticsReporter, merge_statuses
from dla_infer_node.ros.executors import NODE_NAME
from dla_infer_node.ros.inference import FrameInference
from dla_infer_node.ros.input_watch import InputWatch
from dla_infer_node.ros.outputs import DetectionOutputs
from dla_infer_node.ros.param_binding import declare_parameters, given_value
from dla_infer_node.ros.params import PARAMETERS, NodeConfig, validate_config
from dla_infer_node.ros.qos import image_qos
from dla_infer_node.ros.startup import (
    OpenedDetector,
    apply_live_changes,
    input_of,
    open_detector,
    run_node,
    stop_inference,
)
from dla_infer_node.ros.topic_hints import OtherTransportHint

_COUNTS = ("frames_in", "frames_processed", "frames_dropped", "frames_bad_input", "frames_failed",
           "detections")
OK = TransitionCallbackReturn.SUCCESS
FAILED = TransitionCallbackReturn.FAILURE


class DlaInferLifecycleNode(LifecycleNode):
    """Images in, detections out, in the managed states; see the module docstring for each transition."""

    def __init__(self, node_name: str = NODE_NAME, **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        # a process-level choice, needed before configure: refused (exit 2) at start like the plain node's
        self.executor_kind: str = given_value(self, "executor")
        self.config: NodeConfig | None = None
        self._declared = False
        self._opened: OpenedDetector | None = None
        self._inference: FrameInference | None = None
        self._outputs: DetectionOutputs | None = None
        self._outputs_lock = threading.Lock()  # the worker publishes while deactivate withdraws outputs
        self._sub: Any = None
        self._hint: OtherTransportHint | None = None
        self._watch: InputWatch | None = None
        self._diagnostics: DiagnosticsReporter | None = None
        self._past: dict[str, int] = dict.fromkeys(_COUNTS, 0)  # counts of earlier configure cycles
        self._state = "unconfigured"
        self._fatal: BaseException | None = None

    # ---- transitions ------------------------------------------------------------------------------------
    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        try:
            config = self._validated_config()
            opened = open_detector(config)
        except DlaInferError as exc:  # the same one line the plain node would exit with
            self.get_logger().error(f"configure failed: {exc}")
            return FAILED
        self.config, self._opened = config, opened
        msg_type, _, compressed = input_of(config)
        self._inference = FrameInference(opened.detector, msg_type, compressed, self._publish,
                                         self.get_logger(), config.max_input_pixels)
        self._inference.start()
        self._watch = InputWatch(self, config, self.counters, image_qos(config.qos_reliability,
                                                                         config.qos_depth))
        if self._diagnostics is None:  # diagnostics_period is read-only: one reporter for the node's life
            self._diagnostics = DiagnosticsReporter(
                self, config.diagnostics_period, self.counters, self._diagnostic_info, opened.backend_name,
                sources=[self._watch_status, self._hint_status])
        self._state = "inactive"
        self.get_logger().info(f"configured: backend={opened.backend_name} model={opened.model_name} "
                               f"classes={len(opened.classes)}")
        return super().on_configure(state)

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        assert self.config is not None and self._opened is not None and self._inference is not None
        cfg = self.config
        with self._outputs_lock:
            self._outputs = DetectionOutputs(
                self, self._opened.classes, cfg.class_id_mode, self._inference.detector.conf_threshold,
                bool(self.get_parameter("debug_image").value))
        msg_type, input_name, compressed = input_of(cfg)
        # raw=True as in the plain node: the worker reads the serialized frame in place
        assert self._watch is not None
        self._sub = self._watch.subscribe(msg_type, input_name, self._inference.submit)
        self._hint = OtherTransportHint(self, self._sub.topic_name, compressed)
        self._state = "active"
        self.get_logger().info(f"active: input={self._sub.topic_name} ({cfg.qos_reliability}, "
                               f"depth {cfg.qos_depth})")
        return super().on_activate(state)

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._deactivate()
        self.get_logger().info("inactive: input and outputs withdrawn, backend kept loaded")
        return super().on_deactivate(state)

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._cleanup()
        return super().on_cleanup(state)

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.close()
        return super().on_shutdown(state)

    def on_error(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.close()  # back to unconfigured with nothing held
        return OK

    # ---- teardown, reverse order of the transitions ------------------------------------------------------
    def _deactivate(self) -> None:
        if self._sub is not None:  # first: no new frame can arrive
            self.destroy_subscription(self._sub)
            self._sub = None
            if self._watch is not None:
                self._watch.unsubscribed()
        if self._hint is not None:
            self._hint.close()
            self._hint = None
        if self._inference is not None and not self._inference.wait_idle(10.0):
            self.get_logger().warning("the frame in hand did not finish within 10 s; its result is dropped")
        with self._outputs_lock:
            outputs, self._outputs = self._outputs, None
        if outputs is not None:
            outputs.close()
        if self._state == "active":
            self._state = "inactive"

    def _cleanup(self) -> None:
        self._deactivate()
        if self._inference is not None:
            self._fatal = self._inference.fatal_error
            counts = self._inference.counters()
            self._past = {k: self._past[k] + int(counts[k]) for k in _COUNTS}
            stop_inference(self._inference, self.get_logger())
            self._inference = None
        if self._watch is not None:
            self._watch.close()
            self._watch = None
        self._opened = None
        self._state = "unconfigured"

    def close(self) -> None:
        """Everything the transitions made, released in reverse order. Idempotent (exit path too)."""
        self._cleanup()

    # ---- parts ------------------------------------------------------------------------------------------
    def _validated_config(self) -> NodeConfig:
        if not self._declared:  # validated as a whole, then declared (ros2 param shows them from now)
            config = declare_parameters(self, check_files=True, on_change=self._on_parameters_changed)
            self._declared = True
            return config
        # a later configure (after cleanup) checks the current values and the files again
        return validate_config({p.name: self.get_parameter(p.name).value for p in PARAMETERS},
                               check_files=True)

    def _on_parameters_changed(self, values: dict[str, Any]) -> None:
        if self._inference is not None:
            apply_live_changes(values, self._inference.detector, self._outputs)
            if self._watch is not None:
                self._watch.apply(values)
            self.get_logger().info(f"parameters updated: {values}")

    def _publish(self, dets: Detections, header: Header, frame: np.ndarray, encoding: str) -> None:
        with self._outputs_lock:
            if self._outputs is not None:  # not active: the result of a frame taken before is dropped
                self._outputs.publish(dets, header, frame, encoding)

    def _watch_status(self) -> tuple[str, str, Mapping[str, Any]]:
        # the watch is made anew at each configure; the reporter lives as long as the node
        if self._watch is None:
            return "ok", "ok", {}
        return merge_statuses(source() for source in self._watch.sources())

    def _hint_status(self) -> tuple[str, str, Mapping[str, Any]]:
        values = {"lifecycle_state": self._state}
        return (*self._hint.status()[:2], values) if self._hint is not None else ("ok", "ok", values)

    def _diagnostic_info(self) -> dict[str, Any]:
        if self._opened is None:
            return {}
        return {"backend": self._opened.backend_name, "model": self._opened.model_name,
                "confidence_threshold": self._opened.detector.conf_threshold}

    @property
    def fatal_error(self) -> BaseException | None:
        return self._inference.fatal_error if self._inference is not None else self._fatal

    def counters(self) -> dict[str, Any]:
        """The plain node's counters, summed over configure cycles (latency: the current cycle)."""
        live = self._inference.counters() if self._inference is not None else {}
        out: dict[str, Any] = {k: self._past[k] + int(live.get(k, 0)) for k in _COUNTS}
        out["latency_ms_p50"] = live.get("latency_ms_p50", 0.0)
        out["latency_ms_p95"] = live.get("latency_ms_p95", 0.0)
        outputs = self._outputs
        out["debug_images"] = outputs.debug_images if outputs is not None else 0
        out["detections_subscribers"] = outputs.detection_subscribers() if outputs is not None else 0
        return out


def main(argv: list[str] | None = None) -> int:
    """Run the lifecycle node (starts unconfigured) until SIGINT/SIGTERM (0) or a fatal fault (1)."""
    return run_node(NODE_NAME, DlaInferLifecycleNode, lambda node: node.executor_kind, argv)


if __name__ == "__main__":
    sys.exit(main())

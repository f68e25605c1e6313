"""launch_testing: ``dla_infer.launch.py lifecycle:=true`` under ``ros2 launch``, transitions driven over
``lifecycle_msgs`` services: no detections while unconfigured or inactive, detections while active,
deactivate -> activate resumes; after shutdown every process exited with code 0.

Needs a ROS 2 install with launch_testing (``colcon test``, or
``launch_test test/ros/test_launch_lifecycle.py``) and the package installed; where launch_testing is not
importable (a venv with PyPI wheels only: it is not on PyPI) the module is skipped with that reason.
test_lifecycle_node.py checks the same without launch.
"""

from __future__ import annotations

import sys
import time
import unittest
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # test/: _launch_common, also under launch_test
pytest.importorskip("launch_testing", reason="launch_testing is not importable: it ships with a ROS 2 "
                                             "install, not on PyPI; run with colcon test or launch_test")

import launch_testing
import launch_testing.asserts
import launch_testing.markers
import numpy as np
from _launch_common import REPO, include_launch

from launch import LaunchDescription

NAMESPACE = "lifecycle_launch_test"
NODE = f"/{NAMESPACE}/dla_infer_node"
IMAGE_TOPIC = f"/{NAMESPACE}/camera/image"


@pytest.mark.launch_test
@launch_testing.markers.keep_alive
def generate_test_description() -> LaunchDescription:
    return include_launch({"params_file": str(REPO / "config" / "cpu_demo.yaml"), "namespace": NAMESPACE,
                           "image_topic": IMAGE_TOPIC, "lifecycle": "true"})


class _Driver:
    """An rclpy node of the test's own: lifecycle service calls, a frame publisher, a detections log."""

    def __init__(self) -> None:
        import rclpy
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.qos import QoSProfile, ReliabilityPolicy
        from sensor_msgs.msg import Image
        from vision_msgs.msg import Detection2DArray

        self.context = rclpy.Context()
        rclpy.init(context=self.context)
        self.node = rclpy.create_node("lifecycle_launch_driver", context=self.context)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self.pub = self.node.create_publisher(Image, IMAGE_TOPIC,
                                              QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE))
        self.got: list[Any] = []
        self.node.create_subscription(Detection2DArray, f"/{NAMESPACE}/detections", self.got.append, 10)
        self.sec = 100

    def spin(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.executor.spin_once(timeout_sec=0.05)

    def call(self, srv_type: Any, name: str, request: Any) -> Any:
        client = self.node.create_client(srv_type, name)
        try:
            assert client.wait_for_service(timeout_sec=120), f"{name} not available"
            future = client.call_async(request)
            end = time.monotonic() + 120
            while not future.done() and time.monotonic() < end:
                self.executor.spin_once(timeout_sec=0.05)
            assert future.done(), f"no answer from {name}"
            return future.result()
        finally:
            self.node.destroy_client(client)

    def state(self) -> int:
        from lifecycle_msgs.srv import GetState

        return int(self.call(GetState, f"{NODE}/get_state", GetState.Request()).current_state.id)

    def change(self, transition: int) -> bool:
        from lifecycle_msgs.srv import ChangeState

        req = ChangeState.Request()
        req.transition.id = transition
        return bool(self.call(ChangeState, f"{NODE}/change_state", req).success)

    def answered(self, seconds: float) -> set[int]:
        """Publish a synthetic scene every 0.2 s for ``seconds``; the stamps answered meanwhile."""
        from sensor_msgs.msg import Image

        from dla_infer_node.core.synth import generate_scene

        sent: set[int] = set()
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            scene = generate_scene(self.sec)
            h, w = scene.image.shape[:2]
            msg = Image()
            msg.header.stamp.sec, msg.header.frame_id = self.sec, "launch_cam"
            msg.height, msg.width, msg.encoding, msg.step = h, w, "rgb8", w * 3
            msg.data = np.ascontiguousarray(scene.image).tobytes()
            self.pub.publish(msg)
            sent.add(self.sec)
            self.sec += 1
            self.spin(0.2)
        return {d.header.stamp.sec for d in self.got} & sent

    def flowing(self, timeout: float = 60.0) -> int:
        seen: set[int] = set()
        end = time.monotonic() + timeout
        while len(seen) < 3 and time.monotonic() < end:
            seen |= self.answered(1.0)
        return len(seen)

    def close(self) -> None:
        import rclpy

        self.executor.shutdown()
        self.node.destroy_node()
        rclpy.shutdown(context=self.context)


class TestLifecycleTransitions(unittest.TestCase):
    def test_detections_flow_only_while_active(self) -> None:
        from lifecycle_msgs.msg import State, Transition

        d = _Driver()
        try:
            self.assertEqual(d.state(), State.PRIMARY_STATE_UNCONFIGURED)
            self.assertTrue(d.change(Transition.TRANSITION_CONFIGURE))
            self.assertEqual(d.state(), State.PRIMARY_STATE_INACTIVE)
            self.assertEqual(d.answered(2.0), set(), "detections while inactive")
            self.assertTrue(d.change(Transition.TRANSITION_ACTIVATE))
            self.assertGreaterEqual(d.flowing(), 3, "no detections while active")
            self.assertGreater(sum(len(a.detections) for a in d.got), 0, "no objects detected in any scene")
            self.assertTrue(d.change(Transition.TRANSITION_DEACTIVATE))
            d.spin(1.0)  # the subscription is gone; let in-flight detections land before counting anew
            self.assertEqual(d.answered(2.0), set(), "detections after deactivate")
            self.assertTrue(d.change(Transition.TRANSITION_ACTIVATE))
            self.assertGreaterEqual(d.flowing(), 3, "no detections after deactivate -> activate")
            self.assertTrue(d.change(Transition.TRANSITION_ACTIVE_SHUTDOWN))
            self.assertEqual(d.state(), State.PRIMARY_STATE_FINALIZED)
        finally:
            d.close()


@launch_testing.post_shutdown_test()
class TestShutdown(unittest.TestCase):
    def test_exit_codes(self, proc_info: Any) -> None:
        # launch stops the (finalized) node with SIGINT: it must exit 0
        launch_testing.asserts.assertExitCodes(proc_info)

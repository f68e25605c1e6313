"""launch_testing: launch/dla_infer_dual.launch.py brings up two instances that each answer their camera.

Run with the Orin config and ``backend:=onnxruntime`` alone (``preprocess_device: auto`` follows the
backend, and the loadable paths are unused), each instance still getting its own ``dla_core``, so it works
on any ROS 2 machine; skipped with the reason where launch_testing is not importable.
"""

from __future__ import annotations

import os
import time
import unittest
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip(
    "launch_testing", reason="launch_testing is not importable: it ships with a ROS 2 install, not on PyPI; "
                             "run these with colcon test or launch_test on a ROS 2 machine")

import launch_testing
import launch_testing.actions
import launch_testing.asserts
import launch_testing.markers
import numpy as np
from launch.actions import IncludeLaunchDescription
from launch.launch_description_sources import PythonLaunchDescriptionSource

from launch import LaunchDescription

os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
os.environ["ROS_LOCALHOST_ONLY"] = "1"
os.environ.setdefault("ROS_DOMAIN_ID", str(1 + (os.getpid() * 11) % 200))

REPO = Path(__file__).resolve().parents[2]
CAMERAS = {0: ("dual0", "/dual/cam0/image"), 1: ("dual1", "/dual/cam1/image")}


@pytest.mark.launch_test
@launch_testing.markers.keep_alive
def generate_test_description() -> LaunchDescription:
    args = {"params_file": str(REPO / "config" / "orin_dla.yaml"), "backend": "onnxruntime",
            "respawn": "false"}
    for core, (ns, topic) in CAMERAS.items():
        args[f"camera{core}_namespace"] = ns
        args[f"camera{core}_topic"] = topic
    return LaunchDescription([
        IncludeLaunchDescription(
            PythonLaunchDescriptionSource(str(REPO / "launch" / "dla_infer_dual.launch.py")),
            launch_arguments=args.items()),
        launch_testing.actions.ReadyToTest(),
    ])


class TestBothInstancesAnswer(unittest.TestCase):
    def test_each_camera_gets_detections(self, proc_output: Any) -> None:
        import rclpy
        from rcl_interfaces.srv import GetParameters
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.qos import QoSProfile, ReliabilityPolicy
        from sensor_msgs.msg import Image
        from vision_msgs.msg import Detection2DArray

        proc_output.assertWaitFor("ready:", timeout=120)
        context = rclpy.Context()
        rclpy.init(context=context)
        node = rclpy.create_node("dual_launch_feeder", context=context)
        executor = SingleThreadedExecutor(context=context)
        executor.add_node(node)
        got: dict[int, list[Any]] = {0: [], 1: []}
        dla_cores: dict[int, Any] = {}
        try:
            qos = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE)
            pubs = {core: node.create_publisher(Image, topic, qos) for core, (_, topic) in CAMERAS.items()}
            for core, (ns, _) in CAMERAS.items():
                node.create_subscription(Detection2DArray, f"/{ns}/detections", got[core].append, 10)
            frame = np.zeros((120, 160, 3), np.uint8)
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline and not all(
                    any(d.header.frame_id == f"cam{c}" for d in got[c]) for c in CAMERAS):
                for core, pub in pubs.items():
                    if pub.get_subscription_count() > 0:
                        msg = Image()
                        msg.header.frame_id = f"cam{core}"
                        msg.height, msg.width, msg.encoding, msg.step = 120, 160, "rgb8", 480
                        msg.data = frame.tobytes()
                        pub.publish(msg)
                end = time.monotonic() + 0.5
                while time.monotonic() < end:
                    executor.spin_once(timeout_sec=0.05)
            for core, (ns, _) in CAMERAS.items():  # the dual launch file's point: one DLA core per instance
                client = node.create_client(GetParameters, f"/{ns}/dla_infer_node/get_parameters")
                if client.wait_for_service(timeout_sec=30):
                    future = client.call_async(GetParameters.Request(names=["dla_core"]))
                    executor.spin_until_future_complete(future, timeout_sec=30)
                    result = future.result()
                    dla_cores[core] = result.values[0].integer_value if result and result.values else None
        finally:
            executor.shutdown()
            node.destroy_node()
            rclpy.shutdown(context=context)
        for core in CAMERAS:  # each instance answers its own camera only
            frames = {d.header.frame_id for d in got[core]}
            self.assertEqual(frames, {f"cam{core}"}, f"instance {core} answered {frames}")
        self.assertEqual(dla_cores, {0: 0, 1: 1}, "dla_core per instance (parameter services)")


@launch_testing.post_shutdown_test()
class TestShutdown(unittest.TestCase):
    def test_exit_codes(self, proc_info: Any) -> None:
        launch_testing.asserts.assertExitCodes(proc_info)

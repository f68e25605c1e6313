"""launch_testing: the node started by launch/dla_infer.launch.py with config/cpu_demo.yaml.

Feeds synthetic VGA (640x480 rgb8) scenes at 10 Hz best effort, as a camera driver would, asserts
detections arrive with the input's header and that /diagnostics counted no frame lost on the way, and after
shutdown asserts every process exited with code 0. VGA over default Fast DDS settings is lost between
processes, so: when config/fastdds_large_images.xml exists, this process and the node (its
child) load it through FASTDDS_DEFAULT_PROFILES_FILE, with the shipped config unchanged; without it, node
and feeder fall back to reliable QoS (a copy of cpu_demo.yaml with qos_reliability: reliable). Needs a ROS 2
install with launch_testing (``colcon test``, or ``launch_test test/ros/test_launch_node.py``) and the package
installed; where launch_testing is not
importable (a venv with PyPI wheels only: it is not on PyPI) the module is skipped with that reason.
"""

from __future__ import annotations

import os
import tempfile
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

from dla_infer_node.ros import launch_args
from launch import LaunchDescription

# also when run by `launch_test` (no conftest): DDS on loopback, a domain of our own
os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
os.environ["ROS_LOCALHOST_ONLY"] = "1"
os.environ.setdefault("ROS_DOMAIN_ID", str(1 + (os.getpid() * 7) % 200))

REPO = Path(__file__).resolve().parents[2]
NAMESPACE = "launch_test"
IMAGE_TOPIC = f"/{NAMESPACE}/camera/image"
DDS_PROFILE = REPO / "config" / "fastdds_large_images.xml"
RELIABLE = not DDS_PROFILE.is_file()
if not RELIABLE:  # set before this process or the node creates a DDS participant
    os.environ.update(launch_args.profile_env(str(DDS_PROFILE)))  # the name this ROS 2's Fast DDS reads


def _params_file() -> str:
    if not RELIABLE:
        return str(REPO / "config" / "cpu_demo.yaml")
    text = (REPO / "config" / "cpu_demo.yaml").read_text(encoding="utf-8")
    assert "qos_reliability: best_effort" in text
    path = Path(tempfile.mkdtemp(prefix="launch_test_")) / "cpu_demo_reliable.yaml"
    path.write_text(text.replace("qos_reliability: best_effort", "qos_reliability: reliable"),
                    encoding="utf-8")
    return str(path)


@pytest.mark.launch_test
@launch_testing.markers.keep_alive
def generate_test_description() -> LaunchDescription:
    return LaunchDescription([
        IncludeLaunchDescription(
            PythonLaunchDescriptionSource(str(REPO / "launch" / "dla_infer.launch.py")),
            launch_arguments={"params_file": _params_file(), "namespace": NAMESPACE,
                              # a trailing slash, as users type it: the launch file normalises it
                              "image_topic": IMAGE_TOPIC + "/", "log_level": "info"}.items()),
        launch_testing.actions.ReadyToTest(),
    ])


def _image(seed: int, sec: int) -> Any:
    from sensor_msgs.msg import Image

    from dla_infer_node.core.synth import generate_scene

    scene = generate_scene(seed, width=640, height=480)
    h, w = scene.image.shape[:2]
    msg = Image()
    msg.header.stamp.sec, msg.header.frame_id = sec, "launch_cam"
    msg.height, msg.width, msg.encoding, msg.step = h, w, "rgb8", w * 3
    msg.data = np.ascontiguousarray(scene.image).tobytes()
    return msg


class TestDetectionsArrive(unittest.TestCase):
    def test_detections_arrive_for_fed_images(self, proc_output: Any) -> None:
        import rclpy
        from diagnostic_msgs.msg import DiagnosticArray
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.qos import QoSProfile, ReliabilityPolicy
        from sensor_msgs.msg import Image
        from vision_msgs.msg import Detection2DArray

        proc_output.assertWaitFor("ready:", timeout=120)
        context = rclpy.Context()
        rclpy.init(context=context)
        node = rclpy.create_node("launch_test_feeder", context=context)
        executor = SingleThreadedExecutor(context=context)
        executor.add_node(node)
        got: list[Any] = []
        diags: list[Any] = []
        try:
            reliability = ReliabilityPolicy.RELIABLE if RELIABLE else ReliabilityPolicy.BEST_EFFORT
            pub = node.create_publisher(Image, IMAGE_TOPIC, QoSProfile(depth=1, reliability=reliability))
            node.create_subscription(Detection2DArray, f"/{NAMESPACE}/detections", got.append, 10)
            node.create_subscription(DiagnosticArray, "/diagnostics", diags.append, 10)
            sent: set[int] = set()
            deadline = time.monotonic() + 60
            i = 0
            while time.monotonic() < deadline and len({d.header.stamp.sec for d in got} & sent) < 5:
                if pub.get_subscription_count() > 0:
                    sec = 100 + i
                    pub.publish(_image(seed=1000 + i, sec=sec))
                    sent.add(sec)
                    i += 1
                end = time.monotonic() + 0.1  # 10 Hz, a camera's pace
                while time.monotonic() < end:
                    executor.spin_once(timeout_sec=0.02)
            end = time.monotonic() + 2.5  # one more diagnostics period after the last frame
            while time.monotonic() < end:
                executor.spin_once(timeout_sec=0.05)
        finally:
            executor.shutdown()
            node.destroy_node()
            rclpy.shutdown(context=context)
        answered = [d for d in got if d.header.stamp.sec in sent]
        self.assertGreaterEqual(len({d.header.stamp.sec for d in answered}), 5, "detections did not arrive")
        fqn = f"/{NAMESPACE}/dla_infer_node"
        status = [st for arr in diags for st in arr.status if st.name.startswith(fqn)]
        self.assertTrue(status, "no /diagnostics from the node")
        values = {kv.key: kv.value for kv in status[-1].values}
        self.assertEqual(values["frames_lost"], "0", f"frames lost on the way: {status[-1].message}")
        for arr in answered:
            self.assertEqual(arr.header.frame_id, "launch_cam")
        self.assertGreater(sum(len(a.detections) for a in answered), 0, "no objects detected in any scene")


@launch_testing.post_shutdown_test()
class TestShutdown(unittest.TestCase):
    def test_exit_codes(self, proc_info: Any) -> None:
        # launch stops the node with SIGINT: it must stop its worker, close the backend and exit 0
        launch_testing.asserts.assertExitCodes(proc_info)

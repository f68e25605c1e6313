"""Launch two dla_infer_node instances, one per camera, on DLA cores 0 and 1 of a Jetson AGX Orin.

    ros2 launch dla_infer_node dla_infer_dual.launch.py params_file:=/path/to/orin_dla.yaml \
        camera0_topic:=/cam0/image_raw camera1_topic:=/cam1/image_raw

Each instance gets its own namespace (``cam0``/``cam1`` by default: topics ``/cam0/detections`` etc.)
and its own ``dla_core``; both read the same params file (it uses ``/**``, so it applies to both names).
Each node opens its own cuDLA device on its core; respawn defaults to true for unattended robots (an
invalid parameter, exit code 2, still stops the launch instead of respawning).
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.substitutions import FindPackageShare

from launch import LaunchContext, LaunchDescription

PACKAGE = "dla_infer_node"


def _single_launch_module() -> Any:
    # reuse node_action() from the single-node launch file next to this one (installed side by side)
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "dla_infer.launch.py")
    spec = importlib.util.spec_from_file_location("dla_infer_launch", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _setup(context: LaunchContext) -> list[Any]:
    def arg(name: str) -> str:
        return LaunchConfiguration(name).perform(context)

    single = _single_launch_module()
    respawn = arg("respawn").strip().lower() in ("1", "true", "yes", "on")
    actions: list[Any] = []
    for core in (0, 1):
        node = single.node_action(
            params_file=arg("params_file"), namespace=arg(f"camera{core}_namespace"),
            image_topic=arg(f"camera{core}_topic"), backend=arg("backend"), log_level=arg("log_level"),
            respawn=respawn, extra_parameters={"dla_core": core})
        actions += [node, single.end_launch_on_failure(node, respawn)]  # a config error stops, never loops
    return actions


def generate_launch_description() -> LaunchDescription:
    return LaunchDescription([
        DeclareLaunchArgument(
            "params_file",
            default_value=PathJoinSubstitution([FindPackageShare(PACKAGE), "config", "orin_dla.yaml"]),
            description="parameters YAML shared by both instances (dla_core is set per instance)"),
        DeclareLaunchArgument("camera0_topic", default_value="/cam0/image_raw",
                              description="image topic of the camera served by DLA core 0"),
        DeclareLaunchArgument("camera1_topic", default_value="/cam1/image_raw",
                              description="image topic of the camera served by DLA core 1"),
        DeclareLaunchArgument("camera0_namespace", default_value="cam0",
                              description="namespace of the instance on DLA core 0"),
        DeclareLaunchArgument("camera1_namespace", default_value="cam1",
                              description="namespace of the instance on DLA core 1"),
        DeclareLaunchArgument("backend", default_value="",
                              description="onnxruntime | cudla; empty keeps the params file's value"),
        DeclareLaunchArgument("log_level", default_value="info", description="node log level"),
        DeclareLaunchArgument("respawn", default_value="true",
                              description="restart an instance whenever it exits (e.g. after a DLA fault)"),
        OpaqueFunction(function=_setup),
    ])

"""Launch one dla_infer_node.

    ros2 launch dla_infer_node dla_infer.launch.py params_file:=/path/to/orin_dla.yaml \
        image_topic:=/camera/image_raw namespace:=front backend:=cudla respawn:=true

Arguments: params_file (default: the installed config/cpu_demo.yaml), namespace (default: none),
image_topic (what the node's ``image`` input is remapped to; ``image/compressed`` follows it as
``<image_topic>/compressed``), backend (empty: keep the params file's value), log_level, respawn (restart
the node after it exits, e.g. after a DLA fault, which ends the node with exit code 1).
An exit with code 2 (an invalid parameter) is never respawned: restarting cannot fix a configuration, so
the launch shuts down with the node's one-line reason in the log instead of looping every 2 s.
lifecycle:=true starts the managed node instead (``dla_infer_lifecycle``: configure, activate, deactivate,
cleanup, shutdown through ``ros2 lifecycle set /<namespace>/dla_infer_node <transition>`` or a lifecycle
manager); the plain node stays the default.
"""

from __future__ import annotations

from typing import Any

from launch.actions import DeclareLaunchArgument, LogInfo, OpaqueFunction, RegisterEventHandler, Shutdown
from launch.event_handlers import OnProcessExit
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.actions import Node
from launch_ros.substitutions import FindPackageShare

from launch import LaunchContext, LaunchDescription

PACKAGE = "dla_infer_node"
LIFECYCLE_EXECUTABLE = "dla_infer_lifecycle"
EXIT_BAD_PARAMETER = 2  # dla_infer_node.ros.node.main's exit code for an invalid parameter


def node_action(*, params_file: str, namespace: str = "", image_topic: str = "image", backend: str = "",
                log_level: str = "info", respawn: bool = False, name: str = PACKAGE,
                extra_parameters: dict[str, Any] | None = None, lifecycle: bool = False) -> Node:
    """The Node action with plain values (the dual launch file builds two of these). ``lifecycle``: the
    managed node (``dla_infer_lifecycle``), which starts unconfigured and waits for its transitions."""
    overrides: dict[str, Any] = dict(extra_parameters or {})
    if backend:
        overrides["backend"] = backend
    parameters: list[Any] = [params_file]
    if overrides:
        parameters.append(overrides)  # later entries win over the file
    return Node(
        package=PACKAGE,
        executable=LIFECYCLE_EXECUTABLE if lifecycle else PACKAGE,
        name=name,
        namespace=namespace or None,
        parameters=parameters,
        remappings=[("image", image_topic), ("image/compressed", image_topic.rstrip("/") + "/compressed")],
        ros_arguments=["--log-level", log_level],
        respawn=respawn,
        respawn_delay=2.0,
        output="screen",
        emulate_tty=True,
    )


def stop_on_bad_parameters(node: Node) -> RegisterEventHandler:
    """Shut the launch down when ``node`` exits with an invalid parameter (before any respawn)."""

    def on_exit(event: Any, context: LaunchContext) -> list[Any] | None:
        if event.returncode != EXIT_BAD_PARAMETER:
            return None  # a fault (1) or a clean stop (0): respawn, if enabled, does its job
        reason = f"{event.action.name} exited with an invalid parameter (see its last log line)"
        return [LogInfo(msg=reason + "; not respawning, shutting down"), Shutdown(reason=reason)]

    return RegisterEventHandler(OnProcessExit(target_action=node, on_exit=on_exit))


def _truthy(text: str) -> bool:
    return text.strip().lower() in ("1", "true", "yes", "on")


def _setup(context: LaunchContext) -> list[Any]:
    # arguments are evaluated here (not passed on as substitutions) so that an empty backend can mean
    # "keep the file's value" and respawn can be a plain bool on every ROS 2 distribution
    def arg(name: str) -> str:
        return LaunchConfiguration(name).perform(context)

    node = node_action(params_file=arg("params_file"), namespace=arg("namespace"),
                       image_topic=arg("image_topic"), backend=arg("backend"),
                       log_level=arg("log_level"), respawn=_truthy(arg("respawn")),
                       lifecycle=_truthy(arg("lifecycle")))
    return [node, stop_on_bad_parameters(node)]


def generate_launch_description() -> LaunchDescription:
    return LaunchDescription([
        DeclareLaunchArgument(
            "params_file",
            default_value=PathJoinSubstitution([FindPackageShare(PACKAGE), "config", "cpu_demo.yaml"]),
            description="ROS 2 parameters YAML (see config/cpu_demo.yaml and config/orin_dla.yaml)"),
        DeclareLaunchArgument("namespace", default_value="", description="node namespace (empty: none)"),
        DeclareLaunchArgument("image_topic", default_value="image",
                              description="image topic the node subscribes (remaps 'image'; the "
                                          "compressed input follows as <image_topic>/compressed)"),
        DeclareLaunchArgument("backend", default_value="",
                              description="onnxruntime | cudla; empty keeps the params file's value"),
        DeclareLaunchArgument("log_level", default_value="info",
                              description="debug | info | warn | error | fatal"),
        DeclareLaunchArgument("respawn", default_value="false",
                              description="restart the node whenever it exits (e.g. after a DLA fault)"),
        DeclareLaunchArgument("lifecycle", default_value="false",
                              description="true: the managed node (starts unconfigured; drive it with "
                                          "ros2 lifecycle set or a lifecycle manager)"),
        OpaqueFunction(function=_setup),
    ])

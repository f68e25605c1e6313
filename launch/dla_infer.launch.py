"""Launch one dla_infer_node.

    ros2 launch dla_infer_node dla_infer.launch.py params_file:=/path/to/orin_dla.yaml \
        image_topic:=/camera/image_raw namespace:=front backend:=cudla respawn:=true

Arguments: params_file (default: the installed config/cpu_demo.yaml), namespace (default: none),
image_topic (what the node's ``image`` input is remapped to; ``image/compressed`` follows it as
``<image_topic>/compressed``), backend (empty: keep the params file's value), log_level, respawn (restart
the node after it exits, e.g. after a DLA fault, which ends the node with exit code 1).
``image_topic`` and ``namespace`` are normalised (spaces and trailing slashes dropped) or refused with one
line before the node starts, and so is a ``params_file`` that is not a file. An exit with code 2 (an invalid
parameter) is never respawned: restarting cannot fix a configuration. A node exit that is not a clean stop
(code 2, or any non-zero code without respawn) ends the launch with a failure: ``ros2 launch`` logs "Caught
exception in launch ...: [launch] dla_infer_node exited with code N: <why>" and itself exits 1 (launch has no
way to pass the node's own code on; run the node with ``ros2 run`` to get it).
lifecycle:=true starts the managed node instead (``dla_infer_lifecycle``: configure, activate, deactivate,
cleanup, shutdown through ``ros2 lifecycle set /<namespace>/dla_infer_node <transition>`` or a lifecycle
manager); the plain node stays the default. dds_profile:=large_images (or a path to a Fast DDS XML
profile) sets FASTDDS_DEFAULT_PROFILES_FILE (Kilted and later) or FASTRTPS_DEFAULT_PROFILES_FILE (Humble,
Jazzy: Fast DDS 2 reads only that one; Fast DDS 3 warns in every process where it is set) for the node's
process; the camera driver's process needs it too, since the publisher's transport decides
whether large best-effort frames arrive (README, "Large images over DDS"). cameras:=front:/front/image_raw,
rear:/rear/image_raw serves several cameras from this one node (README, "Several cameras"); the params
file may list them instead (config/orin_dla_four_cameras.yaml).
"""

from __future__ import annotations

import os
from typing import Any

from launch.actions import DeclareLaunchArgument, OpaqueFunction, RegisterEventHandler
from launch.event_handlers import OnProcessExit
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.actions import Node
from launch_ros.substitutions import FindPackageShare

from dla_infer_node.core.errors import DlaInferError
from dla_infer_node.ros import launch_args
from launch import LaunchContext, LaunchDescription

PACKAGE = "dla_infer_node"
LIFECYCLE_EXECUTABLE = "dla_infer_lifecycle"


def node_action(*, params_file: str, namespace: str = "", image_topic: str = "image", backend: str = "",
                log_level: str = "info", respawn: bool = False, name: str = PACKAGE,
                extra_parameters: dict[str, Any] | None = None, lifecycle: bool = False,
                dds_profile: str = "", cameras: str = "") -> Node:
    """The Node action with plain values (the dual launch file builds two of these); ``image_topic`` and
    ``namespace`` are normalised or refused, a missing ``params_file`` refused
    (:class:`launch_args.LaunchArgumentError`, one line).
    ``lifecycle``: the managed node (``dla_infer_lifecycle``), which starts unconfigured and waits for its
    transitions. ``dds_profile``: '', 'large_images' (the shipped profile) or a path to a Fast DDS XML.
    ``cameras``: 'name[:topic],...' sets the node's camera list (and those topics) over the params file."""
    params_file = launch_args.params_file(params_file)
    image_topic = launch_args.image_topic(image_topic)
    namespace = launch_args.namespace(namespace)
    profile = launch_args.dds_profile(dds_profile, shipped_config_dir())
    overrides: dict[str, Any] = {**launch_args.cameras(cameras), **(extra_parameters or {})}
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
        remappings=[("image", image_topic), ("image/compressed", image_topic + "/compressed")],
        ros_arguments=["--log-level", log_level],
        respawn=respawn,
        respawn_delay=2.0,
        output="screen",
        emulate_tty=True,
        additional_env=launch_args.profile_env(profile) if profile else None,
    )


def shipped_config_dir() -> str:
    """The installed package's config/ (where the shipped Fast DDS profile is)."""
    from ament_index_python.packages import get_package_share_directory

    return os.path.join(get_package_share_directory(PACKAGE), "config")


def end_launch_on_failure(node: Node, respawn: bool) -> RegisterEventHandler:
    """Make the launch fail when ``node`` exits with an invalid parameter (code 2, never respawned: a
    restart cannot fix a configuration) or, without respawn, with any other non-zero code.

    The handler raises: that is what makes launch shut down AND return non-zero (a Shutdown action alone
    ends ``ros2 launch`` with 0). Exits while the launch is already shutting down (Ctrl-C) are left alone.
    """

    def on_exit(event: Any, context: LaunchContext) -> None:
        if context.is_shutdown:
            return
        reason = launch_args.exit_reason(event.action.name, event.returncode)
        if reason is None or (respawn and event.returncode != launch_args.EXIT_BAD_PARAMETER):
            return  # a clean stop, or a fault that respawn restarts
        raise DlaInferError(reason + ("; not respawning" if respawn else ""), stage="launch")

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
                       lifecycle=_truthy(arg("lifecycle")), dds_profile=arg("dds_profile"),
                       cameras=arg("cameras"))
    return [node, end_launch_on_failure(node, _truthy(arg("respawn")))]


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
        DeclareLaunchArgument("dds_profile", default_value="",
                              description="Fast DDS XML profile for the node's process: empty (none), "
                                          "'large_images' (the shipped config/fastdds_large_images.xml) "
                                          "or a path; put the same in the camera driver's process"),
        DeclareLaunchArgument("cameras", default_value="",
                              description="several cameras in this one node: 'name[:topic],...' (e.g. "
                                          "front:/front/image_raw,rear:/rear/image_raw); empty keeps the "
                                          "params file's cameras (config/orin_dla_four_cameras.yaml)"),
        OpaqueFunction(function=_setup),
    ])

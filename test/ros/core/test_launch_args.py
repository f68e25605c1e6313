"""What the launch files do with image_topic / namespace and with a node's exit code (ROS-free part;
the launch files themselves run under launch_testing in test_launch_node.py / test_launch_dual.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dla_infer_node.ros import launch_args
from dla_infer_node.ros.launch_args import LaunchArgumentError


@pytest.mark.parametrize("given,used", [
    ("camera/image_raw/", "camera/image_raw"), ("/cam0/image_raw//", "/cam0/image_raw"),
    (" image ", "image"), ("~/image", "~/image"), ("/a_1/b2", "/a_1/b2"),
])
def test_topics_are_normalised(given: str, used: str) -> None:
    assert launch_args.image_topic(given) == used


@pytest.mark.parametrize("given", ["", "  ", "/", "cam era/image", "cam//image", "1cam/image",
                                   "cam/image-raw", "cam/~image"])
def test_bad_topics_are_refused_in_one_line(given: str) -> None:
    with pytest.raises(LaunchArgumentError) as err:
        launch_args.image_topic(given)
    text = str(err.value)
    assert f"image_topic:={given!r}" in text and "\n" not in text and text.startswith("[launch]")


@pytest.mark.parametrize("given,used", [("", ""), ("/", ""), ("front", "/front"), ("/front/", "/front"),
                                        (" robot/front ", "/robot/front")])
def test_namespaces_are_normalised(given: str, used: str) -> None:
    assert launch_args.namespace(given) == used


@pytest.mark.parametrize("given", ["fr ont", "front//left", "2front", "~front", "front-left"])
def test_bad_namespaces_are_refused(given: str) -> None:
    with pytest.raises(LaunchArgumentError, match="namespace"):
        launch_args.namespace(given)


def test_exit_reasons() -> None:
    assert launch_args.exit_reason("n", 0) is None and launch_args.exit_reason("n", None) is None
    assert "code 2: an invalid parameter" in str(launch_args.exit_reason("n", 2))
    assert "code 1: a backend" in str(launch_args.exit_reason("n", 1))
    assert "signal 9" in str(launch_args.exit_reason("n", -9))


def test_camera_list_becomes_the_node_parameters() -> None:
    assert launch_args.cameras("") == {}
    assert launch_args.cameras("front:/front/image_raw, rear ,left:left/image/") == {
        "cameras": ["front", "rear", "left"], "front.topic": "/front/image_raw", "left.topic": "left/image"}


@pytest.mark.parametrize("given", ["front,front", "1cam", "_x", "a b", "front:/bad topic"])
def test_bad_camera_lists_are_refused_in_one_line(given: str) -> None:
    with pytest.raises(LaunchArgumentError) as err:
        launch_args.cameras(given)
    assert "cameras" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("given", ["/nonexistent.yaml", "", " ", "/tmp"])
def test_a_params_file_that_is_not_there_is_refused_in_one_line(given: str) -> None:
    with pytest.raises(LaunchArgumentError) as err:
        launch_args.params_file(given)
    text = str(err.value)
    assert f"params_file:={given!r}" in text and "existing ROS 2 parameters YAML file" in text
    assert "\n" not in text and text.startswith("[launch]")


def test_the_launch_files_check_the_params_file_before_the_node_action() -> None:
    # where launch_ros is installed, test/ros/test_launch_exit.py runs it; here: the call is in place, in the
    # function both launch files build their nodes with
    text = (Path(__file__).resolve().parents[3] / "launch" / "dla_infer.launch.py").read_text()
    body = text.split("def node_action(", 1)[1].split("\ndef ", 1)[0]
    assert "params_file = launch_args.params_file(params_file)" in body
    assert body.index("launch_args.params_file(") < body.index("return Node(")


def test_an_existing_params_file_is_used_as_given(tmp_path: Path) -> None:
    params = tmp_path / "p.yaml"
    params.write_text("/**:\n  ros__parameters: {}\n")
    assert launch_args.params_file(f" {params} ") == str(params)


def test_the_profile_variable_is_the_one_the_distro_reads() -> None:
    old, new = launch_args.DDS_PROFILE_ENV_FASTDDS2, launch_args.DDS_PROFILE_ENV
    for distro in ("humble", "iron", "jazzy", " Jazzy "):
        assert launch_args.profile_env_names({"ROS_DISTRO": distro}) == (old,)
    for distro in ("kilted", "rolling", "lyrical"):
        assert launch_args.profile_env_names({"ROS_DISTRO": distro}) == (new,)
    major = launch_args.rclpy_major()  # no ROS_DISTRO (the venv): the installed rclpy tells
    expected = (new, old) if major is None else (new,) if major >= 9 else (old,)
    assert launch_args.profile_env_names({}) == expected
    assert launch_args.profile_env("p", {"ROS_DISTRO": "jazzy"}) == {old: "p"}

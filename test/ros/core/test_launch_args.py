"""What the launch files do with image_topic / namespace and with a node's exit code (ROS-free part;
the launch files themselves run under launch_testing in test_launch_node.py / test_launch_dual.py)."""

from __future__ import annotations

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

"""`ros2 launch`'s own exit status when the node cannot start: launch/dla_infer.launch.py run by launch's
LaunchService (what `ros2 launch` calls) in a child process. Skipped where launch is not importable."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("launch_ros", reason="launch_ros is not importable: it ships with a ROS 2 install, "
                                         "not on PyPI; run on a ROS 2 machine")

REPO = Path(__file__).resolve().parents[2]
RUN = """
import sys
from launch import LaunchDescription, LaunchService
from launch.actions import IncludeLaunchDescription
from launch.launch_description_sources import PythonLaunchDescriptionSource
service = LaunchService()
service.include_launch_description(LaunchDescription([IncludeLaunchDescription(
    PythonLaunchDescriptionSource(sys.argv[1]), launch_arguments=[a.split(':=', 1) for a in sys.argv[2:]])]))
sys.exit(service.run())
"""


def launch(*args: str) -> tuple[int, str]:
    out = subprocess.run([sys.executable, "-c", RUN, str(REPO / "launch" / "dla_infer.launch.py"), *args],
                         capture_output=True, text=True, timeout=120, cwd=REPO)
    return out.returncode, out.stdout + out.stderr


def test_cudla_without_artifact_fails_the_launch_naming_the_parameter() -> None:
    rc, log = launch(f"params_file:={REPO / 'config' / 'cpu_demo.yaml'}", "backend:=cudla")
    assert rc == 1, log  # launch cannot pass the node's 2 on; non-zero is what a supervisor needs
    assert "parameter 'loadable_path' = '' is invalid" in log, log
    assert "exited with code 2: an invalid parameter" in log, log


def test_bad_image_topic_is_refused_before_the_node_starts() -> None:
    rc, log = launch(f"params_file:={REPO / 'config' / 'cpu_demo.yaml'}", "image_topic:=cam era/image")
    assert rc == 1, log
    assert "launch argument image_topic:='cam era/image' is invalid" in log and "process started" not in log


def test_a_params_file_that_is_not_there_is_refused_before_the_node_starts() -> None:
    # launch_ros itself only warns and the node would run on its defaults
    rc, log = launch("params_file:=/nonexistent.yaml")
    assert rc == 1, log
    assert "launch argument params_file:='/nonexistent.yaml' is invalid" in log, log
    assert "process started" not in log

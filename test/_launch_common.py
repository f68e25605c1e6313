"""What the launch_testing modules share; import it only after ``pytest.importorskip("launch_testing",
reason=SKIP_REASON)`` (the module needs launch and launch_testing).

On import it keeps DDS on loopback with a domain of its own, also when the test runs under ``launch_test``
(no conftest).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import launch_testing.actions
from launch.actions import IncludeLaunchDescription
from launch.launch_description_sources import PythonLaunchDescriptionSource

from launch import LaunchDescription

SKIP_REASON = ("launch_testing is not importable: it ships with a ROS 2 install, not on PyPI; "
               "run these with colcon test or launch_test on a ROS 2 machine")
REPO = Path(__file__).resolve().parent.parent

os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
os.environ["ROS_LOCALHOST_ONLY"] = "1"
os.environ.setdefault("ROS_DOMAIN_ID", str(1 + (os.getpid() * 13) % 200))


def include_launch(arguments: Mapping[str, str],
                   launch_file: str = "dla_infer.launch.py") -> LaunchDescription:
    """The package's launch file with ``arguments``, then ReadyToTest."""
    return LaunchDescription([
        IncludeLaunchDescription(PythonLaunchDescriptionSource(str(REPO / "launch" / launch_file)),
                                 launch_arguments=dict(arguments).items()),
        launch_testing.actions.ReadyToTest(),
    ])

"""Which test files are "node" tests (they need rclpy, the ROS messages or launch) and which are "core": read
from the folder a file lies in, so an interpreter without rclpy can sort them without opening them.

test/ mirrors the package's rooms (core, artifact, dla_build, backends, ros, bags, cli, bench; docs, tools,
emulator and package for what lies outside them). The node's own room, test/ros/, holds node tests; every
other room holds core tests and keeps those of its tests that need ROS in a ``ros/`` subfolder
(test/bags/ros/test_capture.py); the ROS-free modules of ros/ are tested in test/ros/core/. So the
innermost folder named ``ros`` or ``core`` decides, and a test under neither is core. Core tests must pass
on Python 3.10 without any ROS wheel (`make test-py310`); test/package/test_suites.py checks that none of
them imports ROS.
"""

from __future__ import annotations

from pathlib import Path

TEST_DIR = Path(__file__).resolve().parent
SUITE_OF_FOLDER = {"ros": "node", "core": "core"}


def suite_of(path: Path) -> str:
    """'node' or 'core' for a test file under test/ (a file elsewhere is core: no folder of ours says ROS)."""
    try:
        folders = path.resolve().relative_to(TEST_DIR).parts[:-1]
    except ValueError:
        return "core"
    return next((SUITE_OF_FOLDER[f] for f in reversed(folders) if f in SUITE_OF_FOLDER), "core")


def is_node_test_file(path: Path) -> bool:
    return suite_of(path) == "node"

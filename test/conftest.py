"""Test-wide setup: DDS stays on this machine, and every pytest process gets its own ROS domain.

The environment is set at import time, before any test module can initialise rclpy, so it holds for
the test process itself and for every child it starts (node processes, replay, capture, launch).
Fixtures for running the node as a separate process live here; ROS-side helpers in ``_node_helpers``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


def _domain_id() -> int:
    # distinct per process: pytest-xdist workers (gw0, gw1, ...) and concurrent pytest runs (pid) differ.
    # 1..200 keeps Fast DDS's port arithmetic (7400 + 250 * domain + ...) well inside the valid range.
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker[2:]) if worker[2:].isdigit() else 0
    return 1 + (os.getpid() * 7 + index * 13) % 200


os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"  # Jazzy and later
os.environ["ROS_LOCALHOST_ONLY"] = "1"                     # Humble (deprecated but honoured later)
# a domain the user chose is kept (their machine, their choice); otherwise each pytest process takes its own
os.environ.setdefault("ROS_DOMAIN_ID", str(_domain_id()))
_OWN_LOG_DIR = None if os.environ.get("ROS_LOG_DIR") else tempfile.mkdtemp(prefix="dla_infer_test_roslog_")
if _OWN_LOG_DIR is not None:
    os.environ["ROS_LOG_DIR"] = _OWN_LOG_DIR
os.environ.setdefault("RCUTILS_COLORIZED_OUTPUT", "0")
os.environ.setdefault("PYTHONUNBUFFERED", "1")


def pytest_unconfigure(config: pytest.Config) -> None:
    if _OWN_LOG_DIR is not None:  # ROS logs of this run (set ROS_LOG_DIR to keep them)
        shutil.rmtree(_OWN_LOG_DIR, ignore_errors=True)


@pytest.fixture(scope="session")
def ros_env() -> dict[str, str]:
    """The environment for ROS child processes (a copy of this process's, DDS kept on loopback)."""
    return dict(os.environ)


@pytest.fixture
def node_runner(tmp_path: Path, ros_env: dict[str, str]) -> Iterator[object]:
    """Factory for node processes; any still running at teardown are stopped (SIGINT, then SIGKILL)."""
    from _node_helpers import NodeRunner  # local: keeps ROS-free tests free of the helper's imports

    runner = NodeRunner(tmp_path, ros_env)
    yield runner
    runner.cleanup()


@pytest.fixture(scope="module")
def module_tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("module")

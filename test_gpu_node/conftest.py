"""The GPU machine's node tests (``make test-gpu-node``): DDS on loopback in one ROS domain, for this pytest
process (its own rclpy probes) and every process it starts, and the shipped model as an emulated DLA
loadable, built once for the session.

test/conftest.py's fixtures do not apply here; the helpers of test/ (``_node_helpers``, ``_encoding_bags``)
import by name, as pyproject's pytest ``pythonpath`` puts test/ on the path for this folder too.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
os.environ.setdefault("ROS_DOMAIN_ID", "71")
os.environ.setdefault("PYTHONUNBUFFERED", "1")


@pytest.fixture(scope="session")
def ros_env() -> dict[str, str]:
    """The environment of the processes a test starts: this one's, with the repository on the path."""
    return dict(os.environ, PYTHONPATH=f"{ROOT}:{os.environ.get('PYTHONPATH', '')}")


@pytest.fixture(scope="session")
def emulated_node() -> dict[str, Any]:
    """NodeRunner.start's arguments for the node as the DLA EMULATOR runs it: the emulator's host runs the
    loadable's network (ONNX Runtime) in the node's own process."""
    return {"module": "emulator.network_host", "extra_args": ("dla_infer_node.ros.node",)}


@pytest.fixture(scope="session")
def emulated_loadable(tmp_path_factory: pytest.TempPathFactory, ros_env: dict[str, str]) -> Path:
    """The shipped network "compiled" for the emulated DLA (fp16, input hwc4, outputs chw16): the loadable,
    its sidecar beside it."""
    arts = subprocess.run([sys.executable, "-m", "emulator.network_build",
                           "--out", str(tmp_path_factory.mktemp("art")), "--precision", "fp16",
                           "--input", "hwc4", "--output", "chw16"],
                          cwd=ROOT, env=ros_env, capture_output=True, text=True, timeout=300)
    assert arts.returncode == 0, arts.stderr
    sidecar = Path(arts.stdout.split()[-1])
    return sidecar.with_name(sidecar.name.removesuffix(".yaml"))

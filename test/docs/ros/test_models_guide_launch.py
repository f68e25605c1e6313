"""The launch line of models/README.md's guide: after the guide's build and doctor lines, the node starts
with backend cudla on the compiled artifact (over the DLA EMULATOR + fake CUDA driver) and stops cleanly."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from _models_guide import line_env, prepare, run_build_and_doctor, run_node

pytestmark = pytest.mark.node  # the node runs rclpy over DDS, in a child process the import scan cannot see


def test_guide_launch_line_starts_the_node_on_the_artifact(tmp_path: Path, ros_env: dict[str, str]) -> None:
    pytest.importorskip("cuda.bindings.cudla")
    commands = prepare(tmp_path)
    run_build_and_doctor(tmp_path, commands, ros_env)
    line = commands[-1]
    run_node(shlex.split(line.partition("#")[0]), tmp_path / "emu", line_env(line, ros_env), tmp_path)

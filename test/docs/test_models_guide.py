"""Every command of models/README.md's guide, run as written in a copy of the models folder: here the
dla_build lines and the doctor (no ROS: this file runs in the core suite on Python 3.10 too);
test_models_guide_launch.py runs the launch line, which starts the node."""

from __future__ import annotations

from pathlib import Path

import pytest
from _models_guide import prepare, run_build_and_doctor


def test_guide_build_and_doctor_lines_do_what_the_text_says(tmp_path: Path, ros_env: dict[str, str]) -> None:
    pytest.importorskip("cuda.bindings.cudla")
    run_build_and_doctor(tmp_path, prepare(tmp_path), ros_env)

"""The core/node split (test/_suites.py) follows from the folders, and the folders tell the truth: no core
test imports ROS, and every test file lies in a room of test/."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest
from _imports import importorskip_names, imports_of
from _suites import TEST_DIR, is_node_test_file, suite_of

PY310_ONLY_MISSING = {"tomllib", "wsgiref.types"}  # stdlib modules that appeared in 3.11+
ROS_PACKAGES = frozenset({
    "rclpy", "rcl_interfaces", "rosidl_runtime_py", "rosbag2_py", "builtin_interfaces", "std_msgs",
    "sensor_msgs", "geometry_msgs", "diagnostic_msgs", "lifecycle_msgs", "vision_msgs", "launch",
    "launch_ros", "launch_testing", "launch_testing_ros",
})  # not ament_index_python: core.resources tries it and falls back without ROS
# the package's rooms, and the rooms of what lies outside the package
ROOMS = {"core", "artifact", "dla_build", "backends", "ros", "bags", "cli", "bench",
         "docs", "tools", "emulator", "package"}


@pytest.mark.parametrize(("where", "suite"), [
    ("core/test_x.py", "core"),
    ("bags/test_x.py", "core"),
    ("bags/ros/test_x.py", "node"),        # a ROS-free room's tests that need ROS
    ("ros/test_x.py", "node"),
    ("ros/core/test_x.py", "core"),        # the ROS-free modules of ros/
    ("docs/ros/test_x.py", "node"),
    ("package/test_x.py", "core"),
])
def test_a_file_is_sorted_by_its_folder(where: str, suite: str) -> None:
    assert suite_of(TEST_DIR / where) == suite


def _test_files() -> list[Path]:
    return sorted(TEST_DIR.rglob("test_*.py"))


def test_both_suites_hold_tests_and_the_node_helpers_count_as_node() -> None:
    files = _test_files()
    node = {p.name for p in files if is_node_test_file(p)}
    assert {"test_node_detections.py", "test_replay.py", "test_readme_run_node.py"} <= node
    assert {"test_bag_io.py", "test_preprocess.py", "test_package_deps.py", "test_suites.py"}.isdisjoint(node)
    assert len(files) - len(node) >= 20


def test_every_test_file_lies_in_a_room() -> None:
    bad = []
    for path in _test_files():
        folders = path.relative_to(TEST_DIR).parts[:-1]
        if not folders or folders[0] not in ROOMS or any(f not in ("ros", "core") for f in folders[1:]):
            bad.append(str(path.relative_to(TEST_DIR)))
    assert bad == [], f"test files outside test/<room>/[ros|core]/: {bad}"


def _ros_imports(path: Path) -> list[str]:
    """ROS packages a file imports (lazily too) or asks importorskip for, also through its test helpers."""
    names = [imp.name for imp in imports_of(path)]
    asked = [*names, *importorskip_names(path)]
    out = [f"{path.name}: {n}" for n in asked if n.split(".")[0] in ROS_PACKAGES]
    for name in names:
        helper = TEST_DIR / f"{name}.py"
        if name.startswith("_") and helper.is_file() and helper != path:
            out += _ros_imports(helper)
    return out


@pytest.mark.parametrize(("source", "ros"), [
    ("import numpy\n", False),
    ("def test_x():\n    import rclpy\n", True),                                  # lazy
    ("from sensor_msgs.msg import Image\n", True),
    ("import pytest\nrclpy = pytest.importorskip('rclpy')\n", True),            # would skip silently
    ("from _node_helpers import NodeRunner\n", True),                           # through a test helper
    ("from _core_fixtures import make_metadata\n", False),
])
def test_the_check_sees_every_way_to_import_ros(tmp_path: Path, source: str, ros: bool) -> None:
    probe = tmp_path / "test_probe.py"
    probe.write_text(source)
    assert bool(_ros_imports(probe)) is ros


def test_no_core_test_imports_ros() -> None:
    # a core test that imported ROS would fail (or, through importorskip, silently skip) on Python 3.10
    core = [p for p in _test_files() if not is_node_test_file(p)]
    bad = [f"{p.relative_to(TEST_DIR)} -> {hit}" for p in core for hit in _ros_imports(p)]
    assert bad == [], "move these into a ros/ folder:\n" + "\n".join(bad)
    assert len(core) > 30


def _python_files() -> list[Path]:
    repo = TEST_DIR.parent
    roots = ("dla_infer_node", "tools", "test", "launch", "scripts")
    return sorted(p for r in roots for p in (repo / r).rglob("*.py") if "__pycache__" not in p.parts)


def test_every_python_file_parses_as_python_3_10() -> None:
    # ROS modules are not imported by the Python 3.10 core run: their syntax is checked here instead
    # (match/except* and friends; mypy's python_version = 3.10 covers typing and stdlib attributes)
    bad = []
    for path in _python_files():
        try:
            ast.parse(path.read_text(encoding="utf-8"), filename=str(path), feature_version=(3, 10))
        except SyntaxError as exc:
            bad.append(f"{path}:{exc.lineno}: {exc.msg}")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            bad += [f"{path}:{node.lineno}: {n} is not in Python 3.10"
                    for n in names if n in PY310_ONLY_MISSING]
    assert bad == [], "\n".join(bad)
    assert len(_python_files()) > 50 and sys.version_info >= (3, 10)

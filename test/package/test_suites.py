"""The core/node split (test/_suites.py) sees every way a test file can need ROS; this tree's split holds."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest
from _suites import is_node_test_file

TEST_DIR = Path(__file__).resolve().parents[1]
PY310_ONLY_MISSING = {"tomllib", "wsgiref.types"}  # stdlib modules that appeared in 3.11+


@pytest.mark.parametrize(("source", "node"), [
    ("import numpy\n", False),
    ("def test_x():\n    import rclpy\n", True),                                  # lazy
    ("from sensor_msgs.msg import Image\n", True),
    ("import pytest\nrclpy = pytest.importorskip('rclpy')\n", True),            # would skip silently
    # a ROS tool in a child (split here so that this file's own strings do not name it)
    ("import subprocess\nCMD = ['-m', 'dla_infer_node.bags." + "replay']\n", True),
    ("from dla_infer_node.bags.capture import summarize\n", True),              # imports rclpy lazily
    ("from dla_infer_node.bags.bag_io import BagReader\n", False),
    ("import pytest\npytestmark = pytest.mark.node\n", True),
])
def test_a_file_is_sorted_by_what_it_needs(tmp_path: Path, source: str, node: bool) -> None:
    probe = tmp_path / "test_probe.py"
    probe.write_text(source)
    assert is_node_test_file(probe) is node


def test_both_suites_hold_tests_and_the_node_helpers_count_as_node() -> None:
    files = sorted(TEST_DIR.rglob("test_*.py"))
    node = {p.name for p in files if is_node_test_file(p)}
    assert {"test_node_detections.py", "test_replay.py", "test_readme_run_node.py"} <= node
    assert {"test_bag_io.py", "test_preprocess.py", "test_package_deps.py", "test_suites.py"}.isdisjoint(node)
    assert len(files) - len(node) >= 20


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

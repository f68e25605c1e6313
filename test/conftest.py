"""Test-wide setup: DDS stays on this machine, and every pytest process gets its own ROS domain.

The environment is set at import time, before any test module can initialise rclpy, so it holds for
the test process itself and for every child it starts (node processes, replay, capture, launch).
Fixtures for running the node as a separate process live here; ROS-side helpers in ``_node_helpers``.

Suites: ``--suite core`` collects only the test files that need no ROS (``_suites`` sorts them by their
folder: a ``ros/`` folder holds node tests), ``--suite node`` only the others; every test carries the marker
``core`` or ``node`` as well. ``--min-passed N`` fails a run that passed fewer than N tests, so a run on an
interpreter that lacks something cannot go green by skipping everything.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from _shm_watch import ShmWatch, describe_left
from _suites import is_node_test_file

from dla_infer_node.ros.launch_args import rclpy_major


def _domain_id() -> int:
    # distinct per process: pytest-xdist workers (gw0, gw1, ...) and concurrent pytest runs (pid) differ.
    # 1..200 keeps Fast DDS's port arithmetic (7400 + 250 * domain + ...) well inside the valid range.
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker[2:]) if worker[2:].isdigit() else 0
    return 1 + (os.getpid() * 7 + index * 13) % 200


os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"  # Iron and later
if (rclpy_major() or 0) < 4:
    os.environ["ROS_LOCALHOST_ONLY"] = "1"  # Humble knows only this one
else:
    # Jazzy's rcl warns twice on stderr for every process while it is set (deprecated, and it overrides the
    # discovery range), which the tests that count a tool's stderr lines would see; LOCALHOST above already
    # keeps DDS on loopback there
    os.environ.pop("ROS_LOCALHOST_ONLY", None)
# a domain the user chose is kept (their machine, their choice); otherwise each pytest process takes its own
os.environ.setdefault("ROS_DOMAIN_ID", str(_domain_id()))
_OWN_LOG_DIR = None if os.environ.get("ROS_LOG_DIR") else tempfile.mkdtemp(prefix="dla_infer_test_roslog_")
if _OWN_LOG_DIR is not None:
    os.environ["ROS_LOG_DIR"] = _OWN_LOG_DIR
os.environ.setdefault("RCUTILS_COLORIZED_OUTPUT", "0")
os.environ.setdefault("PYTHONUNBUFFERED", "1")
# the Fast DDS shared-memory segments this run's processes own: none may stay behind (see _shm_watch)
_SHM_WATCH = ShmWatch().start()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("dla_infer_node")
    group.addoption("--suite", choices=("all", "core", "node"), default="all",
                    help="core: only tests that need no ROS (Python 3.10 CI run); node: only the ROS ones")
    group.addoption("--min-passed", type=int, default=0, metavar="N",
                    help="fail the run when fewer than N tests passed")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "core: needs no ROS (runs in `make test-py310`); set automatically")
    config.addinivalue_line("markers", "node: needs rclpy / ROS messages / launch (a file under a ros/ "
                                       "folder of test/); set automatically")
    config.pluginmanager.register(_PassCounter(config.getoption("--min-passed")), "dla_pass_counter")


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    suite = config.getoption("--suite")
    if suite == "all" or collection_path.suffix != ".py" or not collection_path.name.startswith("test_"):
        return None
    # decided before the file is imported: a node test file cannot even be imported without rclpy
    return is_node_test_file(collection_path) != (suite == "node") or None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker("node" if is_node_test_file(item.path) else "core")


def pytest_report_header(config: pytest.Config) -> str:
    return f"suite: {config.getoption('--suite')} (test/_suites.py: a ros/ folder holds node tests)"


class _PassCounter:
    def __init__(self, minimum: int) -> None:
        self.minimum = minimum
        self.passed = 0

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call" and report.passed:
            self.passed += 1

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.minimum and self.passed < self.minimum and session.exitstatus in (0, 5):
            session.config.get_terminal_writer().line(
                f"--min-passed {self.minimum}: only {self.passed} tests passed; a missing dependency or a "
                "suite split that lost tests?", red=True, bold=True)
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_sessionfinish(session: pytest.Session) -> None:
    # what a module or session fixture's processes left after the last test's own check
    left = _SHM_WATCH.left_behind()
    _SHM_WATCH.stop()
    if left:
        session.config.get_terminal_writer().line(describe_left(left), red=True, bold=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_unconfigure(config: pytest.Config) -> None:
    if _OWN_LOG_DIR is not None:  # ROS logs of this run (set ROS_LOG_DIR to keep them)
        shutil.rmtree(_OWN_LOG_DIR, ignore_errors=True)


@pytest.fixture(autouse=True)
def no_shm_segment_left_behind() -> Iterator[None]:
    """Fail a test after which a process it started lies dead with its Fast DDS segment still in /dev/shm
    (RAM that nothing gives back); the segment is removed, so the next test starts clean."""
    yield
    left = _SHM_WATCH.left_behind()
    if left:
        pytest.fail(describe_left(left), pytrace=False)


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

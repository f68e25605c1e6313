"""The DLA EMULATOR holds each task for a set time on its core (``DLA_EMU_TASK_MS``), so throughput on one
and two DLA cores can be measured on a GPU machine: a core runs one task at a time, two cores side by side.

What is asserted is time itself, so the bounds are wide: a lower bound is exact (a task's stream cannot go
on before its end on the core), an upper bound keeps at least one full hold of slack. Runs under the fake
driver (CPU CI, through test/test_cudla_fake_driver.py) and on the GPU.
"""

from __future__ import annotations

import ctypes
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dla_infer_node.artifact.sidecar import load_artifact
from dla_infer_node.backends.cudla import CudlaBackend
from emulator import cases

pytestmark = pytest.mark.emulated
HOLD_MS = 100.0
TASKS = 3


def _timed_run(backends: list[CudlaBackend], frame: np.ndarray) -> float:
    """Seconds for every backend to run TASKS frames, each backend on its own thread (as the node's per-core
    workers do)."""
    errors: list[BaseException] = []

    def run(be: CudlaBackend) -> None:
        try:
            for _ in range(TASKS):
                be.infer(frame, "rgb8")
        except BaseException as exc:  # reported below, not lost on the thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(be,)) for be in backends]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(60.0)
    assert not errors, errors[0]
    return time.monotonic() - t0


def _core_tasks(emu: Any, core: int) -> int:
    fn = emu.lib.dlaEmuCoreTasks
    fn.restype, fn.argtypes = ctypes.c_uint64, [ctypes.c_uint64]
    return int(fn(core))


@pytest.mark.parametrize("cores", [(0, 1), (0, 0)])
def test_tasks_hold_their_core_two_cores_side_by_side(emu: Any, cuda: Any, artifacts_dir: Path,
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      cores: tuple[int, int]) -> None:
    art = cases.oracle_artifact(artifacts_dir, "linear", "fp16", "linear", "fp16")
    frame = cases.make_frame(1).image
    backends = [CudlaBackend(load_artifact(art.sidecar), dla_core=c, cuda=cuda) for c in cores]
    try:
        for be in backends:  # first frames (allocation, first kernel) before the clock starts
            be.infer(frame, "rgb8")
        before = [_core_tasks(emu, c) for c in (0, 1)]
        monkeypatch.setenv("DLA_EMU_TASK_MS", str(HOLD_MS))
        elapsed_ms = 1e3 * _timed_run(backends, frame)
    finally:
        for be in reversed(backends):
            be.close()
    claimed = [_core_tasks(emu, c) - b for c, b in zip((0, 1), before, strict=True)]
    assert claimed == [TASKS * cores.count(0), TASKS * cores.count(1)]
    serial_ms = 2 * TASKS * HOLD_MS
    if cores == (0, 0):  # one core: the six tasks one after another
        assert elapsed_ms >= serial_ms, f"{elapsed_ms:.0f} ms: tasks of one core overlapped"
    else:  # two cores: three tasks each, side by side
        assert TASKS * HOLD_MS <= elapsed_ms < serial_ms - HOLD_MS, \
            f"{elapsed_ms:.0f} ms for {TASKS} tasks of {HOLD_MS:.0f} ms on each of two cores"


def test_without_a_hold_a_task_takes_no_set_time(emu: Any, cuda: Any, artifacts_dir: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DLA_EMU_TASK_MS", raising=False)
    art = cases.oracle_artifact(artifacts_dir, "linear", "fp16", "linear", "fp16")
    frame = cases.make_frame(1).image
    with CudlaBackend(load_artifact(art.sidecar), cuda=cuda) as be:
        be.infer(frame, "rgb8")
        before = _core_tasks(emu, 0)
        assert 1e3 * _timed_run([be], frame) < TASKS * HOLD_MS
    assert _core_tasks(emu, 0) == before  # no hold: nothing claimed


def test_core_file_shares_the_timeline(emu: Any, cuda: Any, artifacts_dir: Path, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """DLA_EMU_CORE_FILE keeps the cores' timelines in a file (for several processes): a core already
    busy there, as another process would leave it, delays this process's next task."""
    art = cases.oracle_artifact(artifacts_dir, "linear", "fp16", "linear", "fp16")
    frame = cases.make_frame(1).image
    shared = tmp_path / "cores"
    monkeypatch.setenv("DLA_EMU_CORE_FILE", str(shared))
    with CudlaBackend(load_artifact(art.sidecar), cuda=cuda) as be:
        be.infer(frame, "rgb8")
        monkeypatch.setenv("DLA_EMU_TASK_MS", str(HOLD_MS))
        be.infer(frame, "rgb8")  # creates the file; core 0 busy until about now
        ends = np.frombuffer(shared.read_bytes(), np.uint64)
        assert len(ends) == 16 and ends[0] > 0 and ends[1] == 0
        # another process claims core 0 for the next second: written straight into the file
        busy_until = time.clock_gettime_ns(time.CLOCK_MONOTONIC) + 1_000_000_000
        with open(shared, "r+b") as fh:  # in place: the emulator has the file mapped
            fh.write(np.array([busy_until, *ends[1:]], np.uint64).tobytes())
        t0 = time.monotonic()
        be.infer(frame, "rgb8")
        assert time.monotonic() - t0 >= 1.0 + HOLD_MS / 1e3 - 0.05  # waited for the other process's task

"""Stopping the benchmark's role processes: SIGINT, and for one that hangs, its stacks then SIGKILL."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

DUMP_WAIT_S = 10.0  # the longest a hung role is given to write its stacks before it is killed


def _size(path: Path | None) -> int:
    return path.stat().st_size if path is not None and path.exists() else 0


def dump_stacks(proc: subprocess.Popen[bytes], log: Path | None) -> None:
    """SIGUSR1 (faulthandler in the role: every thread's stack to its log), then wait until the dump is
    there: the log grew and stopped growing. A fixed pause lost the dump on a loaded machine, where the
    role may not be scheduled to run its handler before the SIGKILL that follows."""
    before = _size(log)
    proc.send_signal(signal.SIGUSR1)
    if log is None:
        time.sleep(1.0)
        return
    deadline, last = time.monotonic() + DUMP_WAIT_S, -1
    while time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
        now = _size(log)
        if now > before and now == last:
            return
        last = now


def stop_all(procs: Mapping[str, subprocess.Popen[bytes]], grace_s: float = 30.0,
             logs: Mapping[str, Path] | None = None) -> dict[str, int | str]:
    """SIGINT every role still running; one still there ``grace_s`` later dumps its threads (into
    ``logs[role]`` when given, waited for) and is killed. Returns each exit code, or why there is none."""
    for p in procs.values():
        if p.poll() is None:
            p.send_signal(signal.SIGINT)
    rcs: dict[str, int | str] = {}
    for role, p in procs.items():
        try:
            rcs[role] = p.wait(grace_s)
        except subprocess.TimeoutExpired:
            dump_stacks(p, (logs or {}).get(role))
            p.kill()
            p.wait()
            rcs[role] = "hung after SIGINT (stacks in its log), killed"
    return rcs

"""Which Fast DDS shared-memory segments this test run's own processes owned, and which they left behind.

A thread polls /proc/locks (``dds_shm.lock_owners``) and notes every segment whose lock is held by a
process descended from this pytest process (nodes, replays, captures, benchmark roles, launch and what it
starts). A noted segment still in /dev/shm after its owner died was left behind: the owner was killed hard
and nobody cleaned up. Segments of other processes on the machine are never noted, so concurrent runs do not
disturb each other. A process that lives shorter than one poll may go unseen (a miss, never a false alarm).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from dla_infer_node.ros.dds_shm import Orphan, lock_owners, remove_orphans

_POLL_S = 0.2


def _parent(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])  # the command may hold spaces and ')': split after the last


def _descends_from(pid: int, ancestor: int) -> bool:
    for _ in range(64):
        if pid == ancestor:
            return True
        if pid <= 1:
            return False
        parent = _parent(pid)
        if parent is None:
            return False
        pid = parent
    return False


def _command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "?"


class ShmWatch:
    """Start with :meth:`start`; :meth:`left_behind` removes and returns what dead owners of ours left."""

    def __init__(self) -> None:
        self.me = os.getpid()
        self.ours: dict[str, tuple[int, str]] = {}  # segment -> (owner pid, its command line)
        self._seen: set[str] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="shm-watch", daemon=True)

    def start(self) -> ShmWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.wait(_POLL_S):
            self.poll()

    def poll(self) -> None:
        for name, pid in lock_owners().items():
            with self._lock:
                if name in self._seen:
                    continue
                self._seen.add(name)
            if _descends_from(pid, self.me):
                with self._lock:
                    self.ours[name] = (pid, _command(pid))

    def left_behind(self) -> list[tuple[Orphan, str]]:
        """Segments of ours whose owner is gone: removed now, returned with the owner's command line."""
        self.poll()
        with self._lock:
            dead = {name: (pid, command) for name, (pid, command) in self.ours.items()
                    if not Path(f"/proc/{pid}").exists()}
            for name in dead:
                del self.ours[name]
        return [(orphan, dead[orphan.name][1]) for orphan in remove_orphans(only=dead, min_lock_age_s=0.0)]


def describe_left(left: list[tuple[Orphan, str]]) -> str:
    each = [f"{orphan.name} ({orphan.ram_bytes >> 20} MiB) of `{command[:160]}`" for orphan, command in left]
    return (f"{len(left)} Fast DDS shared-memory segment(s) left in /dev/shm by processes of this run that "
            f"died without closing them (removed now): " + "; ".join(each))

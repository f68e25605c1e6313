"""Fast DDS shared-memory segments of dead processes (ros/dds_shm.py): found by their free lock and removed;
the run's guard (conftest + _shm_watch) notices a segment a test leaves behind.

Checked on stand-in files (a segment-named file and its ``_el`` lock held by a child process), in a temporary
folder and in /dev/shm itself; test/ros/test_node_startup.py has the node removing what a killed node left.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from _shm_watch import ShmWatch

from dla_infer_node.ros.dds_shm import LOCK_SUFFIX, SHM_DIR, lock_owners, remove_orphans, segment_names

HOLD = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_CREAT, 0o644)
fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
print("locked", flush=True)
time.sleep(600)
"""


def _fake_segment(folder: Path, size: int = 8192) -> tuple[str, subprocess.Popen[str]]:
    """A segment-named file with its lock file, the lock held by a child process (the 'owner')."""
    name = "fastdds_" + secrets.token_hex(8)
    (folder / name).write_bytes(b"\1" * size)
    owner = subprocess.Popen([sys.executable, "-c", HOLD, str(folder / (name + LOCK_SUFFIX))],
                             stdout=subprocess.PIPE, text=True)
    assert owner.stdout is not None and owner.stdout.readline().strip() == "locked"
    return name, owner


def _kill(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)


def test_a_segment_is_removed_only_once_its_owner_is_gone(tmp_path: Path) -> None:
    name, owner = _fake_segment(tmp_path)
    try:
        (tmp_path / "fastdds_port7411").write_bytes(b"p")  # ports are never touched
        (tmp_path / ("fastdds_port7411" + LOCK_SUFFIX)).write_bytes(b"")
        assert segment_names(tmp_path) == [name]
        assert lock_owners(tmp_path) == {name: owner.pid}
        assert remove_orphans(tmp_path, min_lock_age_s=0.0) == []  # the owner lives: kept
        assert (tmp_path / name).exists()
    finally:
        _kill(owner)
    assert lock_owners(tmp_path) == {}
    assert remove_orphans(tmp_path, min_lock_age_s=3600.0) == []  # a lock file this young may be in creation
    removed = remove_orphans(tmp_path, min_lock_age_s=0.0)
    assert [o.name for o in removed] == [name] and removed[0].ram_bytes >= 8192
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fastdds_port7411", "fastdds_port7411_el"]


def test_only_the_segments_asked_for(tmp_path: Path) -> None:
    first, owner1 = _fake_segment(tmp_path)
    second, owner2 = _fake_segment(tmp_path)
    _kill(owner1)
    _kill(owner2)
    assert [o.name for o in remove_orphans(tmp_path, only={second}, min_lock_age_s=0.0)] == [second]
    assert segment_names(tmp_path) == [first]
    assert [o.name for o in remove_orphans(tmp_path, min_lock_age_s=0.0)] == [first]


def test_the_guard_notices_a_segment_a_dead_child_left() -> None:
    # what conftest's per-test check runs: a child of this run dies holding a segment in /dev/shm
    if not os.access(SHM_DIR, os.W_OK):
        pytest.skip(f"{SHM_DIR} is not writable here")
    watch = ShmWatch()
    name, owner = _fake_segment(SHM_DIR)
    try:
        watch.poll()
        assert watch.ours[name][0] == owner.pid and "flock" in watch.ours[name][1]
        assert watch.left_behind() == []  # alive
    finally:
        _kill(owner)
    left = watch.left_behind()
    assert [(o.name, "flock" in command) for o, command in left] == [(name, True)]
    assert not (SHM_DIR / name).exists() and not (SHM_DIR / (name + LOCK_SUFFIX)).exists()

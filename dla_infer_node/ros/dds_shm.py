"""Fast DDS shared-memory segments that a dead process left in /dev/shm, found and removed.

Fast DDS's SHM transport gives each participant a segment file ``/dev/shm/fastdds_<16 characters>``
(``fastrtps_`` with Fast DDS 2): 64 MiB with ``config/fastdds_large_images.xml``, 512 KiB by default. Next to
it is a lock file, the segment's name + ``_el``, on which the owner holds an exclusive ``flock`` for as long
as it lives. A clean exit removes both files. A process killed hard (SIGKILL, the OOM killer, a crash in a
native library) leaves both, and /dev/shm is RAM: nothing gives it back until the files are removed, and a
node restarted in a loop (``respawn:=true``) adds a segment each time.

The kernel drops a dead process's locks, so a lock file whose lock can be taken belongs to a segment without
an owner (what ``fastdds shm clean`` relies on too). :func:`remove_orphans` removes those segments while it
holds their lock, so no process can take them over in between. Port files (``fastdds_port<N>``) are left
alone: they are small and shared by every live participant of a domain.

ROS-free (plain files and ``/proc``): the node calls :func:`remove_orphans` at startup, the tests use
:func:`lock_owners` to see which process owns which segment.
"""

from __future__ import annotations

import fcntl
import os
import re
import time
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

SHM_DIR = Path("/dev/shm")
LOCK_SUFFIX = "_el"
# Fast DDS 3 (Kilted and later) and Fast DDS 2 (Humble, Jazzy) name segments by a 16-character id
_SEGMENT = re.compile(r"(?:fastdds|fastrtps)_[0-9a-z]{16}")
# Fast DDS creates a lock file and flocks it in two calls: a lock this young may be one being created
_MIN_LOCK_AGE_S = 2.0


@dataclass(frozen=True)
class Orphan:
    """A segment removed: its file name and the RAM it held (bytes of tmpfs pages in use)."""

    name: str
    ram_bytes: int


def segment_names(shm_dir: Path = SHM_DIR) -> list[str]:
    """The Fast DDS segments in ``shm_dir`` that have a lock file (those an owner can be checked for)."""
    try:
        names = set(os.listdir(shm_dir))
    except OSError:
        return []
    return sorted(n for n in names if _SEGMENT.fullmatch(n) and n + LOCK_SUFFIX in names)


def remove_orphans(shm_dir: Path = SHM_DIR, *, only: Collection[str] | None = None,
                   min_lock_age_s: float = _MIN_LOCK_AGE_S) -> list[Orphan]:
    """Remove every segment (of ``only``, when given) whose owner is gone; returns what was removed.

    Never raises for a file that vanished or cannot be removed (another user's, a read-only /dev/shm): the
    caller is starting up and this is housekeeping."""
    removed = []
    for name in segment_names(shm_dir):
        if only is not None and name not in only:
            continue
        orphan = _remove_if_orphan(shm_dir, name, min_lock_age_s)
        if orphan is not None:
            removed.append(orphan)
    return removed


def _remove_if_orphan(shm_dir: Path, name: str, min_lock_age_s: float) -> Orphan | None:
    lock = shm_dir / (name + LOCK_SUFFIX)
    try:
        fd = os.open(lock, os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return None  # held: the owner lives
        if time.time() - os.fstat(fd).st_ctime < min_lock_age_s:
            return None  # maybe a lock file its creator has not locked yet
        segment = shm_dir / name
        try:
            ram = segment.stat().st_blocks * 512
            segment.unlink()
            lock.unlink()
        except OSError:
            return None
        return Orphan(name, ram)
    finally:
        os.close(fd)  # releases the lock taken above


def lock_owners(shm_dir: Path = SHM_DIR) -> dict[str, int]:
    """{segment name: pid of the process holding its lock} for the segments in ``shm_dir`` (from
    /proc/locks; empty where it cannot be read)."""
    by_inode: dict[int, str] = {}
    try:
        device = os.stat(shm_dir).st_dev
        for name in segment_names(shm_dir):
            try:
                by_inode[os.stat(shm_dir / (name + LOCK_SUFFIX)).st_ino] = name
            except OSError:
                continue
        text = Path("/proc/locks").read_text()
    except OSError:
        return {}
    owners = {}
    for line in text.splitlines():
        # "1: FLOCK  ADVISORY  WRITE 23652 00:1b:2454 0 EOF" (device major:minor in hex, then the inode)
        fields = line.split()
        if len(fields) < 6 or fields[1] != "FLOCK" or fields[3] != "WRITE":
            continue
        major, minor, inode = fields[5].split(":")
        if os.makedev(int(major, 16), int(minor, 16)) == device and int(inode) in by_inode:
            owners[by_inode[int(inode)]] = int(fields[4])
    return owners

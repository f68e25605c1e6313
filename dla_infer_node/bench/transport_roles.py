"""Processes and host plumbing of the transport benchmark (``dla_infer_node.bench.transport``).

- :func:`role_publisher`: a camera stand-in, its own process: ``--frames`` rgb8 frames of ``--size`` at
  ``--rate`` Hz, best effort or reliable (``BENCH_RELIABILITY``), keep last 5 like a typical driver,
  each stamped with the wall clock at publish time so receivers can take latency from the header.
  The receivers are the bench roles of ``bench.node_roles``: the bare subscriber (``measure``) and the
  real node with a zero-cost backend (``node``), both on ``/bench/image``.
- :class:`ShmLedger`: the Fast DDS shared-memory files (``/dev/shm/fastdds_*``) our children map, noted
  while they run, and removed afterwards only if no process on the machine still maps them. A child that
  stops on SIGINT removes its own; one that had to be killed leaves them behind, and every run would
  otherwise add some (up to a 64 MiB segment each with the profile).
- :class:`LoopbackNetns`: a network namespace holding only loopback, where the stock configuration (no
  ROS_* discovery variables) can run without any packet reaching the machine's real interfaces.
- :class:`TwoHosts`: two such namespaces joined by a veth pair, each process on them with a /dev/shm of its
  own: two hosts on one machine, which only UDP joins (what a camera on another computer is).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time
from pathlib import Path

import numpy as np

from dla_infer_node.bench.node_roles import NS, _qos, _ros
from dla_infer_node.bench.paced import publish_paced

SIZES = {"VGA": (640, 480), "720p": (1280, 720), "1080p": (1920, 1080)}
PUBLISHER_DEPTH = 5


def role_publisher(args: argparse.Namespace) -> int:
    from rclpy.qos import QoSProfile
    from sensor_msgs.msg import Image

    rclpy, node, stop = _ros("bench_camera")
    qos: QoSProfile = _qos()
    qos.depth = PUBLISHER_DEPTH
    pub = node.create_publisher(Image, f"{NS}/image", qos)
    width, height = SIZES[args.size]
    msg = Image()
    msg.height, msg.width, msg.encoding, msg.step = height, width, "rgb8", width * 3
    msg.header.frame_id = "cam"
    # random pixels: nothing on the way can shrink them, and every frame has the full size
    msg.data = np.random.default_rng(0).integers(0, 256, height * width * 3, dtype=np.uint8).tobytes()
    deadline = time.monotonic() + 60
    while pub.get_subscription_count() < 1 and time.monotonic() < deadline and not stop.is_set():
        time.sleep(0.05)
    matched = pub.get_subscription_count() >= 1
    stop.wait(args.warmup)  # the reader's side of the match completes a little after the writer's
    sent, late, seconds = publish_paced(pub, msg, args.rate, stop, lambda n, _t: matched and n < args.frames)
    stop.wait(args.tail)  # the writer stays for in-flight fragments and reliable repairs
    Path(args.result).write_text(json.dumps({"published": sent, "seconds": seconds, "late": late,
                                             "matched": matched}))
    node.destroy_node()
    rclpy.shutdown()
    return 0


SHM_PREFIXES = ("/dev/shm/fastdds_", "/dev/shm/fastrtps_")  # Fast DDS 3 (Kilted), Fast DDS 2 (Jazzy)


def mapped_shm(pid: int) -> set[str]:
    """The Fast DDS shared-memory files process ``pid`` maps now (empty when it is gone or unreadable)."""
    folder = Path(f"/proc/{pid}/map_files")
    found: set[str] = set()
    try:
        for entry in folder.iterdir():
            try:
                target = os.readlink(entry)
            except OSError:
                continue
            if target.startswith(SHM_PREFIXES):
                found.add(target.removesuffix(" (deleted)"))
    except OSError:
        pass
    return found


class ShmLedger:
    """Fast DDS shared-memory files our own children mapped; see the module docstring."""

    def __init__(self) -> None:
        self.noted: set[str] = set()

    def note(self, pids: list[int]) -> None:
        for pid in pids:
            self.noted |= mapped_shm(pid)

    def clean(self) -> list[str]:
        """Remove noted files still there that no process maps any more; returns what was removed."""
        left = {path for path in self.noted if os.path.exists(path)}
        if left:
            for entry in Path("/proc").iterdir():
                if entry.name.isdigit():
                    left -= mapped_shm(int(entry.name))
        removed = []
        for path in sorted(left):
            try:
                os.unlink(path)
                removed.append(path)
            except OSError:
                pass
        self.noted.clear()
        return removed


class LoopbackNetns:
    """``ip netns add`` + ``lo up`` on enter, ``ip netns del`` on exit; ``prefix`` runs a command inside."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.prefix = ["ip", "netns", "exec", name]

    @staticmethod
    def unavailable() -> str:
        """'' when this process can create a network namespace, else why not (one line)."""
        probe = f"dla_probe_{os.getpid()}"
        try:
            made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"ip netns: {exc}"
        if made.returncode != 0:
            return f"ip netns add: {made.stderr.strip() or made.returncode}"
        subprocess.run(["ip", "netns", "del", probe], capture_output=True, timeout=20)
        return ""

    def __enter__(self) -> LoopbackNetns:
        subprocess.run(["ip", "netns", "add", self.name], check=True, capture_output=True, timeout=20)
        subprocess.run([*self.prefix, "ip", "link", "set", "lo", "up"], check=True, capture_output=True,
                       timeout=20)
        return self

    def __exit__(self, *exc: object) -> None:
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True, timeout=20)

    def links(self) -> list[str]:
        """The namespace's interfaces (only 'lo' expected): recorded with the result as evidence."""
        out = subprocess.run([*self.prefix, "ip", "-o", "link"], capture_output=True, text=True, timeout=20)
        return [line.split(":")[1].strip() for line in out.stdout.splitlines() if ":" in line]


class TwoHosts:
    """Two network namespaces joined by a veth pair, as two hosts on one link (10.231.0.1 and .2/24).

    Each host also has a mount namespace of its own (``unshare --mount``) with a private tmpfs on /dev/shm,
    which every process on that host shares, as on a real machine: Fast DDS's shared memory works within a
    host, and between the two only UDP over the veth link remains. :meth:`prefix` runs a command on host 0
    or 1 (``nsenter`` into both namespaces of a process that holds them). The addresses exist only inside
    the namespaces; leaving the context ends the holders and deletes both namespaces, the veth pair and the
    private /dev/shm (with any segment a killed process left there) with them.
    """

    SUBNET = "10.231.0"
    _SHM_SOURCE = "dla_two_hosts_shm"
    # the holder: mounts the host's /dev/shm, then waits (same pid) until it is ended
    _HOLD = f'mount -t tmpfs -o size=1g,mode=1777 {_SHM_SOURCE} /dev/shm && exec sleep 86400'

    def __init__(self, name: str) -> None:
        self.hosts = (LoopbackNetns(f"{name}_a"), LoopbackNetns(f"{name}_b"))
        self._holders: list[subprocess.Popen[bytes]] = []

    def address(self, index: int) -> str:
        return f"{self.SUBNET}.{index + 1}"

    def prefix(self, index: int) -> list[str]:
        # --wd=.: the working directory the command is started in (entering a mount namespace would reset it)
        return ["nsenter", "--target", str(self._holders[index].pid), "--mount", "--net", "--wd=.", "--"]

    def __enter__(self) -> TwoHosts:
        try:
            for host in self.hosts:
                host.__enter__()
            a, b = self.hosts
            self._ip(a, "link", "add", "veth0", "type", "veth", "peer", "name", "veth0", "netns", b.name)
            for index, host in enumerate(self.hosts):
                self._ip(host, "addr", "add", f"{self.address(index)}/24", "dev", "veth0")
                self._ip(host, "link", "set", "veth0", "up")
                # SPDP discovery is multicast (239.255.0.1): route it over the link
                self._ip(host, "route", "add", "224.0.0.0/4", "dev", "veth0")
                self._holders.append(subprocess.Popen(
                    [*host.prefix, "unshare", "--mount", "--propagation", "private", "sh", "-c", self._HOLD]))
            for holder in self._holders:
                self._wait_mounted(holder)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        for holder in self._holders:
            holder.terminate()
            holder.wait(10)
        self._holders.clear()
        for host in self.hosts:
            host.__exit__()

    @classmethod
    def _wait_mounted(cls, holder: subprocess.Popen[bytes]) -> None:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and holder.poll() is None:
            try:
                if cls._SHM_SOURCE in Path(f"/proc/{holder.pid}/mountinfo").read_text():
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"the private /dev/shm of a host was not mounted (holder exit {holder.poll()})")

    @staticmethod
    def _ip(host: LoopbackNetns, *args: str) -> None:
        subprocess.run(["ip", "-n", host.name, *args], check=True, capture_output=True, timeout=20)

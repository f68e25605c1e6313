"""CPU time a process spends on a stream of frames, from its own accounting (Linux ``/proc``), per thread.

Used by the node benchmark in every role that receives frames (the node and the bare subscriber), so both
are measured the same way. A sampler thread reads, every ``period_s``: the wall clock, how many frames the
role has taken so far, the process's user and system time (``os.times``: every thread, ended ones too) and
each live thread's user+system time (``/proc/self/task/<tid>/stat``), grouped by thread name.

CPU per frame is taken over a window, not from process start: from the first sample that saw a frame to
the first sample at which the frame count reached its final value. Start-up (imports, model load,
discovery) lies before the window and the idle tail after it; what lies inside is everything the process
does while frames arrive, idle spinning between frames included, divided by the frames taken in it.
The sampler's own reads (a few tens of microseconds every ``period_s``) are inside the window for both roles.

Work that is not the process's own can be left out: ``excluded`` (CPU seconds so far, e.g. what the DLA
EMULATOR's task programs took on the caller's threads) and ``excluded_threads`` (thread group names whose
whole CPU is left out, e.g. the emulator's host-function thread); both are reported beside the figures.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_TRAILING_ID = re.compile(r"[\d.:#_-]+$")  # "dds.udp.7412" and "dds.udp.7413" are one group
_EMPTY: dict[str, Any] = {"frames": 0, "seconds": 0.0, "user": 0.0, "system": 0.0, "excluded": 0.0,
                          "minflt": 0}
_GROUPS = ("threads", "excluded_threads", "thread_minflt")  # per-thread-group tables of a window


def thread_stats() -> dict[str, tuple[float, int]]:
    """(user+system seconds, minor page faults) of each live thread of this process, summed by thread
    group name: Python's thread name where Python started the thread, else the kernel's name without a
    trailing number (also for a thread Python only calls into, e.g. a C library's callback thread, which
    Python knows as "Dummy-N")."""
    python_names = {t.native_id: t.name for t in threading.enumerate()
                    if not isinstance(t, threading._DummyThread)}
    out: dict[str, tuple[float, int]] = {}
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:  # not Linux: no per-thread figures
        return out
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/stat") as fh:
                text = fh.read()
        except OSError:  # the thread ended between the listing and the read
            continue
        comm = text[text.index("(") + 1: text.rindex(")")]
        fields = text[text.rindex(")") + 2:].split()
        seconds = (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime (fields 14 and 15 of stat)
        faults = int(fields[7])  # minflt (field 10 of stat)
        name = python_names.get(int(tid)) or _TRAILING_ID.sub("", comm) or comm
        cpu, flt = out.get(name, (0.0, 0))
        out[name] = (cpu + seconds, flt + faults)
    return out


def minor_faults() -> int:
    """Minor page faults of this process so far (a fresh 6 MB buffer per frame costs ~1500 of them)."""
    try:
        with open("/proc/self/stat") as fh:
            text = fh.read()
    except OSError:
        return 0
    return int(text[text.rindex(")") + 2:].split()[7])  # minflt, field 10 of stat


class CpuSampler:
    """Samples CPU time and a frame count every ``period_s`` on a daemon thread until :meth:`stop`."""

    def __init__(self, frames: Callable[[], int], period_s: float = 0.25,
                 excluded: Callable[[], float] | None = None, excluded_threads: tuple[str, ...] = ()) -> None:
        self._frames = frames
        self._excluded = excluded
        self._excluded_threads = excluded_threads
        self._period = period_s
        self._stop = threading.Event()
        self.samples: list[dict[str, Any]] = []
        self._thread = threading.Thread(target=self._run, name="bench-cpu-sampler", daemon=True)

    def start(self) -> CpuSampler:
        self._thread.start()
        return self

    def sample(self) -> dict[str, Any]:
        t = os.times()
        stats = thread_stats()
        cpu = {name: s for name, (s, _) in stats.items()}
        return {"t": time.monotonic(), "frames": int(self._frames()), "user": t.user, "system": t.system,
                "excluded": self._excluded() if self._excluded is not None else 0.0, "minflt": minor_faults(),
                "threads": {k: v for k, v in cpu.items() if k not in self._excluded_threads},
                "excluded_threads": {k: v for k, v in cpu.items() if k in self._excluded_threads},
                "thread_minflt": {name: f for name, (_, f) in stats.items()}}

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append(self.sample())
            self._stop.wait(self._period)

    def stop(self) -> list[dict[str, Any]]:
        self._stop.set()
        self._thread.join(5.0)
        self.samples.append(self.sample())
        return self.samples


def stream_window(samples: Sequence[Mapping[str, Any]]) -> tuple[Mapping[str, Any], Mapping[str, Any]] | None:
    """(first, last) sample of the stream: the first that saw a frame, the first with the final count;
    None when fewer than two frames fell between samples."""
    seen = [s for s in samples if s["frames"] > 0]
    if not seen:
        return None
    final = max(s["frames"] for s in seen)
    first = seen[0]
    last = next(s for s in seen if s["frames"] == final)
    if last["frames"] - first["frames"] < 2:
        return None
    return first, last


def _empty_window() -> dict[str, Any]:
    return dict(_EMPTY, **{group: {} for group in _GROUPS})


def window_totals(samples: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Frames, seconds and CPU seconds (user, system, excluded, per thread group, per excluded thread
    group) and minor faults (the process's, per thread group) inside the stream window."""
    window = stream_window(samples)
    if window is None:
        return _empty_window()
    a, b = window
    out: dict[str, Any] = {
        "frames": b["frames"] - a["frames"], "seconds": b["t"] - a["t"], "user": b["user"] - a["user"],
        "system": b["system"] - a["system"], "excluded": b["excluded"] - a["excluded"],
        "minflt": b["minflt"] - a["minflt"]}
    for group in _GROUPS:
        now, then = b.get(group, {}), a.get(group, {})
        delta = {name: now[name] - then.get(name, 0) for name in now}
        out[group] = {k: v for k, v in delta.items() if v > 0}
    return out


def pool(totals: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Window totals of several rounds added up."""
    out = _empty_window()
    for t in totals:
        for key in _EMPTY:
            out[key] += t[key]
        for group in _GROUPS:
            for name, value in t.get(group, {}).items():
                out[group][name] = out[group].get(name, 0) + value
    return out


def per_frame(total: Mapping[str, Any]) -> dict[str, Any]:
    """Milliseconds of CPU per frame (user, system, both, by thread group) and the share of one core.
    ``excluded`` and the excluded thread groups are CPU inside the window that is not the process's own
    work (the emulated DLA's): reported (``excluded_ms``, ``excluded_threads_ms_per_frame``) and left out
    of ``ms_per_frame``."""
    frames, seconds = max(int(total["frames"]), 1), max(float(total["seconds"]), 1e-9)
    left_out = total["excluded"] + sum(total.get("excluded_threads", {}).values())
    cpu = total["user"] + total["system"] - left_out

    def by_thread(table: Mapping[str, float], scale: float, digits: int) -> dict[str, float]:
        return {k: round(scale * v / frames, digits) for k, v in sorted(table.items(), key=lambda kv: -kv[1])}

    return {"frames": int(total["frames"]), "seconds": round(float(total["seconds"]), 3),
            "user_ms": 1e3 * total["user"] / frames, "system_ms": 1e3 * total["system"] / frames,
            "excluded_ms": 1e3 * left_out / frames, "ms_per_frame": 1e3 * cpu / frames,
            "minor_faults_per_frame": round(total["minflt"] / frames, 1),
            "core_percent": 100.0 * cpu / seconds,
            "threads_ms_per_frame": by_thread(total["threads"], 1e3, 4),
            "excluded_threads_ms_per_frame": by_thread(total.get("excluded_threads", {}), 1e3, 4),
            "minor_faults_per_frame_by_thread": by_thread(total.get("thread_minflt", {}), 1.0, 1)}


class StageClock:
    """Thread CPU time (``time.thread_time_ns``) spent inside wrapped functions, call by call, by stage.

    A wrapped call adds the CPU time of the thread that ran it (waiting, e.g. on a CUDA stream with
    blocking sync, costs nothing); a stage nested in another is counted in both (the reader subtracts)."""

    def __init__(self) -> None:
        self.ns: dict[str, list[int]] = {}
        self._lock = threading.Lock()

    def wrap(self, stage: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.thread_time_ns()
            try:
                return fn(*args, **kwargs)
            finally:
                dt = time.thread_time_ns() - t0
                with self._lock:
                    self.ns.setdefault(stage, []).append(dt)

        return timed

    def snapshot(self) -> dict[str, list[int]]:
        with self._lock:
            return {stage: list(values) for stage, values in self.ns.items()}


WARMUP_CALLS = 10  # a stage's first calls (imports, first allocations) are left out of its figures


def stage_us(calls: Mapping[str, Sequence[int]]) -> dict[str, dict[str, float]]:
    """Mean and median microseconds per call of each stage, after its first WARMUP_CALLS calls."""
    out = {}
    for stage, values in calls.items():
        steady = sorted(values[WARMUP_CALLS:] or values)
        out[stage] = {"calls": len(values), "mean": sum(steady) / len(steady) / 1e3,
                      "p50": steady[len(steady) // 2] / 1e3}
    return out

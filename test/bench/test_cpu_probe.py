"""The CPU probe of the node benchmark: per-thread CPU from /proc, the stream window, per-frame figures."""

from __future__ import annotations

import ctypes
import ctypes.util
import threading
import time

import pytest

from dla_infer_node.bench import cpu_probe


def _burn(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def _thread_cpu_s() -> dict[str, float]:
    """CPU seconds by thread group, from the probe's per-thread table."""
    return {name: cpu for name, (cpu, _) in cpu_probe.thread_stats().items()}


def test_threads_are_named_and_their_cpu_counted() -> None:
    worker = threading.Thread(target=_burn, args=(0.3,), name="probe_burner")
    worker.start()
    before = _thread_cpu_s()
    deadline = time.monotonic() + 10
    while not before.get("probe_burner") and worker.is_alive() and time.monotonic() < deadline:
        time.sleep(0.02)  # the kernel counts in clock ticks (10 ms): until the burner has had one
        before = _thread_cpu_s()
    worker.join()
    _burn(0.05)
    after = _thread_cpu_s()
    assert "MainThread" in after and after["MainThread"] >= before.get("MainThread", 0.0)
    assert "probe_burner" in before  # a live Python thread is reported under its Python name
    assert before["probe_burner"] > 0.0


def test_window_runs_from_the_first_frame_to_the_final_count() -> None:
    def sample(t: float, frames: int, cpu: float) -> dict[str, object]:
        return {"t": t, "frames": frames, "user": cpu, "system": cpu / 10, "excluded": 0.0, "minflt": 0,
                "threads": {"MainThread": cpu, "dds.shm": cpu / 10}}

    samples = [sample(0.0, 0, 5.0),  # start-up: before the window
               sample(1.0, 1, 5.1), sample(2.0, 31, 5.4), sample(3.0, 61, 5.7),
               sample(4.0, 61, 5.75), sample(5.0, 61, 9.0)]  # idle tail, then teardown: after it
    total = cpu_probe.window_totals(samples)
    assert total["frames"] == 60 and total["seconds"] == pytest.approx(2.0)
    assert total["user"] == pytest.approx(0.6) and total["threads"]["MainThread"] == pytest.approx(0.6)
    pf = cpu_probe.per_frame(cpu_probe.pool([total, total]))
    assert pf["frames"] == 120 and pf["ms_per_frame"] == pytest.approx(1e3 * 2 * (0.6 + 0.06) / 120)
    assert pf["core_percent"] == pytest.approx(100 * 2 * 0.66 / 4.0)
    assert cpu_probe.window_totals(samples[:2])["frames"] == 0  # fewer than two frames: no window


def test_stage_clock_times_calls_by_thread_cpu() -> None:
    clock = cpu_probe.StageClock()
    burn = clock.wrap("burn", _burn)
    sleep = clock.wrap("sleep", time.sleep)
    for _ in range(12):
        burn(0.002)
        sleep(0.002)  # waiting costs no CPU
    stats = cpu_probe.stage_us(clock.snapshot())
    assert stats["burn"]["calls"] == 12 and stats["burn"]["p50"] >= 1500
    assert stats["sleep"]["p50"] < stats["burn"]["p50"] / 4



def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(ctypes.util.find_library("c") or None)
    libc.pthread_self.restype = ctypes.c_ulong
    libc.pthread_setname_np.argtypes = [ctypes.c_ulong, ctypes.c_char_p]
    libc.pthread_create.argtypes = [ctypes.POINTER(ctypes.c_ulong), ctypes.c_void_p, ctypes.c_void_p,
                                    ctypes.c_void_p]
    libc.pthread_join.argtypes = [ctypes.c_ulong, ctypes.c_void_p]
    return libc


def test_an_excluded_thread_is_reported_apart_and_left_out_of_the_process_cpu() -> None:
    """A C library's thread with a kernel name of its own (as the DLA EMULATOR names the CUDA driver's
    host-function thread, which calls into Python for the network program): its CPU is reported apart and
    is not the process's CPU per frame."""
    libc = _libc()
    done = threading.Event()

    @ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)
    def emulator_like(_: int | None) -> None:
        libc.pthread_setname_np(libc.pthread_self(), b"dla-emu-host")
        _burn(0.3)
        done.wait(10)  # alive until the last sample
        return None

    frames = [1]
    sampler = cpu_probe.CpuSampler(lambda: frames[0], excluded_threads=("dla-emu-host",))
    first = sampler.sample()
    tid = ctypes.c_ulong()
    start = ctypes.cast(emulator_like, ctypes.c_void_p)
    assert libc.pthread_create(ctypes.byref(tid), None, start, None) == 0
    _burn(0.1)  # the process's own work, on this thread
    deadline = time.monotonic() + 10
    last = sampler.sample()
    while last["excluded_threads"].get("dla-emu-host", 0.0) < 0.2 and time.monotonic() < deadline:
        time.sleep(0.02)
        last = sampler.sample()
    frames[0] = 11
    last = sampler.sample()
    done.set()
    assert libc.pthread_join(tid.value, None) == 0
    total = cpu_probe.window_totals([first, last])
    pf = cpu_probe.per_frame(total)
    emu_s = total["excluded_threads"]["dla-emu-host"]
    assert emu_s >= 0.2 and "dla-emu-host" not in total["threads"]
    assert pf["excluded_threads_ms_per_frame"]["dla-emu-host"] == pytest.approx(1e3 * emu_s / 10, abs=1e-3)
    assert pf["excluded_ms"] == pytest.approx(1e3 * emu_s / 10)
    assert pf["ms_per_frame"] == pytest.approx(1e3 * (total["user"] + total["system"] - emu_s) / 10)
    assert pf["ms_per_frame"] < pf["user_ms"] + pf["system_ms"]


def test_a_thread_python_only_calls_into_is_grouped_by_its_kernel_name() -> None:
    """A C library's thread that calls into Python (Python knows it as "Dummy-N") keeps its kernel name."""
    libc = _libc()
    seen: list[str] = []

    @ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)
    def start(_: int | None) -> None:
        libc.pthread_setname_np(libc.pthread_self(), b"c-callbacks")
        assert isinstance(threading.current_thread(), threading._DummyThread)
        seen.extend(_thread_cpu_s())
        return None

    tid = ctypes.c_ulong()
    assert libc.pthread_create(ctypes.byref(tid), None, ctypes.cast(start, ctypes.c_void_p), None) == 0
    assert libc.pthread_join(tid.value, None) == 0
    assert "c-callbacks" in seen and not any(name.startswith("Dummy") for name in seen)

"""The latest-frame worker: newest item wins, drops are counted, the caller never blocks."""

from __future__ import annotations

import threading
import time

from dla_infer_node.ros.worker import LatestFrameWorker


def test_processes_newest_and_counts_dropped() -> None:
    gate = threading.Event()
    seen: list[int] = []

    def process(i: int) -> None:
        if i == 0:
            gate.wait(5)
        seen.append(i)

    w = LatestFrameWorker(process).start()
    w.submit(0)
    deadline = time.monotonic() + 5
    while not w.stats().busy and time.monotonic() < deadline:
        time.sleep(0.001)
    t0 = time.monotonic()
    replaced = [w.submit(i) for i in range(1, 6)]
    assert time.monotonic() - t0 < 0.5  # never blocked by the busy thread
    assert replaced == [False, True, True, True, True]
    gate.set()
    assert w.wait_idle(5)
    assert seen == [0, 5]
    s = w.stats()
    assert (s.submitted, s.processed, s.dropped, s.failed) == (6, 2, 4, 0)
    assert w.stop() and not w.running


def test_errors_keep_or_stop_the_worker() -> None:
    errors: list[BaseException] = []

    def process(i: int) -> None:
        if i % 2:
            raise ValueError(i)

    def on_error(exc: BaseException) -> bool:
        errors.append(exc)
        return not (isinstance(exc, ValueError) and exc.args[0] == 3)

    w = LatestFrameWorker(process, on_error=on_error).start()
    for i in (1, 2, 3):
        w.submit(i)
        w.wait_idle(5)
    deadline = time.monotonic() + 5
    while w.running and time.monotonic() < deadline:
        time.sleep(0.001)
    assert not w.running
    s = w.stats()
    assert s.failed == 2 and s.processed == 1
    assert [e.args[0] for e in errors] == [1, 3]
    w.submit(4)  # after a fatal stop: accepted without blocking, counted as dropped
    assert w.stats().dropped == 1
    assert w.stop()


def test_stop_is_idempotent_and_drops_pending() -> None:
    gate = threading.Event()
    w: LatestFrameWorker[int] = LatestFrameWorker(lambda _i: gate.wait(5)).start()
    w.submit(1)
    while not w.stats().busy:
        time.sleep(0.001)
    w.submit(2)
    assert not w.stop(0.01)  # still busy with item 1; item 2 is dropped at once
    assert w.stats().dropped == 1
    gate.set()
    assert w.stop(5)
    assert w.stop(5)
    assert w.stats().processed == 1
    unstarted: LatestFrameWorker[int] = LatestFrameWorker(lambda _i: None)
    assert unstarted.stop()


def test_fair_worker_serves_slots_in_turn_so_a_busy_camera_cannot_starve_another() -> None:
    """Three cameras on one worker: while it is busy, camera a sends five frames, b and c one each; then
    b and c are served before a's newest (round robin from the slot after the one served last)."""
    from dla_infer_node.ros.worker import FairFrameWorker

    seen: list[str] = []
    first = threading.Event()
    release = threading.Event()

    def process(item: str) -> None:
        if not seen:
            first.set()
            release.wait(5)
        seen.append(item)

    w = FairFrameWorker(name="fair-test")
    for key in ("a", "b", "c"):
        w.add_slot(key, process)
    w.start()
    w.submit("a", "a0")
    assert first.wait(5)
    for i in range(1, 6):
        w.submit("a", f"a{i}")
    w.submit("b", "b0")
    w.submit("c", "c0")
    release.set()
    assert w.wait_idle(5)
    assert seen == ["a0", "b0", "c0", "a5"]
    a, b = w.stats("a"), w.stats("b")
    assert (a.submitted, a.processed, a.dropped) == (6, 2, 4)
    assert (b.submitted, b.processed, b.dropped) == (1, 1, 0)
    assert w.stop()

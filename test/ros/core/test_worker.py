"""The latest-frame worker: newest item wins, drops are counted, the caller never blocks; several slots are
served in turn; staged items (start, then finish) with up to ``depth`` in flight."""

from __future__ import annotations

import threading
import time
from typing import Any

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


class Job:
    """A staged item: ``finish`` waits until the test lets its "accelerator" end (``done``)."""

    def __init__(self, item: str, log: list[str], done: bool = False) -> None:
        self.item, self.log, self.done = item, log, threading.Event()
        if done:
            self.done.set()

    def ready(self) -> bool:
        return self.done.is_set()

    def finish(self) -> None:
        assert self.done.wait(5)
        if self.item == "boom":
            raise RuntimeError("accelerator fault")
        self.log.append(f"finish {self.item}")


def staged_worker(depth: int, done_at_start: bool = False, on_error: Any = None,
                  ) -> tuple[Any, list[str], dict[str, Job]]:
    from dla_infer_node.ros.worker import FairFrameWorker

    log: list[str] = []
    jobs: dict[str, Job] = {}

    def start(item: str) -> Job:
        log.append(f"start {item}")
        jobs[item] = Job(item, log, done_at_start)
        return jobs[item]

    w = FairFrameWorker(name="staged-test", depth=depth, on_error=on_error)
    for key in ("a", "b"):
        w.add_staged_slot(key, start)
    return w, log, jobs


def wait_for(pred: Any) -> bool:
    deadline = time.monotonic() + 5
    while not pred() and time.monotonic() < deadline:
        time.sleep(0.001)
    return bool(pred())


def test_depth_two_starts_the_next_item_before_the_first_is_finished() -> None:
    """Two cameras' frames waiting: b0 is started (submitted) while a0 is still on the accelerator; they are
    finished in the order they were started, whichever the accelerator ends first."""
    w, log, jobs = staged_worker(depth=2)
    w.submit("a", "a0")
    w.submit("b", "b0")
    w.start()
    assert wait_for(lambda: log == ["start a0", "start b0"])
    time.sleep(0.05)
    assert log == ["start a0", "start b0"]  # at most two in flight: nothing more starts
    assert w.stats("a").busy and w.stats("b").busy
    jobs["b0"].done.set()
    time.sleep(0.05)
    assert log == ["start a0", "start b0"]  # b0 is not finished before a0
    jobs["a0"].done.set()
    assert w.wait_idle(5)
    assert log == ["start a0", "start b0", "finish a0", "finish b0"]
    assert (w.stats("a").processed, w.stats("b").processed) == (1, 1)
    assert w.stop()


def test_depth_one_and_a_finished_item_first() -> None:
    """Depth 1 never has two items in flight; with depth 2, an item the accelerator has finished already is
    answered before the next one is started (no latency added when the accelerator is not the limit)."""
    for depth, done in ((1, False), (2, True)):
        w, log, jobs = staged_worker(depth=depth, done_at_start=done)
        w.submit("a", "a0")
        w.submit("b", "b0")
        w.start()
        if not done:
            assert wait_for(lambda: log == ["start a0"])  # noqa: B023
            time.sleep(0.05)
            assert log == ["start a0"]
            jobs["a0"].done.set()
            assert wait_for(lambda: "b0" in jobs)  # noqa: B023
            jobs["b0"].done.set()
        assert w.wait_idle(5)
        assert log == ["start a0", "finish a0", "start b0", "finish b0"], depth
        assert w.stop()


def test_fatal_error_in_flight_stops_and_counts_the_rest_failed() -> None:
    errors: list[BaseException] = []

    def on_error(exc: BaseException) -> bool:
        errors.append(exc)
        return False

    w, log, jobs = staged_worker(depth=2, on_error=on_error)
    w.submit("a", "boom")
    w.submit("b", "b0")
    w.start()
    assert wait_for(lambda: len(jobs) == 2)
    jobs["boom"].done.set()
    assert wait_for(lambda: not w.running)
    assert [str(e) for e in errors] == ["accelerator fault"]
    assert "finish b0" not in log  # the process exits after a fault: the other frame is not answered
    assert (w.stats("a").failed, w.stats("b").failed, w.stats("b").busy) == (1, 1, False)
    assert w.stop()


def test_stop_finishes_the_items_in_flight() -> None:
    w, log, jobs = staged_worker(depth=2)
    w.submit("a", "a0")
    w.submit("b", "b0")
    w.start()
    assert wait_for(lambda: len(jobs) == 2)
    w.submit("a", "a1")
    assert not w.stop(0.01)  # a0 and b0 still on the accelerator; a1 is dropped at once
    for job in jobs.values():
        job.done.set()
    assert w.stop(5)
    assert log == ["start a0", "start b0", "finish a0", "finish b0"]
    assert w.stats("a").dropped == 1

"""Input liveness arithmetic (ros/input_liveness.py) fed message-info dicts and a clock, and how
diagnostics merge status sources (ros/diagnostics.py). No graph: the real-DDS side is test_input_loss.py."""

from __future__ import annotations

from typing import Any

import pytest

from dla_infer_node.ros.input_liveness import DDS_PROFILE, InputMonitor, publisher_key

GID_A = {"implementation_identifier": "rmw_fastrtps_cpp", "data": b"\x01" * 16}
GID_B = {"implementation_identifier": "rmw_fastrtps_cpp", "data": b"\x02" * 16}


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def info(seq: int | None, gid: dict[str, Any] | None = GID_A) -> dict[str, Any]:
    out: dict[str, Any] = {"source_timestamp": 1, "received_timestamp": 2, "publication_sequence_number": seq,
                           "reception_sequence_number": None}
    if gid is not None:  # Kilted and later; Iron/Jazzy have no publisher_gid key
        out["publisher_gid"] = gid
    return out


def feed(monitor: InputMonitor, clock: Clock, seqs: list[int], gid: dict[str, Any] | None = GID_A,
         period: float = 0.1) -> None:
    for seq in seqs:
        clock.now += period
        monitor.on_frame(info(seq, gid))


def make(ratio: float = 0.05, stall: float = 5.0) -> tuple[InputMonitor, Clock]:
    clock = Clock()
    return InputMonitor(ratio, stall, clock=clock), clock


def test_gaps_count_lost_frames_and_warn_with_the_remedy() -> None:
    monitor, clock = make()
    feed(monitor, clock, [1, 2, 5, 6])  # 3 and 4 never arrived
    level, message, values = monitor.status(matched_publishers=1)
    assert values["frames_lost"] == 2 and values["frames_lost_seq"] == 2
    assert values["loss_ratio"] == pytest.approx(2 / 6)
    assert level == "warn" and "input loss 33%" in message and "2 of 6 frames" in message
    assert DDS_PROFILE in message and "FASTDDS_DEFAULT_PROFILES_FILE" in message
    assert values["loss_counting"].startswith("sequence numbers")
    # the next window has no new loss: ok again, the total stays
    feed(monitor, clock, [7, 8])
    level, message, values = monitor.status(matched_publishers=1)
    assert (level, message) == ("ok", "ok") and values["frames_lost"] == 2 and values["loss_ratio"] == 0.0


def test_first_number_seen_is_the_baseline_not_a_loss() -> None:
    monitor, clock = make()
    feed(monitor, clock, [100, 101, 102])  # the publisher ran before the node joined
    level, _, values = monitor.status(1)
    assert level == "ok" and values["frames_lost"] == 0


def test_publishers_are_counted_apart_by_gid() -> None:
    monitor, clock = make(ratio=0.5)
    for a, b in [(1, 10), (2, 12), (3, 13)]:  # interleaved: A loses nothing, B loses 11
        feed(monitor, clock, [a], GID_A)
        feed(monitor, clock, [b], GID_B)
    level, _, values = monitor.status(2)
    assert values["frames_lost"] == 1 and values["publishers_delivering"] == 2
    assert level == "ok"  # 1 of 7 is under the 50 % threshold given


def test_without_gid_interleaved_numbers_stop_the_count() -> None:
    monitor, clock = make()
    feed(monitor, clock, [1, 2, 3], gid=None)
    feed(monitor, clock, [50, 4, 60], gid=None)  # a second publisher (Jazzy: no GID to tell them apart)
    _, _, values = monitor.status(2)
    assert values["frames_lost_seq"] == 46  # 4..49 counted before the numbers went backwards, then no more
    feed(monitor, clock, [100, 5], gid=None)
    assert monitor.status(2)[2]["frames_lost_seq"] == 46


def test_humble_has_only_the_rmw_event() -> None:
    monitor, _ = make()
    for _ in range(2):
        monitor.on_frame(None)  # Humble: no message info reaches the callback
    monitor.on_rmw_lost(18)  # what Fast DDS reported for a VGA stream that delivered 2 of 20
    level, message, values = monitor.status(1)
    assert level == "warn" and values["frames_lost"] == 18 and values["frames_lost_rmw"] == 18
    assert values["loss_ratio"] == pytest.approx(0.9) and "18 of 20" in message
    assert values["loss_counting"] == "rmw message-lost event"


def test_both_counts_of_the_same_gaps_are_not_added() -> None:
    monitor, clock = make()
    feed(monitor, clock, [1, 5])
    monitor.on_rmw_lost(3)
    assert monitor.status(1)[2]["frames_lost"] == 3


def test_one_loss_reported_by_both_counts_in_different_windows_counts_once() -> None:
    # the rmw notices the 30 missing samples first; the numbers see the same gap only when frame 32 comes
    monitor, clock = make()
    feed(monitor, clock, [1])
    assert monitor.status(1)[2]["frames_lost"] == 0
    monitor.on_rmw_lost(30)
    level, _, values = monitor.status(1)
    assert values["frames_lost"] == 30 and level == "warn"
    feed(monitor, clock, [32])
    level, message, values = monitor.status(1)
    assert values["frames_lost"] == 30, values  # not 60: frames 2..31 are the ones the rmw already counted
    assert values["frames_lost_seq"] == 30 and values["frames_lost_rmw"] == 30
    assert (level, message, values["loss_ratio"]) == ("ok", "ok", 0.0)


def test_the_numbers_catching_up_on_the_rmw_add_only_what_is_new() -> None:
    monitor, clock = make()
    feed(monitor, clock, [1, 2])
    monitor.on_rmw_lost(5)  # 3..7 missed
    assert monitor.status(1)[2]["frames_lost"] == 5
    feed(monitor, clock, [8, 12])  # the numbers: 3..7 (5, already counted) and 9..11 (3 new)
    monitor.on_rmw_lost(3)
    _, message, values = monitor.status(1)
    assert values["frames_lost"] == 8 and "3 of 5 frames" in message


def test_nothing_arrives_from_a_matched_publisher() -> None:
    monitor, clock = make(stall=5.0)
    monitor.on_rmw_lost(0)
    assert monitor.status(1)[0] == "ok"  # just matched: 5 x 1 s of grace
    clock.now += 4.0
    assert monitor.status(1)[0] == "ok"
    clock.now += 2.0
    level, message, values = monitor.status(1)
    assert level == "warn" and "1 of 1 matched publisher(s) sent no frame for 6.0 s" in message
    assert values["publishers_delivering"] == 0
    assert monitor.status(0)[0] == "ok"  # nobody publishing: nothing to wait for


def test_a_publisher_that_stops_is_stalled_after_n_of_its_periods() -> None:
    monitor, clock = make(stall=5.0)
    monitor.status(1)
    clock.now += 10.0  # past the grace period
    feed(monitor, clock, list(range(1, 11)), period=0.1)  # 10 Hz
    clock.now += 0.4
    assert monitor.status(1)[0] == "ok"  # 0.4 s < 5 x 0.1 s
    clock.now += 0.2
    level, message, _ = monitor.status(1)
    assert level == "warn" and "sent no frame for 0.6 s" in message
    monitor.stall_periods = 10.0  # live parameter
    assert monitor.status(1)[0] == "ok"


def test_silence_stays_true_after_many_of_its_periods() -> None:
    # a 100 Hz publisher stops and stays matched: 4 s are 400 of its periods, far past the point where the
    # monitor may forget a stream, and the message must still say 4 s, not the time since it matched
    monitor, clock = make(stall=5.0)
    monitor.status(1)
    clock.now += 10.0
    feed(monitor, clock, list(range(1, 101)), period=0.01)
    assert monitor.status(1)[0] == "ok"
    for _ in range(4):  # one status a second, as /diagnostics asks
        clock.now += 1.0
        level, message, values = monitor.status(1)
        assert level == "warn" and values["publishers_delivering"] == 0
    assert "sent no frame for 4.0 s" in message, message
    feed(monitor, clock, [101])
    assert monitor.status(1)[0] == "ok"  # the same stream: no loss, no new baseline needed
    assert monitor.status(1)[2]["frames_lost"] == 0


def two_publishers(period: float) -> tuple[InputMonitor, Clock]:
    """A and B matched, past the grace period, each having sent frames 1..10 every ``period`` s."""
    monitor, clock = make(stall=5.0)
    monitor.status(2)
    clock.now += 10.0
    for seq in range(1, 11):
        feed(monitor, clock, [seq], GID_A, period=period)
        feed(monitor, clock, [seq], GID_B, period=period)
    return monitor, clock


def test_a_stream_whose_publisher_left_is_forgotten() -> None:
    monitor, clock = two_publishers(period=0.01)
    clock.now += 60.0  # both silent, long past forgetting; B has left, A is still matched
    feed(monitor, clock, [11], GID_A)
    clock.now += 60.0
    level, message, _ = monitor.status(1)
    assert level == "warn" and "1 of 1 matched publisher(s) sent no frame for 60.0 s" in message, message
    # B's stream was dropped (A's kept): were B back with the same GID, its numbers would start afresh
    feed(monitor, clock, [50], GID_B)
    feed(monitor, clock, [12], GID_A)
    assert monitor.status(2)[2]["frames_lost"] == 0


def test_one_of_two_publishers_stops() -> None:
    monitor, clock = two_publishers(period=0.1)
    feed(monitor, clock, list(range(11, 26)), GID_A)  # B quiet for 1.5 s, 5 of its periods are 1 s
    level, message, values = monitor.status(2)
    assert level == "warn" and "1 of 2 matched publisher(s)" in message
    assert values["publishers_delivering"] == 1
    assert monitor.status(1)[0] == "ok"  # B unmatched (gone): A alone delivers


def test_publisher_key() -> None:
    assert publisher_key(info(1)) == b"\x01" * 16
    assert publisher_key(info(1, gid=None)) is None and publisher_key(None) is None


def test_merge_statuses_worst_level_messages_and_values() -> None:
    pytest.importorskip("diagnostic_msgs.msg", reason="diagnostic_msgs not importable: run in the .venv")
    from dla_infer_node.ros.diagnostics import merge_statuses

    level, message, values = merge_statuses(
        [("ok", "ok", {"a": 1}), ("warn", "w1", {"b": 2}), ("error", "e", {"a": 3}), ("warn", "w2", {})],
        {"frames_in": 5})
    assert level == "error" and message == "e; w1; w2"
    assert values == {"frames_in": 5, "a": 1, "b": 2, "a #2": 3}
    assert merge_statuses([("ok", "ok", {})]) == ("ok", "ok", {})

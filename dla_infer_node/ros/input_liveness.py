"""Input liveness: frames lost between the publishers and the node, and publishers that stopped sending.

ROS-free (fed plain values), so the arithmetic is tested without a graph; ``ros/node.py`` feeds it.

Two loss counts, because neither works everywhere alone:

- **Sequence numbers.** Each frame's message info carries the publisher's ``publication_sequence_number``
  (rclpy on Iron and later, with an rmw that fills it: Fast DDS and Cyclone DDS do) and, from Kilted
  (rclpy 9), the ``publisher_gid``. A jump from n to n + k means k - 1 frames of that publisher never
  reached the node (the transport dropped them, or they were overwritten in the subscription's keep-last
  history before the executor took them). The first frame seen of a publisher is the baseline: what it
  sent before the node joined is not a loss. Without a GID (Iron, Jazzy) all frames count as one stream;
  a number going backwards then means several publishers (or a restarted one) and the stream is no longer
  counted. Frames that never arrive give no numbers at all: a VGA camera over default Fast DDS settings
  delivers nothing, so this count alone would read 0 lost.
- **The rmw's message-lost event** (``SubscriptionEventCallbacks.message_lost``; Galactic and later, so
  Humble too): the DDS reader's own count of samples it knows it missed, frames that never arrived
  included, but not per publisher.

Both see the same transport losses, but at different times: the rmw reports a missing sample when the reader
notices it, the sequence numbers only when the next frame is taken (which may be several diagnostics periods
later). So the totals are compared, never the windows: ``frames_lost`` is the larger of the two running
totals, and a window's loss is how much that grew. Summing them, or taking the larger of each window's two
increments, would count one lost frame twice. The larger total is what is certain: frames overwritten in the
subscription's history are seen only by the numbers, frames before the first one taken only by the rmw. On
Humble the message info has only timestamps: the rmw event and the stall check are what remain.

Stall: a matched publisher that has sent no frame for ``stall_periods`` times its period (the median of
its recent arrival intervals; ``default_period`` until two frames came) is silent. Publishers are told apart
by GID where there is one; without GIDs, all matched publishers count as delivering while any frame is
recent. A newly matched publisher gets ``stall_periods x default_period`` before it counts as silent.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

# (level, message, values): what a diagnostics status source returns (see ros/diagnostics.py)
Status = tuple[str, str, dict[str, Any]]

DDS_PROFILE = "config/fastdds_large_images.xml"
REMEDY = (f"large frames over default DDS settings: start the camera driver with "
          f"FASTDDS_DEFAULT_PROFILES_FILE=<share>/dla_infer_node/{DDS_PROFILE} (Humble/Jazzy: "
          f"FASTRTPS_DEFAULT_PROFILES_FILE; the publisher's transport decides), or publish and subscribe "
          f"reliable")
_INTERVALS_KEPT = 16
_FORGET_AFTER_TIMEOUTS = 20  # a silent publisher's stream is forgotten after this many stall timeouts


@dataclass
class _Stream:
    """What one publisher (or, without GIDs, all of them together) has delivered."""

    last_arrival: float
    last_seq: int | None = None
    received: int = 0
    lost: int = 0
    ambiguous: bool = False  # numbers went backwards without a GID: several publishers, stop counting
    intervals: deque[float] = field(default_factory=lambda: deque(maxlen=_INTERVALS_KEPT))


def publisher_key(info: Mapping[str, Any] | None) -> bytes | None:
    """The publisher's GID bytes from a message info dict, None where the rmw/rclpy does not give it."""
    gid = (info or {}).get("publisher_gid")
    if isinstance(gid, Mapping):
        data = gid.get("data")
        return bytes(data) if data is not None else None
    return None


class InputMonitor:
    """Counts arrivals and losses per publisher; :meth:`status` reports one diagnostics window."""

    def __init__(self, loss_warn_ratio: float, stall_periods: float, *, default_period: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.loss_warn_ratio = loss_warn_ratio
        self.stall_periods = stall_periods
        self.default_period = default_period
        self._clock = clock
        self._lock = threading.Lock()  # frames arrive on the executor thread, status runs on a timer
        self._streams: dict[bytes | None, _Stream] = {}
        self._received = 0
        self._seq_lost = 0
        self._seq_seen = False
        self._rmw_lost = 0
        self._lost_total = 0  # frames_lost at the last status
        self._received_before = 0  # frames received at the last status
        self._matched = 0
        self._matched_since = clock()

    def on_frame(self, info: Mapping[str, Any] | None) -> None:
        """One frame taken by the subscription, with its message info (None where rclpy gives none)."""
        now = self._clock()
        key = publisher_key(info)
        seq = (info or {}).get("publication_sequence_number")
        with self._lock:
            self._received += 1
            stream = self._streams.get(key)
            if stream is None:
                stream = self._streams[key] = _Stream(last_arrival=now)
            else:
                stream.intervals.append(now - stream.last_arrival)
                stream.last_arrival = now
            stream.received += 1
            if isinstance(seq, int) and not stream.ambiguous:
                self._seq_seen = True
                self._count_gap(stream, key, seq)

    def _count_gap(self, stream: _Stream, key: bytes | None, seq: int) -> None:
        if stream.last_seq is not None:
            if seq > stream.last_seq + 1:
                gap = seq - stream.last_seq - 1
                stream.lost += gap
                self._seq_lost += gap
            elif seq <= stream.last_seq and key is None:
                stream.ambiguous = True  # two publishers interleaved (or one restarted): numbers mean nothing
                return
        stream.last_seq = seq

    def on_rmw_lost(self, count_change: int) -> None:
        """The rmw's message-lost event: ``count_change`` samples missed since its last report."""
        with self._lock:
            self._rmw_lost += max(0, int(count_change))

    def status(self, matched_publishers: int) -> Status:
        """Level, message and values for the window since the previous call."""
        now = self._clock()
        with self._lock:
            received = self._received - self._received_before
            self._received_before = self._received
            lost_total = max(self._seq_lost, self._rmw_lost)  # each lost frame once; see the module docstring
            lost = lost_total - self._lost_total
            self._lost_total = lost_total
            if matched_publishers > self._matched:  # a new publisher: its grace starts now
                self._matched_since = now
            self._matched = matched_publishers
            delivering, silent_for = self._delivering(now, matched_publishers)
            values: dict[str, Any] = {
                "publishers": matched_publishers, "publishers_delivering": delivering,
                "frames_lost": self._lost_total, "frames_lost_seq": self._seq_lost,
                "frames_lost_rmw": self._rmw_lost,
                "loss_ratio": lost / (lost + received) if lost + received else 0.0,
                "loss_counting": ("sequence numbers per publisher + rmw event" if self._seq_seen
                                  else "rmw message-lost event"),
            }
        problems = []
        if lost and values["loss_ratio"] > self.loss_warn_ratio:
            problems.append(f"input loss {values['loss_ratio']:.0%}: {lost} of {lost + received} frames lost "
                            f"between publisher and node in the last window; {REMEDY}")
        if matched_publishers > delivering:
            problems.append(f"{matched_publishers - delivering} of {matched_publishers} matched publisher(s) "
                            f"sent no frame for {silent_for:.1f} s (limit: {self.stall_periods:g} periods)")
        return ("warn", "; ".join(problems), values) if problems else ("ok", "ok", values)

    def period(self, stream: _Stream) -> float:
        """A publisher's period: the median of its recent arrival intervals."""
        return statistics.median(stream.intervals) if len(stream.intervals) >= 2 else self.default_period

    def _delivering(self, now: float, matched: int) -> tuple[int, float]:
        """(publishers delivering, longest silence of one that is not); caller holds the lock."""
        live = 0
        quiet_streams = []
        forgettable = []
        for key, stream in self._streams.items():
            timeout = self.stall_periods * self.period(stream)
            quiet = now - stream.last_arrival
            if quiet <= timeout:
                live += 1
                continue
            quiet_streams.append(quiet)
            if quiet > _FORGET_AFTER_TIMEOUTS * timeout:
                forgettable.append((quiet, key))
        # Keep the table bounded: a stream long silent is forgotten, but only while there are more streams
        # than matched publishers (its publisher is gone). A publisher still matched keeps its stream, so
        # its silence stays measured from its own last frame, however long it lasts.
        surplus = max(0, len(self._streams) - matched)
        for quiet, key in sorted(forgettable, key=lambda item: -item[0])[:surplus]:
            del self._streams[key]
            quiet_streams.remove(quiet)
        if None in self._streams and live:  # no GIDs: one live stream stands for every publisher
            live = matched
        if live < matched and now - self._matched_since <= self.stall_periods * self.default_period:
            live = matched  # a publisher matched only lately: it has not had its periods yet
        # the silence shown: of the quiet streams, or (none) since the last publisher matched
        silent_for = max(quiet_streams) if quiet_streams else now - self._matched_since
        return min(live, matched), silent_for

"""``vision_msgs/Detection2DArray`` written straight to plain CDR (XCDR1 little-endian), without rclpy.

Why: building the array as rclpy message objects (a ``Detection2D``, its ``ObjectHypothesisWithPose`` and
their nested messages per box) and having rclpy convert them to C and serialize them took most of the
publishing step's CPU (about 80 of 85 us for three boxes on a small x86 CPU); these bytes take a few
microseconds and rclpy publishes them as they are. The node checks at start that this writer gives
exactly the bytes rclpy's own serializer gives for the message :func:`ros_convert.detection_array`
builds (``ros.outputs``); where they differ (another message definition or encapsulation), it builds the
messages instead. Nothing here imports rclpy or message packages.

Layout (vision_msgs 4.x; the rules are ``core.cdr_image``'s): header (int32 sec, uint32 nanosec, string
frame_id), then a uint32 count of ``Detection2D``, each: its header, a uint32 count of results (one: the
class id string, float64 score, a ``PoseWithCovariance`` left at its defaults: position 0, orientation
(0, 0, 0, 1), covariance 36 zeros), the bbox (float64 centre x, y, theta 0, size_x, size_y) and an empty
id string.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

import numpy as np

from dla_infer_node.core.detections import Detections

ENCAPSULATION = b"\x00\x01\x00\x00"  # CDR little-endian, no options
_POSE = struct.pack("<7d", 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0) + bytes(36 * 8)  # default pose + covariance
_ONE = struct.pack("<I", 1)


def cdr_string(text: str) -> bytes:
    """A CDR string: uint32 length including the terminating NUL, the UTF-8 bytes, the NUL."""
    raw = text.encode("utf-8")
    return struct.pack("<I", len(raw) + 1) + raw + b"\x00"


_EMPTY_STRING = cdr_string("")


def _pad(buf: bytearray, align: int) -> None:
    """Zero bytes up to the next multiple of ``align``, counted from the end of the encapsulation."""
    buf += bytes(-(len(buf) - len(ENCAPSULATION)) % align)


class DetectionArrayWriter:
    """Serializes one frame's :class:`Detections` as a ``Detection2DArray``; ``label(class_id)`` gives
    each box's ``class_id`` string (cached per id)."""

    def __init__(self, label: Callable[[int], str]) -> None:
        self._label = label
        self._labels: dict[int, bytes] = {}

    def _label_bytes(self, class_id: int) -> bytes:
        raw = self._labels.get(class_id)
        if raw is None:
            if len(self._labels) > 4096:  # ids past any model's classes: forget them rather than grow
                self._labels.clear()
            raw = self._labels[class_id] = cdr_string(self._label(class_id))
        return raw

    def serialize(self, dets: Detections, sec: int, nanosec: int, frame_id: str) -> bytes:
        header = struct.pack("<iI", sec, nanosec) + cdr_string(frame_id)
        buf = bytearray(ENCAPSULATION)
        buf += header
        _pad(buf, 4)
        n = len(dets)
        buf += struct.pack("<I", n)
        if n == 0:
            return bytes(buf)
        boxes = dets.boxes.astype(np.float64)
        geometry = np.empty((n, 5), "<f8")  # bbox: centre x, y, theta, size x, y
        geometry[:, 0:2] = (boxes[:, :2] + boxes[:, 2:]) * 0.5
        geometry[:, 2] = 0.0
        geometry[:, 3:5] = boxes[:, 2:] - boxes[:, :2]
        scores = dets.scores.astype("<f8")
        for i, cid in enumerate(dets.class_ids.tolist()):
            _pad(buf, 4)
            buf += header
            _pad(buf, 4)
            buf += _ONE  # one result
            buf += self._label_bytes(cid)
            _pad(buf, 8)
            buf += scores[i].tobytes()
            buf += _POSE
            buf += geometry[i].tobytes()
            buf += _EMPTY_STRING  # id (4-aligned: it follows float64s)
        return bytes(buf)

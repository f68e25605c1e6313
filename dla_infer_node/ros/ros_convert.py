"""ROS messages <-> the package's types. Message packages only: no rclpy, no node state.

Kept apart from :mod:`dla_infer_node.ros.node` so the node stays a thin wiring layer and this mapping (the
public output contract) can be tested message by message.
Output contract (vision_msgs 4.x): one ``Detection2D`` per box, ``bbox.center.position.x/y`` = box centre
and ``bbox.size_x/size_y`` = width/height in SOURCE image pixels, ``results[0].hypothesis.class_id`` =
class name (``class_id_mode='name'``) or the class index as a decimal string (``'index'``), ``score`` in
[0, 1]; every Detection2D and the array carry the input image's header (stamp and frame_id).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from sensor_msgs.msg import CompressedImage, Image
from std_msgs.msg import Header
from vision_msgs.msg import (
    Detection2D,
    Detection2DArray,
    LabelInfo,
    ObjectHypothesisWithPose,
    VisionClass,
)

from dla_infer_node.core import cdr_image
from dla_infer_node.core.detections import Detections, class_name
from dla_infer_node.core.image_io import (
    DEFAULT_MAX_INPUT_PIXELS,
    decode_compressed,
    fields_from_bgr8,
    frame_from_cdr,
    frame_from_fields,
)

LEVELS = {"ok": DiagnosticStatus.OK, "warn": DiagnosticStatus.WARN, "error": DiagnosticStatus.ERROR}


def frame_from_image(msg: Image) -> tuple[np.ndarray, str]:
    """Zero-copy view of an Image (step padding honoured) and its encoding's table name; InputError for
    anything unusable."""
    return frame_from_fields(msg.encoding, msg.height, msg.width, msg.step, msg.data, msg.is_bigendian)


def frame_from_compressed(msg: CompressedImage, max_pixels: int = DEFAULT_MAX_INPUT_PIXELS
                          ) -> tuple[np.ndarray, str]:
    """Decoded bgr8 frame of a CompressedImage (JPEG/PNG); InputError for undecodable bytes."""
    return decode_compressed(msg.data, max_pixels=max_pixels)


def frame_from_msg(msg: Image | CompressedImage, max_pixels: int = DEFAULT_MAX_INPUT_PIXELS
                   ) -> tuple[np.ndarray, str]:
    if isinstance(msg, CompressedImage):
        return frame_from_compressed(msg, max_pixels)
    return frame_from_image(msg)


def frame_from_serialized(raw: bytes, compressed: bool, max_pixels: int = DEFAULT_MAX_INPUT_PIXELS
                          ) -> tuple[np.ndarray, str, Header]:
    """Frame, encoding and header of a serialized Image (or CompressedImage) without deserializing it.

    The raw frame is a zero-copy view into ``raw``. Raises :class:`cdr_image.UnsupportedEncoding` for a
    buffer that is not plain CDR (deserialize it instead) and InputError for anything unusable.
    """
    frame, encoding, header = frame_from_cdr(raw, compressed, max_pixels)
    return frame, encoding, header_from_fields(header)


def header_from_fields(fields: cdr_image.StampedHeader) -> Header:
    out = Header()
    out.stamp.sec = fields.sec
    out.stamp.nanosec = fields.nanosec
    out.frame_id = fields.frame_id
    return out


def copy_header(header: Header) -> Header:
    out = Header()
    out.stamp.sec = header.stamp.sec
    out.stamp.nanosec = header.stamp.nanosec
    out.frame_id = header.frame_id
    return out


def class_id_text(classes: Sequence[str], class_id_mode: str = "name") -> Callable[[int], str]:
    """What ``results[0].hypothesis.class_id`` carries for a class id, by ``class_id_mode``."""
    if class_id_mode == "name":
        return lambda cid: class_name(cid, classes)
    return str


def detection_array(dets: Detections, header: Header, classes: Sequence[str],
                    class_id_mode: str = "name") -> Detection2DArray:
    """A Detection2DArray for one processed frame (possibly empty), stamped with the input header."""
    text = class_id_text(classes, class_id_mode)
    out = Detection2DArray()
    out.header = copy_header(header)
    boxes = dets.boxes.astype(np.float64)
    # vectorised geometry first; the per-box loop then only fills message fields
    centres = (boxes[:, :2] + boxes[:, 2:]) * 0.5
    sizes = boxes[:, 2:] - boxes[:, :2]
    items = []
    for i in range(len(dets)):
        d = Detection2D()
        d.header = out.header
        d.bbox.center.position.x = float(centres[i, 0])
        d.bbox.center.position.y = float(centres[i, 1])
        d.bbox.size_x = float(sizes[i, 0])
        d.bbox.size_y = float(sizes[i, 1])
        hyp = ObjectHypothesisWithPose()
        hyp.hypothesis.class_id = text(int(dets.class_ids[i]))
        hyp.hypothesis.score = float(dets.scores[i])
        d.results = [hyp]
        items.append(d)
    out.detections = items
    return out


def from_detection_array(msg: Detection2DArray) -> tuple[np.ndarray, list[str], list[float]]:
    """The inverse of :func:`detection_array`: (xyxy boxes (N, 4) float64, class ids, scores)."""
    rows = [(d.bbox.center.position.x, d.bbox.center.position.y, d.bbox.size_x, d.bbox.size_y)
            for d in msg.detections]
    c = np.asarray(rows, np.float64).reshape(-1, 4)
    boxes = np.hstack([c[:, :2] - c[:, 2:] / 2, c[:, :2] + c[:, 2:] / 2])
    ids = [d.results[0].hypothesis.class_id if d.results else "" for d in msg.detections]
    scores = [float(d.results[0].hypothesis.score) if d.results else 0.0 for d in msg.detections]
    return boxes, ids, scores


def label_info(classes: Sequence[str], threshold: float, header: Header | None = None) -> LabelInfo:
    """LabelInfo: class index -> name map and the score threshold (latched: transient-local, published
    again when the threshold changes)."""
    msg = LabelInfo()
    if header is not None:
        msg.header = copy_header(header)
    entries = []
    for i, name in enumerate(classes):
        vc = VisionClass()
        vc.class_id = i
        vc.class_name = name
        entries.append(vc)
    msg.class_map = entries
    msg.threshold = float(threshold)
    return msg


def bgr8_image(image: np.ndarray, header: Header) -> Image:
    """An Image message (bgr8) of an overlay frame, with the input's header."""
    msg = Image()
    msg.header = copy_header(header)
    fields = fields_from_bgr8(image)
    msg.encoding = fields["encoding"]
    msg.height = fields["height"]
    msg.width = fields["width"]
    msg.step = fields["step"]
    msg.is_bigendian = fields["is_bigendian"]
    msg.data = fields["data"]
    return msg


def diagnostics(header: Header, name: str, hardware_id: str, level: str, message: str,
                values: Mapping[str, Any]) -> DiagnosticArray:
    """One DiagnosticStatus in a DiagnosticArray; values are rendered as strings (floats to 3 places)."""
    status = DiagnosticStatus()
    status.level = LEVELS[level]
    status.name = name
    status.hardware_id = hardware_id
    status.message = message
    kvs = []
    for key, value in values.items():
        kv = KeyValue()
        kv.key = key
        kv.value = f"{value:.3f}" if isinstance(value, float) else str(value)
        kvs.append(kv)
    status.values = kvs
    arr = DiagnosticArray()
    arr.header = header
    arr.status = [status]
    return arr

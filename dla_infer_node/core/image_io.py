"""Image message fields <-> ndarray, without ROS: zero-copy views, validation, compressed decode, overlays.

The node hands the fields of a ``sensor_msgs/Image`` (or the bytes of a ``CompressedImage``) to these
functions, so everything here is testable without rclpy. A raw image becomes a *view* of the message
buffer shaped by its encoding's layout (:mod:`dla_infer_node.core.encodings`; ``(H, W, C)`` for packed
ones): rows are addressed through ``step``, so row padding costs no copy.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import cv2
import numpy as np

from dla_infer_node.core import cdr_image, encodings
from dla_infer_node.core.codec_stderr import CODEC_STDERR
from dla_infer_node.core.color_convert import scale_to_8bit, to_bgr8
from dla_infer_node.core.errors import InputError
from dla_infer_node.core.image_header import check_compressed_size

if TYPE_CHECKING:
    from dla_infer_node.core.detections import Detections

# the max_input_pixels parameter's default: 8K x 8K / 4 (a 4096 x 4096 frame)
DEFAULT_MAX_INPUT_PIXELS = 8192 * 8192 // 4
# encoding -> values per element of its view (the full table with layouts: core.encodings)
ENCODINGS: dict[str, int] = {name: e.channels for name, e in encodings.TABLE.items()}
# image files the tools read from a folder (calibration, evaluation on your own data)
IMAGE_FILE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp")
# packed encoding -> source channel index of (R, G, B); mono repeats its one channel
RGB_INDEX: dict[str, tuple[int, int, int]] = {
    name: e.rgb_index for name, e in encodings.TABLE.items() if e.rgb_index is not None}


def channels_of(encoding: str, stage: str = "input") -> int:
    """Values per element of a supported encoding's view; anything else is an :class:`InputError`."""
    return encodings.lookup(encoding, stage).channels


def validate_image(image: Any, encoding: str, stage: str = "input") -> np.ndarray:
    """Check an in-memory frame against its encoding; returns it as a 3-D view (never a copy).

    Raises :class:`InputError` naming ``stage`` for a non-array, wrong dtype, zero size, a channel count
    or size that disagrees with the encoding (:func:`encodings.validate`). A 2-D array is accepted for
    one-channel layouts (mono, Bayer, NV12/NV21).
    """
    return encodings.validate(image, encoding, stage)[0]


def _as_bytes_array(data: Any, stage: str) -> np.ndarray:
    if isinstance(data, np.ndarray):
        if data.dtype != np.uint8:
            raise InputError(f"data must be uint8 bytes, got dtype {data.dtype}", call="image_from_fields",
                             params={"dtype": str(data.dtype)}, stage=stage)
        return data.reshape(-1)
    try:
        return np.frombuffer(data, dtype=np.uint8)  # zero-copy for bytes, memoryview, array('B')
    except (TypeError, ValueError, BufferError):
        try:  # e.g. a list of ints: this path copies, it is not the ROS hot path
            return np.asarray(data, dtype=np.uint8).reshape(-1)
        except (TypeError, ValueError, OverflowError) as exc:
            raise InputError(f"data is not a byte buffer ({type(data).__name__})",
                             call="image_from_fields", stage=stage) from exc


def image_from_fields(
    encoding: str,
    height: int,
    width: int,
    step: int,
    data: Any,
    is_bigendian: int | bool = 0,
    stage: str = "input",
) -> np.ndarray:
    """A ``sensor_msgs/Image``'s fields -> zero-copy view honouring ``step`` (shape per layout family,
    see :mod:`dla_infer_node.core.encodings`: ``(H, W, C)`` for packed ones, ``mono8`` gives ``(H, W, 1)``).

    ``is_bigendian`` sets the byte order of 16-bit views; it cannot matter for 8-bit encodings.
    """
    enc = encodings.lookup(encoding, stage)
    params = {"encoding": encoding, "height": height, "width": width, "step": step}
    try:
        h, w, s = int(height), int(width), int(step)
    except (TypeError, ValueError) as exc:
        raise InputError("height, width and step must be integers", call="image_from_fields",
                         params=params, stage=stage) from exc
    return encodings.view(enc, h, w, s, _as_bytes_array(data, stage), bool(is_bigendian), stage)


def frame_from_fields(encoding: str, height: int, width: int, step: int, data: Any,
                      is_bigendian: int | bool = 0, stage: str = "input") -> tuple[np.ndarray, str]:
    """:func:`image_from_fields` and the encoding's table name (``yuv422`` arrives as ``uyvy``)."""
    view = image_from_fields(encoding, height, width, step, data, is_bigendian, stage)
    return view, encodings.canonical(encoding, stage)


def decode_compressed(data: Any, stage: str = "input",
                      max_pixels: int = DEFAULT_MAX_INPUT_PIXELS) -> tuple[np.ndarray, str]:
    """JPEG/PNG bytes (a ``CompressedImage``'s data) -> ``(H, W, 3)`` bgr8 array and ``"bgr8"``.

    8-bit JPEG and 8- or 16-bit PNG (grey, colour, with or without alpha) are taken; a 16-bit PNG (a
    thermal camera's mono16) is scaled to 8 bits by 255/65535 as cv_bridge scales mono16, and grey is
    repeated into the three channels. The header is read first: other formats, and images above
    ``max_pixels``, are refused before any pixel is allocated. What libjpeg/libpng print meanwhile goes
    to :data:`codec_stderr.CODEC_STDERR`.
    """
    buf = _as_bytes_array(data, stage)
    if buf.size == 0:
        raise InputError("compressed image has no data", call="cv2.imdecode", params={"bytes": 0},
                         stage=stage)
    check_compressed_size(buf, max_pixels, stage)
    try:
        with CODEC_STDERR.capture():
            # ANYDEPTH keeps a 16-bit PNG's values (plain IMREAD_COLOR would drop the low byte)
            image = cv2.imdecode(buf, cv2.IMREAD_COLOR | cv2.IMREAD_ANYDEPTH)
    except cv2.error as exc:
        raise InputError(f"cannot decode compressed image: {exc}", call="cv2.imdecode",
                         params={"bytes": int(buf.size)}, stage=stage) from exc
    if image is None or image.size == 0:
        raise InputError("cannot decode compressed image (not JPEG/PNG or corrupt)", call="cv2.imdecode",
                         params={"bytes": int(buf.size), "head": bytes(buf[:8]).hex()}, stage=stage)
    if image.dtype == np.uint16:
        image = scale_to_8bit(image)
    return image, "bgr8"


def frame_from_cdr(raw: bytes | bytearray | memoryview, compressed: bool,
                   max_pixels: int = DEFAULT_MAX_INPUT_PIXELS, stage: str = "input"
                   ) -> tuple[np.ndarray, str, cdr_image.StampedHeader]:
    """Frame, encoding and header of a serialized Image (or CompressedImage), read in place (a raw frame is
    a zero-copy view into ``raw``). :class:`cdr_image.UnsupportedEncoding` for a buffer that is not plain
    CDR, InputError for anything unusable. The node, calibration and evaluation all read frames so."""
    if compressed:
        c = cdr_image.parse_compressed(raw)
        frame, encoding = decode_compressed(c.data, stage=stage, max_pixels=max_pixels)
        return frame, encoding, c.header
    f = cdr_image.parse_image(raw)
    view, encoding = frame_from_fields(f.encoding, f.height, f.width, f.step, f.data, f.is_bigendian,
                                       stage=stage)
    return view, encoding, f.header


def quiet_opencv_log() -> None:
    """Keep OpenCV's own WARN lines (an unreadable file, a truncated image) off stderr: the command line
    tools report the same problem in their one-line error, and a second line would break that contract."""
    logging = getattr(getattr(cv2, "utils", None), "logging", None)
    if logging is not None:
        logging.setLogLevel(logging.LOG_LEVEL_ERROR)


def read_image_file(path: Path, stage: str = "input") -> np.ndarray:
    """A bgr8 image file (cv2.imread); InputError naming the file when it cannot be read."""
    image = cv2.imread(str(path), cv2.IMREAD_COLOR)
    if image is None:  # a file that was asked for is named, never silently skipped
        raise InputError("cannot read image (not an image, or corrupt)", call="cv2.imread",
                         params={"path": str(path)}, stage=stage)
    return image


def class_colour(class_id: int) -> tuple[int, int, int]:
    """A stable, well-separated BGR colour per class id (golden-ratio hue walk)."""
    hue = int((class_id * 0.618033988749895 % 1.0) * 180)
    hsv = np.array([[[hue, 220, 255]]], dtype=np.uint8)
    b, g, r = cv2.cvtColor(hsv, cv2.COLOR_HSV2BGR)[0, 0]
    return int(b), int(g), int(r)


def draw_detections(
    image: np.ndarray,
    encoding: str,
    detections: Detections,
    classes: Sequence[str],
    thickness: int = 2,
) -> np.ndarray:
    """A bgr8 copy of ``image`` with one box and a ``label score`` tag per detection."""
    canvas = to_bgr8(image, encoding)
    h, w = canvas.shape[:2]
    font_scale = max(0.4, min(w, h) / 1000.0)
    for i in range(len(detections)):
        x1, y1, x2, y2 = (round(float(v)) for v in detections.boxes[i])
        colour = class_colour(int(detections.class_ids[i]))
        cv2.rectangle(canvas, (x1, y1), (x2, y2), colour, thickness)
        text = f"{detections.label(i, classes)} {float(detections.scores[i]):.2f}"
        (tw, th), base = cv2.getTextSize(text, cv2.FONT_HERSHEY_SIMPLEX, font_scale, 1)
        ty = y1 - 2 if y1 - th - base - 2 >= 0 else min(h - 1, y1 + th + 2)
        cv2.rectangle(canvas, (x1, ty - th - base // 2), (x1 + tw, ty + base // 2), colour, -1)
        cv2.putText(canvas, text, (x1, ty), cv2.FONT_HERSHEY_SIMPLEX, font_scale, (0, 0, 0), 1,
                    cv2.LINE_AA)
    return canvas


def fields_from_bgr8(image: np.ndarray) -> dict[str, Any]:
    """Message fields for publishing a bgr8 frame: encoding, height, width, step, is_bigendian, data."""
    img = validate_image(image, "bgr8", stage="publish")
    img = np.ascontiguousarray(img)
    h, w = img.shape[:2]
    return {"encoding": "bgr8", "height": h, "width": w, "step": w * 3, "is_bigendian": 0,
            "data": img.tobytes()}

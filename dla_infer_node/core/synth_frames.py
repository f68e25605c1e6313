"""An RGB picture as a camera in any supported encoding would send it (message fields or a frame view).

For tests, benchmarks and generated bags: the same scene as a YUYV, NV12, Bayer or 16-bit camera. YUV uses
OpenCV's own RGB -> YUV codes (4:2:2 packed; NV12/NV21 from OpenCV's I420 with the chroma planes
interleaved), Bayer keeps each site's colour of the pattern, 16-bit values are ``v * 257`` (which scales
back to ``v`` exactly, as cv_bridge scales 16 to 8 bits).
"""

from __future__ import annotations

from typing import Any

import cv2
import numpy as np

from dla_infer_node.core import encodings
from dla_infer_node.core.encodings import BAYER, PACKED, YUV420SP, YUV422
from dla_infer_node.core.image_io import image_from_fields

_PACKED_FROM_RGB = {"bgr8": cv2.COLOR_RGB2BGR, "rgba8": cv2.COLOR_RGB2RGBA, "bgra8": cv2.COLOR_RGB2BGRA,
                    "mono8": cv2.COLOR_RGB2GRAY}
# (row, column) parity of R and B in each ROS Bayer pattern (G fills the other two sites)
_BAYER_SITES = {"rggb": ((0, 0), (1, 1)), "bggr": ((1, 1), (0, 0)), "gbrg": ((1, 0), (0, 1)),
                "grbg": ((0, 1), (1, 0))}


def pixels_in(rgb: np.ndarray, encoding: str) -> np.ndarray:
    """``(H, W, 3)`` uint8 RGB -> the frame's values as a contiguous array shaped like its view."""
    enc = encodings.lookup(encoding)
    rgb = np.ascontiguousarray(rgb, dtype=np.uint8)
    h, w = rgb.shape[:2]
    if enc.family == PACKED:
        name8 = enc.eight_bit
        out = rgb if name8 == "rgb8" else cv2.cvtColor(rgb, _PACKED_FROM_RGB[name8])
    elif enc.family == YUV422:
        code = cv2.COLOR_RGB2YUV_YUY2 if enc.name == "yuyv" else cv2.COLOR_RGB2YUV_UYVY
        out = cv2.cvtColor(rgb, code)
    elif enc.family == YUV420SP:
        i420 = cv2.cvtColor(rgb, cv2.COLOR_RGB2YUV_I420)  # Y rows, then the U plane, then the V plane
        chroma = i420[h:].reshape(2, h // 2, w // 2)
        u, v = chroma[0], chroma[1]
        uv = np.stack([u, v] if enc.name == "nv12" else [v, u], axis=-1).reshape(h // 2, w)
        out = np.concatenate([i420[:h], uv])
    else:
        assert enc.family == BAYER
        (ry, rx), (by, bx) = _BAYER_SITES[enc.name[6:10]]
        out = rgb[:, :, 1].copy()
        out[ry::2, rx::2] = rgb[ry::2, rx::2, 0]
        out[by::2, bx::2] = rgb[by::2, bx::2, 2]
    if out.ndim == 2:
        out = out[:, :, np.newaxis]
    return out.astype(np.uint16) * 257 if enc.bits == 16 else out


def fields_in(rgb: np.ndarray, encoding: str, pad: int = 0, bigendian: bool = False) -> dict[str, Any]:
    """``sensor_msgs/Image`` fields of ``rgb`` sent as ``encoding`` (``pad`` bytes after every row)."""
    enc = encodings.lookup(encoding)
    values = pixels_in(rgb, encoding)
    if enc.bits == 16:
        values = values.astype(">u2" if bigendian else "<u2")
    rows = values.reshape(values.shape[0], -1).view(np.uint8)
    data = np.zeros((rows.shape[0], rows.shape[1] + pad), np.uint8)
    data[:, :rows.shape[1]] = rows
    h, w = rgb.shape[:2]
    return {"encoding": encoding, "height": h, "width": w, "step": data.shape[1],
            "is_bigendian": int(bigendian and enc.bits == 16), "data": data.tobytes()}


def frame_in(rgb: np.ndarray, encoding: str, pad: int = 0, bigendian: bool = False) -> np.ndarray:
    """The view the node reads from such a message (:func:`image_io.image_from_fields`)."""
    return image_from_fields(**fields_in(rgb, encoding, pad, bigendian))

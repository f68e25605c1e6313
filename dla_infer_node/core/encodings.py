"""The image encodings the node takes: one table of ROS names, layouts, size rules and OpenCV codes.

Names are exactly ROS's (``sensor_msgs/image_encodings.hpp``). Each belongs to one layout family, which
fixes what a frame *view* of the message looks like (the array every later stage is handed):

| family | encodings | view of a W x H frame |
| --- | --- | --- |
| ``packed`` | rgb8 bgr8 rgba8 bgra8 mono8, their 16-bit forms | ``(H, W, C)``, uint8 or uint16 |
| ``yuv422`` | uyvy, yuyv | ``(H, W, 2)`` uint8 (two bytes a pixel, chroma shared by pixel pairs) |
| ``yuv420sp`` | nv12, nv21 | ``(H * 3 / 2, W, 1)`` uint8 (Y rows, then interleaved chroma rows) |
| ``bayer`` | bayer_{rggb,bggr,gbrg,grbg}{8,16} | ``(H, W, 1)``, uint8 or uint16 |

16-bit views carry the message's byte order in their dtype (``>u2`` when ``is_bigendian``), so no byte is
copied to read them. Conversion to RGB follows cv_bridge (``dla_infer_node.core.color_convert``): its
OpenCV colour codes, with the ROS Bayer names mapped onto OpenCV's shifted ones (OpenCV names a pattern by
the second row's two middle pixels), 16-bit values scaled to 8 bits by 255/65535, and for NV12/NV21
(which cv_bridge does not convert) OpenCV's ``COLOR_YUV2RGB_NV12`` / ``NV21``.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

from dla_infer_node.core.errors import InputError

PACKED, YUV422, YUV420SP, BAYER = "packed", "yuv422", "yuv420sp", "bayer"


@dataclass(frozen=True)
class Encoding:
    """One ROS image encoding: how its bytes are laid out and how it becomes RGB."""

    name: str
    family: str
    channels: int  # values per element of the view's last axis
    bits: int  # 8 or 16 per value
    # packed: the view channel holding (R, G, B); mono repeats its one channel
    rgb_index: tuple[int, int, int] | None = None
    # every other family: the OpenCV code cv_bridge converts it to RGB with
    to_rgb_code: int | None = None

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(np.uint8 if self.bits == 8 else np.uint16)

    @property
    def pixel_bytes(self) -> int:
        """Bytes of one pixel of a row (an NV12 row of Y, or of interleaved chroma, is one byte a pixel)."""
        return self.channels * self.bits // 8

    @property
    def eight_bit(self) -> str:
        """The 8-bit packed encoding a 16-bit packed one scales to (itself for 8-bit ones)."""
        return self.name.replace("16", "8") if self.family == PACKED else self.name

    def rows(self, height: int) -> int:
        """Rows of ``step`` bytes a frame of this height has in the message."""
        return height * 3 // 2 if self.family == YUV420SP else height

    def size_rule(self) -> str:
        """What a frame's width and height must satisfy, in words ('' if any size fits)."""
        return {YUV422: "an even width", YUV420SP: "an even width and height",
                BAYER: "width and height of at least 2"}.get(self.family, "")

    def fits(self, width: int, height: int) -> bool:
        if self.family == YUV422:
            return width % 2 == 0
        if self.family == YUV420SP:
            return width % 2 == 0 and height % 2 == 0
        if self.family == BAYER:
            return width >= 2 and height >= 2
        return True


def _packed(name: str, channels: int, bits: int, rgb: tuple[int, int, int]) -> Encoding:
    return Encoding(name, PACKED, channels, bits, rgb_index=rgb)


# ROS Bayer name -> OpenCV code (OpenCV names the pattern by the 2nd row's 2nd and 3rd pixels)
_BAYER_CODES = {"rggb": cv2.COLOR_BayerBG2RGB, "bggr": cv2.COLOR_BayerRG2RGB,
                "gbrg": cv2.COLOR_BayerGR2RGB, "grbg": cv2.COLOR_BayerGB2RGB}

TABLE: dict[str, Encoding] = {e.name: e for e in [
    *(_packed(f"rgb{b}", 3, b, (0, 1, 2)) for b in (8, 16)),
    *(_packed(f"bgr{b}", 3, b, (2, 1, 0)) for b in (8, 16)),
    *(_packed(f"rgba{b}", 4, b, (0, 1, 2)) for b in (8, 16)),
    *(_packed(f"bgra{b}", 4, b, (2, 1, 0)) for b in (8, 16)),
    *(_packed(f"mono{b}", 1, b, (0, 0, 0)) for b in (8, 16)),
    Encoding("uyvy", YUV422, 2, 8, to_rgb_code=cv2.COLOR_YUV2RGB_UYVY),
    Encoding("yuyv", YUV422, 2, 8, to_rgb_code=cv2.COLOR_YUV2RGB_YUY2),
    Encoding("nv12", YUV420SP, 1, 8, to_rgb_code=cv2.COLOR_YUV2RGB_NV12),
    Encoding("nv21", YUV420SP, 1, 8, to_rgb_code=cv2.COLOR_YUV2RGB_NV21),
    *(Encoding(f"bayer_{p}{b}", BAYER, 1, b, to_rgb_code=code)
      for p, code in _BAYER_CODES.items() for b in (8, 16)),
]}

# older or generic names -> the encoding they mean (the generic OpenCV types as OpenCV lays them out)
ALIASES = {"yuv422": "uyvy", "yuv422_yuy2": "yuyv", "8UC1": "mono8", "8UC3": "bgr8", "8UC4": "bgra8"}
# names ROS defines that the node refuses, with the reason
UNSUPPORTED = {"nv24": "YUV 4:4:4 semi-planar has no OpenCV conversion to match"}
# what a refusal lists as supported
SUPPORTED_NAMES = tuple(sorted(TABLE)) + tuple(sorted(ALIASES))


def lookup(encoding: str, stage: str = "input") -> Encoding:
    """The table entry of a ROS encoding name (aliases included); InputError for anything else."""
    try:
        return TABLE[ALIASES.get(encoding, encoding)]
    except (KeyError, TypeError):
        pass
    why = UNSUPPORTED.get(encoding) if isinstance(encoding, str) else None
    detail = (f"encoding {encoding!r} is not supported ({why})" if why else
              f"unsupported encoding {encoding!r}; supported: {', '.join(SUPPORTED_NAMES)}")
    raise InputError(detail, call="encodings.lookup", params={"encoding": encoding}, stage=stage) from None


def canonical(encoding: str, stage: str = "input") -> str:
    """The table name of ``encoding`` (``yuv422`` -> ``uyvy``, ``8UC3`` -> ``bgr8``)."""
    return lookup(encoding, stage).name


def expected_size(enc: Encoding, width: int, height: int, step: int | None = None) -> str:
    """The size a W x H frame of ``enc`` needs, in words (for the one-line bad-input reason)."""
    row = width * enc.pixel_bytes
    rows = enc.rows(height)
    step_text = f"step >= {row}" if step is None else f"step {step} (>= {row})"
    rule = enc.size_rule()
    needs = f"{enc.name} needs {rule}; " if rule else f"{enc.name} needs "
    rows_text = f"{rows} rows (height * 3 / 2)" if enc.family == YUV420SP else f"{rows} rows"
    return f"{needs}{rows_text} of {step_text} bytes ({enc.pixel_bytes} a pixel)"


def frame_size(frame: np.ndarray, enc: Encoding) -> tuple[int, int]:
    """``(width, height)`` of the picture a validated view holds (an NV12 view has 3/2 as many rows)."""
    rows, width = frame.shape[:2]
    return width, rows * 2 // 3 if enc.family == YUV420SP else rows


def view(enc: Encoding, height: int, width: int, step: int, buf: np.ndarray, is_bigendian: bool,
         stage: str = "input") -> np.ndarray:
    """Zero-copy view of a message's bytes (``buf``: flat uint8) in the family's shape (module doc).

    Every size rule is checked here and a frame that breaks one is an InputError whose reason names the
    encoding and the size it needed.
    """
    params = {"encoding": enc.name, "height": height, "width": width, "step": step}
    if height <= 0 or width <= 0:
        raise InputError("image is empty (zero width or height)", call="image_from_fields",
                         params=params, stage=stage)
    rows, row = enc.rows(height), width * enc.pixel_bytes
    if not enc.fits(width, height) or step < row or (enc.bits == 16 and step % 2):
        what = "step must be even for 16-bit values; " if enc.bits == 16 and step % 2 else ""
        raise InputError(f"{width}x{height} frame with step {step} does not fit: {what}"
                         f"{expected_size(enc, width, height)}", call="image_from_fields",
                         params=params, stage=stage)
    if buf.size < step * rows:
        raise InputError(f"data holds {buf.size} bytes, step*height needs {step * rows} "
                         f"({expected_size(enc, width, height, step)})", call="image_from_fields",
                         params=params, stage=stage)
    dtype = enc.dtype.newbyteorder(">" if is_bigendian else "<") if enc.bits == 16 else enc.dtype
    item = dtype.itemsize
    return np.ndarray((rows, width, enc.channels), dtype=dtype, buffer=buf, offset=0,
                      strides=(step, enc.channels * item, item))


def validate(image: object, encoding: str, stage: str = "input") -> tuple[np.ndarray, Encoding]:
    """Check an in-memory frame against its encoding; returns it as a 3-D view (never a copy) and the
    table entry. A 2-D array is accepted for one-channel layouts (mono, Bayer, NV12/NV21)."""
    enc = lookup(encoding, stage)
    if not isinstance(image, np.ndarray):
        raise InputError(f"image must be a numpy array, got {type(image).__name__}",
                         call="validate_image", params={"encoding": encoding}, stage=stage)
    params_shape = image.shape
    if image.ndim == 2 and enc.channels == 1:
        image = image[:, :, np.newaxis]
    shape = image.shape
    dtype_ok = image.dtype.kind == "u" and image.dtype.itemsize == enc.dtype.itemsize
    if dtype_ok and len(shape) == 3 and shape[0] and shape[1] and shape[2] == enc.channels:
        w, h = frame_size(image, enc)
        if enc.fits(w, h) and (enc.family != YUV420SP or shape[0] % 3 == 0):
            return image, enc  # the per-frame case: no error text is built
    params = {"encoding": encoding, "shape": params_shape, "dtype": str(image.dtype)}
    if not dtype_ok:
        raise InputError(f"image dtype must be {enc.dtype}", call="validate_image", params=params,
                         stage=stage)
    if len(shape) != 3:
        raise InputError("image must be (H, W, C)", call="validate_image", params=params, stage=stage)
    if shape[0] == 0 or shape[1] == 0:
        raise InputError("image is empty (zero width or height)", call="validate_image",
                         params=params, stage=stage)
    if shape[2] != enc.channels:
        raise InputError(f"encoding {encoding} needs {enc.channels} channel(s), image has {shape[2]}",
                         call="validate_image", params=params, stage=stage)
    rows = "height * 3 / 2 rows, " if enc.family == YUV420SP else ""
    raise InputError(f"image does not fit {encoding}: it needs {rows}{enc.size_rule()}",
                     call="validate_image", params=params, stage=stage)

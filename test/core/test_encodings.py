"""The encoding table: ROS names and aliases, each layout's size rule, byte order, and the one-line reasons
a frame that does not fit is refused with."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from dla_infer_node.core import encodings
from dla_infer_node.core.errors import InputError
from dla_infer_node.core.image_io import frame_from_fields, image_from_fields

REPO = Path(__file__).resolve().parents[2]
# what sensor_msgs/image_encodings.hpp defines for colour, mono, Bayer and YUV frames
ROS_NAMES = {
    "rgb8", "rgba8", "rgb16", "rgba16", "bgr8", "bgra8", "bgr16", "bgra16", "mono8", "mono16",
    *(f"bayer_{p}{b}" for p in ("rggb", "bggr", "gbrg", "grbg") for b in (8, 16)),
    "uyvy", "yuv422", "yuyv", "yuv422_yuy2", "nv12", "nv21", "nv24",
}


def test_every_ros_camera_encoding_is_taken_or_refused_by_name() -> None:
    taken = set(encodings.TABLE) | set(encodings.ALIASES)
    assert ROS_NAMES - taken == {"nv24"}
    with pytest.raises(InputError) as info:
        encodings.lookup("nv24")
    text = str(info.value)
    assert "\n" not in text and "'nv24' is not supported" in text


def test_names_are_the_ros_header_s() -> None:
    headers = sorted(REPO.glob(".venv/**/sensor_msgs/image_encodings.hpp"))
    if not headers:
        pytest.skip("no ROS wheels in this environment (the names are also pinned in ROS_NAMES)")
    defined = set(re.findall(r'const char \w+\[\] = "([^"]+)";', headers[0].read_text(encoding="utf-8")))
    assert set(encodings.TABLE) <= defined and set(encodings.ALIASES) <= defined


@pytest.mark.parametrize(("alias", "name"), [("yuv422", "uyvy"), ("yuv422_yuy2", "yuyv"), ("8UC1", "mono8"),
                                             ("8UC3", "bgr8"), ("8UC4", "bgra8")])
def test_aliases_read_as_the_encoding_they_mean(alias: str, name: str) -> None:
    enc = encodings.lookup(name)
    h, w = 4, 6
    data = bytes(range(256))[:enc.rows(h) * w * enc.pixel_bytes]
    view, canonical = frame_from_fields(alias, h, w, w * enc.pixel_bytes, data)
    assert canonical == name
    assert np.array_equal(view, image_from_fields(name, h, w, w * enc.pixel_bytes, data))


def test_layouts() -> None:
    shapes = {name: encodings.view(e, 4, 6, 6 * e.pixel_bytes, np.zeros(1000, np.uint8), False).shape
              for name, e in encodings.TABLE.items()}
    assert shapes["yuyv"] == shapes["uyvy"] == (4, 6, 2)
    assert shapes["nv12"] == shapes["nv21"] == (6, 6, 1)  # Y rows, then half as many chroma rows
    assert shapes["bayer_rggb16"] == shapes["mono8"] == (4, 6, 1)
    assert shapes["rgba16"] == (4, 6, 4)
    assert encodings.lookup("rgba16").dtype == np.uint16 and encodings.lookup("yuyv").dtype == np.uint8


def test_16_bit_byte_order_follows_is_bigendian() -> None:
    data = bytes([0x12, 0x34, 0x56, 0x78])
    assert image_from_fields("mono16", 1, 2, 4, data, is_bigendian=0)[0, :, 0].tolist() == [0x3412, 0x7856]
    assert image_from_fields("mono16", 1, 2, 4, data, is_bigendian=1)[0, :, 0].tolist() == [0x1234, 0x5678]


@pytest.mark.parametrize(("encoding", "height", "width", "step", "size", "reason"), [
    ("yuyv", 4, 5, 10, 40, "5x4 frame with step 10 does not fit: yuyv needs an even width; 4 rows of "
                           "step >= 10 bytes (2 a pixel)"),
    ("uyvy", 4, 6, 11, 40, "6x4 frame with step 11 does not fit: uyvy needs an even width; 4 rows of "
                           "step >= 12"),
    ("nv12", 5, 6, 6, 60, "nv12 needs an even width and height; 7 rows (height * 3 / 2) of step >= 6 bytes"),
    ("nv21", 4, 6, 8, 47, "data holds 47 bytes, step*height needs 48 (nv21 needs an even width and height; "
                          "6 rows (height * 3 / 2) of step 8 (>= 6) bytes"),
    ("bayer_grbg8", 1, 8, 8, 8, "bayer_grbg8 needs width and height of at least 2; 1 rows of step >= 8"),
    ("mono16", 2, 3, 7, 14, "step must be even for 16-bit values; mono16 needs 2 rows of step >= 6 bytes"),
    ("rgb16", 2, 3, 18, 35, "data holds 35 bytes, step*height needs 36 (rgb16 needs 2 rows of "
                            "step 18 (>= 18) bytes (6 a pixel))"),
])
def test_a_frame_that_does_not_fit_is_refused_in_one_line(encoding: str, height: int, width: int, step: int,
                                                          size: int, reason: str) -> None:
    with pytest.raises(InputError) as info:
        image_from_fields(encoding, height, width, step, bytes(size))
    text = str(info.value)
    assert "\n" not in text and text.startswith("[input]") and reason in text


def test_step_padding_and_longer_data_are_fine() -> None:
    data = np.arange(3 * 10, dtype=np.uint8)  # nv12 2x2 in rows of 10 bytes, the rest padding
    view = image_from_fields("nv12", 2, 2, 10, data)
    assert view[:, :, 0].tolist() == [[0, 1], [10, 11], [20, 21]]
    assert image_from_fields("yuyv", 1, 2, 4, bytes(100)).shape == (1, 2, 2)


@pytest.mark.parametrize(("image", "encoding", "words"), [
    (np.zeros((4, 5, 2), np.uint8), "yuyv", "it needs an even width"),
    (np.zeros((7, 4), np.uint8), "nv12", "height \\* 3 / 2 rows"),
    (np.zeros((4, 4, 1), np.uint8), "mono16", "dtype must be uint16"),
    (np.zeros((4, 4, 3), np.uint16), "yuyv", "dtype must be uint8"),
    (np.zeros((4, 4, 3), np.uint16), "rgba16", "needs 4 channel"),
])
def test_in_memory_frames_are_checked_against_their_layout(image: np.ndarray, encoding: str,
                                                          words: str) -> None:
    with pytest.raises(InputError, match=words):
        encodings.validate(image, encoding)


def test_in_memory_frames_of_every_layout() -> None:
    view, enc = encodings.validate(np.zeros((6, 4), np.uint8), "nv21")
    assert view.shape == (6, 4, 1) and encodings.frame_size(view, enc) == (4, 4)
    view, enc = encodings.validate(np.zeros((4, 4, 3), ">u2"), "rgb16")  # big-endian values are uint16 too
    assert enc.name == "rgb16" and view.dtype == np.dtype(">u2")

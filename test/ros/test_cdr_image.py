"""cdr_image reads what rclpy's own serializer writes, and refuses truncated or foreign buffers cleanly.

The reference is ``rclpy.serialization.serialize_message`` (the rmw's CDR writer), so these tests check the
hand-written reader against the real encoder, field by field, including alignment after strings of every
length modulo 4.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest
from rclpy.serialization import serialize_message
from sensor_msgs.msg import CompressedImage, Image

from dla_infer_node.core import cdr_image
from dla_infer_node.core.errors import InputError
from dla_infer_node.ros.ros_convert import frame_from_serialized


def _image(frame_id: str, encoding: str, h: int, w: int, c: int, pad: int, seed: int) -> Image:
    msg = Image()
    msg.header.stamp.sec, msg.header.stamp.nanosec = -3 + seed, 999_999_999 - seed
    msg.header.frame_id = frame_id
    msg.height, msg.width, msg.encoding, msg.step = h, w, encoding, w * c + pad
    msg.is_bigendian = seed % 2
    msg.data = np.random.default_rng(seed).integers(0, 256, (w * c + pad) * h, dtype=np.uint8).tobytes()
    return msg


@pytest.mark.parametrize("frame_id", ["", "c", "ca", "cam", "cam0", "camera_optical_frame", "kamera_ä"])
@pytest.mark.parametrize("encoding, c", [("rgb8", 3), ("mono8", 1), ("bgra8", 4)])
def test_image_fields_equal_rclpy_serialization(frame_id: str, encoding: str, c: int) -> None:
    msg = _image(frame_id, encoding, 5, 7, c, len(frame_id) % 3, seed=len(frame_id))
    f = cdr_image.parse_image(serialize_message(msg))
    assert (f.header.sec, f.header.nanosec, f.header.frame_id) == \
        (msg.header.stamp.sec, msg.header.stamp.nanosec, frame_id)
    assert (f.height, f.width, f.encoding, f.is_bigendian, f.step) == \
        (msg.height, msg.width, encoding, msg.is_bigendian, msg.step)
    assert bytes(f.data) == bytes(msg.data)


@pytest.mark.parametrize("fmt", ["jpeg", "png", "rgb8; jpeg compressed bgr8", ""])
def test_compressed_fields_equal_rclpy_serialization(fmt: str) -> None:
    msg = CompressedImage()
    msg.header.stamp.sec, msg.header.frame_id = 42, "cam"
    msg.format = fmt
    msg.data = bytes(range(13))
    f = cdr_image.parse_compressed(serialize_message(msg))
    assert (f.header.sec, f.header.frame_id, f.format, bytes(f.data)) == (42, "cam", fmt, bytes(range(13)))


def test_frame_is_a_view_into_the_received_bytes() -> None:
    msg = _image("cam", "rgb8", 4, 6, 3, pad=2, seed=1)
    raw = serialize_message(msg)
    frame, encoding, header = frame_from_serialized(raw, compressed=False)
    assert encoding == "rgb8" and frame.shape == (4, 6, 3) and header.frame_id == "cam"
    assert not frame.flags.owndata and not frame.flags.writeable  # no copy of the pixels
    expected = np.frombuffer(bytes(msg.data), np.uint8).reshape(4, 6 * 3 + 2)[:, :18].reshape(4, 6, 3)
    np.testing.assert_array_equal(frame, expected)


def test_big_endian_cdr_is_read() -> None:
    # hand-written CDR_BE buffer: header(sec, nanosec, frame_id "ab"), h=1, w=2, "mono8", is_bigendian=0,
    # step=2, data [7, 9]; alignment counted from the end of the 4-byte encapsulation header
    body = struct.pack(">iII", 5, 6, 3) + b"ab\0" + b"\0" + struct.pack(">III", 1, 2, 6) + b"mono8\0" + \
        b"\0" + b"\0" + struct.pack(">II", 2, 2) + bytes([7, 9])
    f = cdr_image.parse_image(b"\x00\x00\x00\x00" + body)
    assert (f.header.sec, f.header.nanosec, f.header.frame_id) == (5, 6, "ab")
    assert (f.height, f.width, f.encoding, f.step, bytes(f.data)) == (1, 2, "mono8", 2, bytes([7, 9]))


def test_transport_padding_after_the_payload_is_ignored() -> None:
    raw = serialize_message(_image("cam", "mono8", 3, 3, 1, 0, seed=2))
    assert bytes(cdr_image.parse_image(raw + b"\0\0\0").data) == bytes(cdr_image.parse_image(raw).data)


def test_every_truncation_is_an_input_error() -> None:
    raw = serialize_message(_image("cam", "mono8", 2, 3, 1, 0, seed=3))
    for n in range(len(raw)):
        with pytest.raises(InputError) as info:
            cdr_image.parse_image(raw[:n])
        assert info.value.stage == "input"


def test_corrupt_lengths_and_foreign_encodings() -> None:
    raw = bytearray(serialize_message(_image("cam", "rgb8", 2, 2, 3, 0, seed=4)))
    huge = bytearray(raw)
    huge[12:16] = struct.pack("<I", 1 << 30)  # frame_id length
    with pytest.raises(InputError, match="string length"):
        cdr_image.parse_image(bytes(huge))
    xcdr2 = b"\x00\x07" + bytes(raw[2:])
    with pytest.raises(cdr_image.UnsupportedEncoding):
        cdr_image.parse_image(xcdr2)
    bad_utf8 = bytearray(raw)
    bad_utf8[16] = 0xFF  # first byte of frame_id
    with pytest.raises(InputError, match="UTF-8"):
        cdr_image.parse_image(bytes(bad_utf8))


def test_short_pixel_data_is_caught_by_the_view() -> None:
    msg = _image("cam", "rgb8", 4, 4, 3, 0, seed=5)
    msg.data = bytes(10)  # a publisher's bug: step*height says 48
    with pytest.raises(InputError, match="step\\*height"):
        frame_from_serialized(serialize_message(msg), compressed=False)

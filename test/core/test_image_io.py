"""Image fields -> zero-copy views (step padding, every encoding), compressed decode, overlays, publishing."""

from __future__ import annotations

import array

import cv2
import numpy as np
import pytest

from dla_infer_node.core.detections import Detections
from dla_infer_node.core.errors import InputError
from dla_infer_node.core.image_io import (
    ENCODINGS,
    decode_compressed,
    draw_detections,
    fields_from_bgr8,
    image_from_fields,
    to_bgr8,
    validate_image,
)


@pytest.mark.parametrize("encoding", sorted(ENCODINGS))
@pytest.mark.parametrize(("pad", "bigendian"), [(0, 0), (8, 0), (8, 1)])
def test_view_honours_step_and_is_zero_copy(encoding: str, pad: int, bigendian: int) -> None:
    c = ENCODINGS[encoding]
    size = 2 if encoding.endswith("16") else 1
    h, w = 6, 8
    rows = h * 3 // 2 if encoding in ("nv12", "nv21") else h
    step = w * c * size + pad
    raw = bytearray(np.random.default_rng(0).integers(0, 256, rows * step, dtype=np.uint8).tobytes())
    img = image_from_fields(encoding, h, w, step, raw, is_bigendian=bigendian)
    assert img.shape == (rows, w, c) and img.dtype.itemsize == size

    def value(at: int) -> int:  # the element at byte offset `at`, in the message's byte order
        return int.from_bytes(raw[at:at + size], "big" if bigendian else "little")

    for y in range(rows):  # element (y, x, k) starts at byte y*step + (x*c + k)*size (message definition)
        for x in range(w):
            for k in range(c):
                assert img[y, x, k] == value(y * step + (x * c + k) * size)
    at = step + c * size
    raw[at] = (raw[at] + 1) % 256  # a change to the message buffer shows through the view
    assert img[1, 1, 0] == value(at)


@pytest.mark.parametrize("container", ["bytes", "memoryview", "array", "ndarray", "list"])
def test_data_containers(container: str) -> None:
    payload = bytes(range(24))
    data = {"bytes": payload, "memoryview": memoryview(payload), "array": array.array("B", payload),
            "ndarray": np.frombuffer(payload, np.uint8), "list": list(payload)}[container]
    img = image_from_fields("rgb8", 2, 4, 12, data, is_bigendian=1)  # endianness irrelevant at 8 bits
    assert img[1, 3].tolist() == [21, 22, 23]


def test_longer_data_than_needed_is_fine() -> None:
    img = image_from_fields("mono8", 2, 2, 2, bytes(10))
    assert img.shape == (2, 2, 1)


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"encoding": "yuv4:2:2"}, "unsupported encoding"),
        ({"encoding": "16UC1"}, "unsupported encoding"),
        ({"data": bytes(10)}, "step\\*height"),
        ({"step": 5}, "step 5 does not fit: rgb8 needs 3 rows of step >= 12 bytes"),
        ({"height": 0}, "empty"),
        ({"width": 0, "step": 0}, "empty"),
        ({"data": np.zeros(36, np.float32)}, "uint8"),
        ({"data": object()}, "byte buffer"),
        ({"height": "x"}, "integers"),
    ],
)
def test_bad_fields(kwargs: dict, words: str) -> None:
    args = {"encoding": "rgb8", "height": 3, "width": 4, "step": 12, "data": bytes(36), **kwargs}
    with pytest.raises(InputError, match=words) as info:
        image_from_fields(**args)
    assert str(info.value).startswith("[input]")


def test_compressed_round_trip() -> None:
    img = np.zeros((20, 30, 3), np.uint8)
    img[5:15, 10:20] = (0, 0, 255)  # red in BGR
    ok, png = cv2.imencode(".png", img)
    assert ok
    out, enc = decode_compressed(png.tobytes())
    assert enc == "bgr8" and np.array_equal(out, img)
    ok, jpg = cv2.imencode(".jpg", img)
    out, _ = decode_compressed(memoryview(jpg.tobytes()))
    assert out.shape == img.shape and abs(int(out[10, 15, 2]) - 255) < 10


@pytest.mark.parametrize("data", [b"", b"not an image at all", b"\x89PNG\r\n\x1a\n-truncated"])
def test_compressed_garbage(data: bytes) -> None:
    with pytest.raises(InputError, match=r"decode|no data") as info:
        decode_compressed(data)
    # refused by the header check (compressed_size) before cv2.imdecode, or by cv2.imdecode itself
    assert "cv2.imdecode" in str(info.value) or "compressed_size" in str(info.value)


def test_to_bgr8_every_encoding() -> None:
    rgb = np.array([[[10, 20, 30]]], np.uint8)
    assert to_bgr8(rgb, "rgb8").tolist() == [[[30, 20, 10]]]
    assert to_bgr8(rgb[:, :, ::-1], "bgr8").tolist() == [[[30, 20, 10]]]
    assert to_bgr8(np.array([[[10, 20, 30, 99]]], np.uint8), "rgba8").tolist() == [[[30, 20, 10]]]
    assert to_bgr8(np.array([[[30, 20, 10, 99]]], np.uint8), "bgra8").tolist() == [[[30, 20, 10]]]
    assert to_bgr8(np.array([[[77]]], np.uint8), "mono8").tolist() == [[[77, 77, 77]]]


def test_draw_detections_copies_and_draws() -> None:
    img = np.zeros((100, 120, 3), np.uint8)
    dets = Detections(np.array([[10, 20, 60, 80]], np.float32), np.array([0.9], np.float32), np.array([1]))
    out = draw_detections(img, "rgb8", dets, ["a", "b"])
    assert not img.any(), "input must not be modified"
    assert out.shape == (100, 120, 3) and out[50, 10].any() and not out[50, 35].any()
    assert draw_detections(img, "rgb8", Detections.empty(), ["a"]).shape == (100, 120, 3)


def test_fields_from_bgr8_round_trip() -> None:
    img = np.random.default_rng(2).integers(0, 256, (7, 9, 3), dtype=np.uint8)
    f = fields_from_bgr8(img[:, ::-1])  # a non-contiguous view is fine
    assert (f["encoding"], f["height"], f["width"], f["step"], f["is_bigendian"]) == ("bgr8", 7, 9, 27, 0)
    back = image_from_fields(f["encoding"], f["height"], f["width"], f["step"], f["data"])
    assert np.array_equal(back, img[:, ::-1])


def test_validate_image_mono_2d_and_errors() -> None:
    assert validate_image(np.zeros((3, 4), np.uint8), "mono8").shape == (3, 4, 1)
    with pytest.raises(InputError, match=r"\[overlay\]"):
        to_bgr8(np.zeros((3, 4, 3), np.uint16), "rgb8")


def test_detections_record() -> None:
    d = Detections(np.array([[1, 2, 3, 4]]), np.array([0.5]), np.array([7]))
    assert len(d) == 1 and d.boxes.dtype == np.float32 and d.class_ids.dtype == np.int64
    assert d.to_list(["x"]) == [{"class": "class_7", "score": 0.5, "bbox": [1.0, 2.0, 3.0, 4.0]}]
    assert len(Detections.empty()) == 0
    with pytest.raises(ValueError):
        Detections(np.zeros((2, 4)), np.zeros(1), np.zeros(2))

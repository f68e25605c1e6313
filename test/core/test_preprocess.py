"""Letterbox geometry (hand-computed), mapping back to source pixels, fast path == the literal contract."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
from _core_fixtures import make_metadata

from dla_infer_node.core.errors import InputError
from dla_infer_node.core.image_io import image_from_fields
from dla_infer_node.core.preprocess import (
    Letterbox,
    Preprocessor,
    preprocess,
    reference_preprocess,
    resize_interpolation,
)
from dla_infer_node.core.tensor_format import pack, unpack
from dla_infer_node.core.tensor_layout import TensorLayout


@pytest.mark.parametrize(
    ("src", "dst", "expected"),
    [
        # scale, pad_x, pad_y, new_w, new_h
        ((1920, 1080), (640, 640), (1 / 3, 0, 140, 640, 360)),
        ((100, 50), (64, 64), (0.64, 0, 16, 64, 32)),
        ((50, 100), (64, 64), (0.64, 16, 0, 32, 64)),
        ((333, 101), (320, 256), (320 / 333, 0, 79, 320, 97)),  # 101*0.96096 = 97.06 -> 97, (256-97)//2
        ((10, 10), (640, 480), (48.0, 80, 0, 480, 480)),  # upscaling
        ((3000, 1), (64, 64), (64 / 3000, 0, 31, 64, 1)),  # new_h rounds to 0 -> clamped to 1
    ],
)
def test_letterbox_geometry(src: tuple[int, int], dst: tuple[int, int], expected: tuple) -> None:
    lb = Letterbox.fit(src[0], src[1], dst[0], dst[1])
    scale, px, py, nw, nh = expected
    assert lb.scale == pytest.approx(scale)
    assert (lb.pad_x, lb.pad_y, lb.new_w, lb.new_h) == (px, py, nw, nh)
    assert (lb.src_w, lb.src_h, lb.dst_w, lb.dst_h) == (*src, *dst)


def test_to_source_undoes_pad_and_scale_and_clips() -> None:
    lb = Letterbox.fit(1920, 1080, 640, 640)  # scale 1/3, pad_y 140
    boxes = np.array([[10, 150, 100, 200], [-5, 100, 700, 600]], np.float32)
    out = lb.to_source(boxes)
    np.testing.assert_allclose(out[0], [30, 30, 300, 180], atol=1e-3)
    np.testing.assert_allclose(out[1], [0, 0, 1920, 1080])  # clipped to the source image
    np.testing.assert_allclose(lb.to_network(out[:1]), boxes[:1], atol=1e-3)


def test_object_maps_back_to_its_source_pixels() -> None:
    # a white block at known source coordinates, letterboxed into 320x256, found again in the tensor
    img = np.zeros((300, 500, 3), np.uint8)
    x1, y1, x2, y2 = 120, 60, 260, 210
    img[y1:y2, x1:x2] = 255
    meta = make_metadata(width=320, height=256, pad_value=0)
    tensor, lb = preprocess(img, "bgr8", meta.input)
    ys, xs = np.nonzero(tensor[0, 0] > 0.5)
    found = np.array([[xs.min(), ys.min(), xs.max() + 1, ys.max() + 1]], np.float32)
    np.testing.assert_allclose(lb.to_source(found)[0], [x1, y1, x2, y2], atol=1.6)  # within one net pixel


@pytest.mark.parametrize("encoding", ["rgb8", "bgr8", "rgba8", "bgra8", "mono8"])
@pytest.mark.parametrize("order", ["rgb", "bgr"])
def test_fast_path_matches_contract(encoding: str, order: str) -> None:
    c = {"mono8": 1, "rgb8": 3, "bgr8": 3}.get(encoding, 4)
    rng = np.random.default_rng(7)
    meta = make_metadata(width=96, height=64, channel_order=order, mean=(10.0, 20.0, 30.0),
                         std=(50.0, 60.0, 70.0), pad_value=100)
    pre = Preprocessor(meta.input)
    for h, w in ((45, 77), (64, 96), (130, 61), (45, 77)):  # size changes rebuild buffers
        img = rng.integers(0, 256, (h, w, c), dtype=np.uint8)
        got, lb = pre(img, encoding)
        ref, lb_ref = reference_preprocess(img, encoding, meta.input)
        assert lb == lb_ref
        assert got.shape == (1, 3, 64, 96) and got.dtype == np.float32
        np.testing.assert_allclose(got, ref, atol=2e-5)


@pytest.mark.parametrize(
    ("src", "dst", "shortcut"),
    [
        ((1920, 1080), (640, 640), True),  # 3x: the everyday 1080p camera into a 640 network
        ((1917, 1077), (639, 639), True),  # 3x with odd source sizes (NEAREST_EXACT's rounding branch)
        ((500, 250), (100, 100), True),  # 5x
        ((1280, 720), (640, 640), False),  # 2x: bilinear averages two pixels, no shortcut
        ((1920, 1080), (512, 512), False),  # 3.75x
        ((64, 64), (320, 320), False),  # upscaling
    ],
)
@pytest.mark.parametrize("c", [1, 3, 4])
def test_odd_factor_shortcut_is_byte_exact(src: tuple[int, int], dst: tuple[int, int], shortcut: bool,
                                           c: int) -> None:
    """The odd-factor shortcut reproduces cv2.resize INTER_LINEAR byte for byte, and only it is chosen."""
    rng = np.random.default_rng(11)
    img = rng.integers(0, 256, (src[1], src[0], c), dtype=np.uint8)
    lb = Letterbox.fit(*src, *dst)
    interp = resize_interpolation(src[0], src[1], lb.new_w, lb.new_h)
    assert (interp == cv2.INTER_NEAREST_EXACT) == shortcut
    linear = cv2.resize(img, (lb.new_w, lb.new_h), interpolation=cv2.INTER_LINEAR)
    np.testing.assert_array_equal(cv2.resize(img, (lb.new_w, lb.new_h), interpolation=interp), linear)
    encoding = {1: "mono8", 3: "bgr8", 4: "bgra8"}[c]
    meta = make_metadata(width=dst[0], height=dst[1], pad_value=114)
    pre = Preprocessor(meta.input)
    got, _ = pre(img, encoding)
    assert pre.interpolation == interp
    ref, _ = reference_preprocess(img, encoding, meta.input)  # cv2.resize INTER_LINEAR, float64
    np.testing.assert_allclose(got, ref, atol=1e-6)  # one grey level is 1/255: any byte off would show


@pytest.mark.parametrize("fast_multiply", [True, False])
def test_both_zero_mean_conversions_match_the_contract(fast_multiply: bool) -> None:
    """The build-dependent choice (scaled multiply or normalize) never changes the tensor beyond rounding."""
    rng = np.random.default_rng(9)
    img = rng.integers(0, 256, (1080, 1920, 3), dtype=np.uint8)
    meta = make_metadata(width=640, height=640, pad_value=114)  # mean 0, std 255: the YOLO convention
    pre = Preprocessor(meta.input)
    pre.fast_multiply = fast_multiply
    got, _ = pre(img, "rgb8")
    ref, _ = reference_preprocess(img, "rgb8", meta.input)
    np.testing.assert_allclose(got, ref, atol=1e-6)


def test_multiply_is_fast_is_measured_once_per_process() -> None:
    from dla_infer_node.core.preprocess import multiply_is_fast

    assert isinstance(multiply_is_fast(), bool)
    assert multiply_is_fast.cache_info().currsize == 1  # cached: later preprocessors do not re-measure


def test_resize_interpolation_per_axis() -> None:
    assert resize_interpolation(900, 100, 300, 100) == cv2.INTER_NEAREST_EXACT  # 3x across, 1x down
    img = np.random.default_rng(3).integers(0, 256, (100, 900, 3), dtype=np.uint8)
    np.testing.assert_array_equal(cv2.resize(img, (300, 100), interpolation=cv2.INTER_NEAREST_EXACT),
                                  cv2.resize(img, (300, 100), interpolation=cv2.INTER_LINEAR))
    assert resize_interpolation(900, 200, 300, 100) == cv2.INTER_LINEAR  # 3x across, 2x down
    assert resize_interpolation(300, 100, 300, 100) == cv2.INTER_LINEAR  # same size: the caller skips it


def test_channel_order_and_normalisation_by_hand() -> None:
    img = np.zeros((4, 4, 3), np.uint8)
    img[:] = (10, 20, 30)  # bgr8: B=10, G=20, R=30
    meta = make_metadata(width=4, height=4, channel_order="rgb", mean=(1.0, 2.0, 3.0), std=(2.0, 3.0, 4.0))
    t, _ = preprocess(img, "bgr8", meta.input)
    # model channel 0 = R = 30 -> (30-1)/2; 1 = G -> (20-2)/3; 2 = B -> (10-3)/4
    np.testing.assert_allclose(t[0, :, 0, 0], [14.5, 6.0, 1.75])


def test_padding_value() -> None:
    meta = make_metadata(width=8, height=8, pad_value=114)
    t, lb = preprocess(np.zeros((2, 8, 3), np.uint8), "rgb8", meta.input)
    assert (lb.pad_y, lb.new_h) == (3, 2)
    np.testing.assert_allclose(t[0, :, 0, :], 114 / 255.0)
    np.testing.assert_allclose(t[0, :, 3:5, :], 0.0)


def test_step_padded_zero_copy_view() -> None:
    rng = np.random.default_rng(3)
    h, w, step = 30, 41, 41 * 3 + 13
    raw = rng.integers(0, 256, h * step, dtype=np.uint8).tobytes()
    view = image_from_fields("rgb8", h, w, step, raw)
    meta = make_metadata(width=64, height=48)
    got, _ = Preprocessor(meta.input)(view, "rgb8")
    ref, _ = reference_preprocess(np.ascontiguousarray(view), "rgb8", meta.input)
    np.testing.assert_allclose(got, ref, atol=2e-5)


@pytest.mark.parametrize(("fmt", "dtype", "scale"), [("hwc4", "fp16", None), ("linear", "int8", 0.02),
                                                     ("chw16", "fp16", None), ("chw32", "int8", 0.02)])
def test_into_layout(fmt: str, dtype: str, scale: float | None) -> None:
    meta = make_metadata(width=40, height=24)
    img = np.random.default_rng(5).integers(0, 256, (30, 50, 3), dtype=np.uint8)
    layout = TensorLayout.dense(fmt, dtype, 1, 3, 24, 40)
    buf = np.full(layout.size, 7, np.uint8)
    lb = Preprocessor(meta.input).into_layout(img, "bgr8", layout, buf, scale=scale)
    ref, lb_ref = reference_preprocess(img, "bgr8", meta.input)
    assert lb == lb_ref
    np.testing.assert_array_equal(buf, pack(ref, layout, scale=scale))
    np.testing.assert_allclose(unpack(buf, layout, scale=scale), ref, atol=(scale or 0.001))


@pytest.mark.parametrize(
    ("image", "encoding", "words"),
    [
        (np.zeros((0, 5, 3), np.uint8), "rgb8", "empty"),
        (np.zeros((5, 5, 3), np.float32), "rgb8", "dtype"),
        (np.zeros((5, 5, 4), np.uint8), "rgb8", "channel"),
        (np.zeros((5, 5, 3), np.uint8), "yuv420", "encoding"),
        (np.zeros((5, 5), np.uint8), "rgb8", r"\(H, W, C\)"),
        ([[1, 2, 3]], "rgb8", "numpy array"),
    ],
)
def test_bad_frames(image: object, encoding: str, words: str) -> None:
    pre = Preprocessor(make_metadata().input)
    with pytest.raises(InputError, match=words) as info:
        pre(image, encoding)  # type: ignore[arg-type]
    assert "[preprocess]" in str(info.value)


def test_constant_planes_and_negative_std() -> None:
    meta = make_metadata(width=32, height=32, mean=(5.0, 0.0, 0.0), std=(-2.0, 3.0, 255.0))
    for img in (np.full((20, 30, 3), 77, np.uint8),
                np.random.default_rng(9).integers(0, 256, (20, 30, 3), dtype=np.uint8)):
        got, _ = Preprocessor(meta.input)(img, "rgb8")
        ref, _ = reference_preprocess(img, "rgb8", meta.input)
        np.testing.assert_allclose(got, ref, atol=2e-5)

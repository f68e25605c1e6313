"""DLA tensor layouts: sizes from TensorRT's rules (computed here, independently), round trips, zero pads."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dla_infer_node.core.errors import DlaInferError
from dla_infer_node.core.tensor_format import pack, unpack
from dla_infer_node.core.tensor_layout import TensorLayout

ELEM = {"fp16": 2, "int8": 1}


def expected_dense_size(fmt: str, dtype: str, n: int, c: int, h: int, w: int) -> int:
    """Byte size straight from the TensorRT format definitions (Orin: 64-byte rows)."""
    e = ELEM[dtype]
    if fmt == "linear":  # [N][C][H][roundUp(W, 64/elem)]
        return n * c * h * math.ceil(w / (64 // e)) * (64 // e) * e
    if fmt == "hwc4":  # [N][H][roundUp(W, 64/C'/elem)][C']
        cp = 1 if c == 1 else 4
        per_row = 64 // cp // e
        return n * h * math.ceil(w / per_row) * per_row * cp * e
    v = 16 if fmt == "chw16" else 32  # [N][ceil(C/V)][H][W][V]
    return n * math.ceil(c / v) * h * w * v * e


def element_offset(layout: TensorLayout, n: int, c: int, h: int, w: int) -> int:
    """Byte offset of one element, written from the format definitions (no code shared with the module)."""
    atom, line, surface, batch = layout.strides
    e = ELEM[layout.dtype]
    if layout.format == "linear":
        return n * batch + c * surface + h * line + w * e
    if layout.format == "hwc4":
        return n * batch + h * line + w * atom + c * e
    v = 16 if layout.format == "chw16" else 32
    return n * batch + (c // v) * surface + h * line + w * atom + (c % v) * e


@st.composite
def layouts(draw: st.DrawFn) -> TensorLayout:
    fmt = draw(st.sampled_from(["linear", "hwc4", "chw16", "chw32"]))
    dtype = {"chw16": "fp16", "chw32": "int8"}.get(fmt) or draw(st.sampled_from(["fp16", "int8"]))
    c = draw(st.sampled_from([1, 3, 4])) if fmt == "hwc4" else draw(st.integers(1, 70))
    n = draw(st.integers(1, 2))
    h = draw(st.integers(1, 9))
    w = draw(st.integers(1, 77))
    return TensorLayout.dense(fmt, dtype, n, c, h, w)


@settings(max_examples=150, deadline=None)
@given(layout=layouts())
def test_dense_size_matches_layout_rules(layout: TensorLayout) -> None:
    assert layout.size == expected_dense_size(layout.format, layout.dtype, *layout.shape)


@settings(max_examples=150, deadline=None)
@given(layout=layouts(), seed=st.integers(0, 2**31 - 1))
def test_round_trip_and_zero_padding(layout: TensorLayout, seed: int) -> None:
    rng = np.random.default_rng(seed)
    if layout.dtype == "int8":
        scale = 0.05
        # values on the quantisation grid survive exactly
        x = (rng.integers(-128, 128, size=layout.shape) * scale).astype(np.float32)
    else:
        scale = None
        x = rng.normal(0, 10, size=layout.shape).astype(np.float16).astype(np.float32)
    # a dirty reused buffer: pack must still write zero padding
    buf = np.full(layout.size, 0xAB, dtype=np.uint8)
    out = pack(x, layout, scale=scale, out=buf)
    assert out is buf
    back = unpack(buf, layout, scale=scale)
    np.testing.assert_allclose(back, x, rtol=0, atol=1e-6)

    occupied = np.zeros(layout.size, dtype=bool)
    e = ELEM[layout.dtype]
    for idx in np.ndindex(*layout.shape):
        off = element_offset(layout, *idx)
        occupied[off:off + e] = True
        raw = buf[off:off + e].tobytes()
        if layout.dtype == "fp16":
            assert np.frombuffer(raw, dtype="<f2")[0] == np.float16(x[idx])
        else:
            assert np.frombuffer(raw, dtype="i1")[0] == round(float(x[idx]) / scale)  # type: ignore[operator]
    assert not buf[~occupied].any(), "padding bytes must be zero"


def _read_by_definition(buf: np.ndarray, layout: TensorLayout, scale: float) -> np.ndarray:
    """Every element read at its offset from the format definitions (element_offset, vectorised) and
    widened by numpy: fp16 as numpy casts it, int8 times the scale in float32."""
    idx = np.indices(layout.shape).reshape(4, -1)
    offsets = element_offset(layout, *idx)
    raw = buf[offsets[:, None] + np.arange(ELEM[layout.dtype])].reshape(-1)
    if layout.dtype == "fp16":
        return raw.view("<f2").astype(np.float32).reshape(layout.shape)
    return (raw.view("i1").astype(np.float32) * np.float32(scale)).reshape(layout.shape)


def _assert_same_bits(got: np.ndarray, want: np.ndarray) -> None:
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    assert np.array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32))


@settings(max_examples=150, deadline=None)
@given(layout=layouts(), seed=st.integers(0, 2**31 - 1))
def test_unpack_reads_every_element_as_the_definition_gives_it(layout: TensorLayout, seed: int) -> None:
    """Any bytes (fp16 infinities, NaNs, signed zeros and subnormals included) come back bit for bit as
    numpy reads the element at its defined offset; pads never leak in."""
    buf = np.random.default_rng(seed).integers(0, 256, layout.size, dtype=np.uint8)
    _assert_same_bits(unpack(buf, layout, scale=0.05), _read_by_definition(buf, layout, 0.05))


@pytest.mark.parametrize("args", [
    ("chw16", "fp16", 2, 39, 3, 5, (32, 256, 1024, 3072)),  # row pads between the atoms
    ("chw32", "int8", 1, 40, 4, 3, (32, 128, 640, 1280)),  # row pads and surface slack
    ("linear", "fp16", 2, 3, 4, 5, (2, 64, 384, 1152)),  # surface slack: not one strided 2-D view
    ("linear", "int8", 2, 3, 4, 70, (1, 128, 512, 2048)),  # batch slack
    ("hwc4", "fp16", 2, 1, 4, 5, (2, 64, 256, 512)),  # one channel: planar
])
def test_unpack_of_padded_descriptors(args: tuple) -> None:
    fmt, dtype, n, c, h, w, strides = args
    layout = TensorLayout.from_descriptor(fmt, dtype, n, c, h, w, strides, strides[3] * n)
    buf = np.random.default_rng(7).integers(0, 256, layout.size, dtype=np.uint8)
    _assert_same_bits(unpack(buf, layout, scale=0.05), _read_by_definition(buf, layout, 0.05))


def test_int8_rounding_and_clamping() -> None:
    layout = TensorLayout.dense("linear", "int8", 1, 1, 1, 8)
    x = np.array([[[[0.25, 0.75, -0.25, 1.25, 1000.0, -1000.0, 2.49, -2.51]]]], dtype=np.float32)
    buf = pack(x, layout, scale=0.5)
    q = np.frombuffer(buf[:8].tobytes(), dtype=np.int8)
    # x/scale = 0.5, 1.5, -0.5, 2.5 (half to even), 2000, -2000 (clamped), 4.98, -5.02
    assert q.tolist() == [0, 2, 0, 2, 127, -128, 5, -5]
    np.testing.assert_allclose(unpack(buf, layout, scale=0.5)[0, 0, 0], np.array(q, np.float32) * 0.5)


def test_fp16_little_endian() -> None:
    layout = TensorLayout.dense("linear", "fp16", 1, 1, 1, 1)
    buf = pack(np.ones((1, 1, 1, 1), np.float32), layout)
    assert buf[:2].tobytes() == b"\x00\x3c"  # 1.0 in IEEE half, little-endian


def test_hwc4_pad_channel_and_row_alignment() -> None:
    layout = TensorLayout.dense("hwc4", "fp16", 1, 3, 2, 5)
    assert layout.strides[0] == 8 and layout.strides[1] == 64  # 8 pixels of 4 fp16 per 64-byte row
    x = np.arange(30, dtype=np.float32).reshape(1, 3, 2, 5) + 1
    buf = pack(x, layout)
    px = np.frombuffer(buf[64 + 8: 64 + 16].tobytes(), dtype="<f2")  # row 1, pixel 1
    assert px.tolist() == [x[0, 0, 1, 1], x[0, 1, 1, 1], x[0, 2, 1, 1], 0.0]


def test_from_descriptor_accepts_larger_strides() -> None:
    layout = TensorLayout.from_descriptor("chw16", "fp16", 1, 20, 3, 5, (32, 256, 1024, 4096), 4096)
    x = np.random.default_rng(1).normal(size=(1, 20, 3, 5)).astype(np.float16).astype(np.float32)
    buf = pack(x, layout)
    assert buf.size == 4096
    np.testing.assert_array_equal(unpack(buf, layout), x)
    # group 1 starts one surface (1024 bytes) in; channel 16 is its first lane
    assert np.frombuffer(buf[1024:1026].tobytes(), "<f2")[0] == np.float16(x[0, 16, 0, 0])


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("linear", "fp16", 1, 3, 4, 5, (2, 8, 32, 96), 96), "line stride"),  # row shorter than W
        (("hwc4", "fp16", 1, 3, 4, 5, (6, 64, 256, 256), 256), "atom"),  # atom must be 4 fp16
        (("chw16", "fp16", 1, 3, 4, 5, (32, 160, 640, 640), 100), "size"),
        (("chw16", "int8", 1, 3, 4, 5, (32, 160, 640, 640), 640), "fp16 only"),
        (("hwc4", "int8", 1, 2, 4, 5, (4, 64, 256, 256), 256), "C in"),
        (("banana", "int8", 1, 2, 4, 5, (4, 64, 256, 256), 256), "format"),
        (("linear", "fp16", 1, 0, 4, 5, (2, 64, 256, 256), 256), ">= 1"),
        (("linear", "fp16", 1, 3, 4, 5, (2, 64), 256), "4 byte strides"),
    ],
)
def test_bad_descriptors(args: tuple, words: str) -> None:
    with pytest.raises(DlaInferError, match=words) as info:
        TensorLayout.from_descriptor(*args)
    assert "[tensor_layout]" in str(info.value)


def test_pack_errors() -> None:
    layout = TensorLayout.dense("chw32", "int8", 1, 3, 2, 2)
    with pytest.raises(DlaInferError, match="scale"):
        pack(np.zeros((1, 3, 2, 2), np.float32), layout)
    with pytest.raises(DlaInferError, match="shape"):
        pack(np.zeros((1, 4, 2, 2), np.float32), layout, scale=1.0)
    with pytest.raises(DlaInferError, match="bytes"):
        pack(np.zeros((1, 3, 2, 2), np.float32), layout, scale=1.0, out=np.zeros(10, np.uint8))
    with pytest.raises(DlaInferError, match="uint8"):
        unpack(np.zeros(layout.size, np.float32), layout, scale=1.0)


def test_fp16_rounding_matches_ieee_round_to_nearest_even() -> None:
    # arbitrary float32 values (not representable in fp16) must round exactly as numpy's IEEE cast does
    rng = np.random.default_rng(11)
    x = (rng.normal(0, 100, (1, 5, 7, 9)) * rng.choice([1e-3, 1.0, 50.0], (1, 5, 7, 9))).astype(np.float32)
    for fmt in ("linear", "chw16"):
        layout = TensorLayout.dense(fmt, "fp16", *x.shape)
        back = unpack(pack(x, layout), layout)
        np.testing.assert_array_equal(back, x.astype("<f2").astype(np.float32))


def test_int8_chw32_many_channels_quantisation_by_hand() -> None:
    layout = TensorLayout.dense("chw32", "int8", 1, 40, 1, 2)
    x = np.zeros((1, 40, 1, 2), np.float32)
    x[0, 33, 0, 1] = 0.30  # /0.1 = 3.0 (float: 2.9999998) -> 3, lands in group 1, lane 1, pixel 1
    x[0, 39, 0, 0] = -99.0  # clamps to -128
    buf = pack(x, layout, scale=0.1)
    assert layout.size == 2 * 1 * 2 * 32
    group1 = buf[64:].view(np.int8).reshape(2, 32)  # [w][lane]
    assert group1[1, 1] == 3 and group1[0, 7] == -128
    assert np.count_nonzero(buf) == 2

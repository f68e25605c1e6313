"""GPU preprocessing path, everything that needs no GPU.

- The kernel's integer resize (host tap tables + OpenCV's 8-bit arithmetic) equals ``cv2.resize``.
- A numpy emulation of the whole kernel (resize, normalisation, quantisation and the chunk addressing of
  ``pack_chunk``) equals the CPU reference ``Preprocessor`` + ``tensor_format.pack`` byte for byte, for
  every format, dtype, encoding, odd sizes and padded descriptors.
- The ctypes parameter block matches the CUDA struct (nvcc, when installed), and the source compiles.
- The CUDA source itself, compiled for the host (a C++ compiler and a few stand-ins for CUDA built-ins) and
  run thread by thread, writes the bytes of cv_bridge + the CPU path for every family and layout.
- Layouts, scales and frames the GPU path cannot take fail before any CUDA call.
- Every other encoding (16-bit RGB/BGR(A)/mono in either byte order, YUYV/UYVY, NV12/NV21, Bayer 8/16):
  the kernel's reading of the staged bytes, driven by the parameter block alone, is what cv_bridge gives
  (``cv2.cvtColor`` with its code, 16 -> 8 bit by 255/65535), and so the whole emulated kernel equals
  cv_bridge's conversion followed by the CPU preprocess, byte for byte.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import cv2
import numpy as np
import pytest

from dla_infer_node.backends import gpu_preprocess as gp
from dla_infer_node.backends import gpu_preprocess_params as gpp
from dla_infer_node.backends import preprocess_kernel as pk
from dla_infer_node.core import encodings
from dla_infer_node.core.color_convert import to_rgb8 as cv_bridge_rgb8  # cv_bridge's codes and scaling
from dla_infer_node.core.errors import DlaInferError, InputError, ParameterError
from dla_infer_node.core.model_meta import InputSpec
from dla_infer_node.core.preprocess import Letterbox, Preprocessor
from dla_infer_node.core.tensor_format import pack
from dla_infer_node.core.tensor_layout import TensorLayout

COMBOS = [("linear", "fp16"), ("linear", "int8"), ("hwc4", "fp16"), ("hwc4", "int8"),
          ("chw16", "fp16"), ("chw32", "int8")]
ENCODINGS = {"rgb8": 3, "bgr8": 3, "rgba8": 4, "bgra8": 4, "mono8": 1}
SCALE = 2.0 / 127.0


def _spec(w: int, h: int, order: str = "rgb", imagenet: bool = False) -> InputSpec:
    if imagenet:
        return InputSpec("images", w, h, order, (123.675, 116.28, 103.53), (58.395, 57.12, 57.375), 114)
    return InputSpec("images", w, h, order, (0.0, 0.0, 0.0), (255.0, 255.0, 255.0), 114)


def _padded(layout: TensorLayout, tight: bool = False) -> TensorLayout:
    """The same tensor with larger strides and a size that is not a multiple of 16 (tail chunk), or with
    ``tight`` one that ends at its last element (the last surface without its row pad and slack)."""
    a, line, surface, batch = layout.strides
    line2 = line + 64
    planes = batch // surface
    surface2 = line2 * layout.h + 128
    batch2 = surface2 * planes + 256
    last = (layout.n - 1) * batch2 + (planes - 1) * surface2 + (layout.h - 1) * line2 + layout.w * a
    size = last if tight else batch2 * layout.n + 40
    return TensorLayout.from_descriptor(layout.format, layout.dtype, layout.n, layout.c, layout.h, layout.w,
                                        (a, line2, surface2, batch2), size)


def emulate_kernel(img: np.ndarray, encoding: str, spec: InputSpec, layout: TensorLayout,
                   scale: float | None) -> np.ndarray:
    """What the kernel writes, computed in numpy from the same parameter block and the staged bytes."""
    img = gpp.check_frame(img, encoding, 1 << 14, 1 << 14)
    fmt = gpp.source_format(encoding)
    w, h = gpp.frame_size(img, encoding)
    lb = Letterbox.fit(w, h, spec.width, spec.height)
    p = gpp.static_params(spec, layout, scale)
    gpp.set_geometry(p, spec, lb, encoding, big_endian=not img.dtype.isnative)
    pixels = gpp.emulate_source_channels(gpp.staged_bytes(img), p, fmt.family)
    small = pk.emulate_resize(pixels, lb.new_w, lb.new_h)
    canvas = np.empty((p.c, p.h, p.w), np.float32)
    for ch in range(p.c):
        canvas[ch].fill(np.float32(p.pad[ch]))
        v = small[:, :, ch]
        a, g = np.float32(p.alpha[ch]), np.float32(p.gamma[ch])
        if p.fused:  # one rounding: exact in float64 for 8-bit pixels and these magnitudes
            val = (v.astype(np.float64) * float(a) + float(g)).astype(np.float32)
        else:
            val = v.astype(np.float32) * a + g
        canvas[ch, p.pad_y:p.pad_y + p.new_h, p.pad_x:p.pad_x + p.new_w] = val
    es, cpg = layout.elem_size, layout.vector
    if es == 2:
        q = canvas.astype("<f2").view("<u2")
    else:
        q = np.clip(np.rint(np.divide(canvas, np.float32(p.scale), dtype=np.float32)), -128, 127)
        q = q.astype(np.int8).view(np.uint8)
    return _emulate_threads(q, p, es, cpg, layout.size)


def _emulate_threads(q: np.ndarray, p: pk.PackParams, es: int, cpg: int, size: int) -> np.ndarray:
    """The addressing of ``pack_chunk``, thread by thread: ``q`` holds each element's bits as ``(C, H, W)``.

    Checks on the way that the launch covers every thread and that the threads write each byte of the
    buffer exactly once and none past it.
    """
    cb = pk.CHUNK_BYTES[(es, cpg)]
    _, slots, surfaces = pk.chunk_plan(es, cpg, cb)
    blocks, threads = pk.launch_geometry(p.work, cb)
    v = np.arange(0, blocks * threads * cb, cb, dtype=np.int64)
    v = v[v < p.work]
    assert v.size == -(-p.work // cb)
    n = np.minimum(v // p.span, p.n)
    r = v - n * p.span
    base = n * p.batch + r
    fused = (n < p.n) & (r < p.surface)  # a chunk position of an item's first surface
    zero_at = np.where(n < p.n, base + (p.groups - 1) * p.surface, base)[~fused]  # slack, tail
    base, r = base[fused], r[fused]
    y = r // p.line
    e0 = (r - y * p.line) // es
    x0 = e0 // cpg
    real = (y < p.h) & (e0 % cpg == 0)
    i = np.arange(cb // es)
    x = x0[:, None] + i // slots  # (threads, elements)
    chunks = [(zero_at, np.zeros((zero_at.size, cb // es), np.int64))]
    for g in range(min(surfaces, p.groups)):
        ch = g * cpg + i % slots
        ok = real[:, None] & (x < p.w) & (ch < min(3, p.c))
        at = (np.minimum(ch, p.c - 1), np.minimum(y, p.h - 1)[:, None], np.minimum(x, p.w - 1))
        bits = np.where(ok, q[at], 0)
        chunks.append((base + g * p.surface, bits))
    out = np.zeros(size, np.uint8)
    count = np.zeros(size, np.int64)
    for at, bits in chunks:
        byte = at[:, None] + np.arange(cb)  # each element little-endian, es bytes
        val = (bits.astype(np.int64)[:, :, None] >> (8 * np.arange(es))).reshape(at.size, cb) & 0xFF
        keep = byte < size
        np.add.at(count, byte[keep], 1)
        out[byte[keep]] = val[keep]
    assert (count == 1).all(), "bytes written other than once"
    return out


def cpu_reference(img: np.ndarray, encoding: str, spec: InputSpec, layout: TensorLayout,
                  scale: float | None) -> np.ndarray:
    x, _ = Preprocessor(spec)(img, encoding)
    return pack(x, layout, scale=scale if layout.dtype == "int8" else None)


# ---------------------------------------------------------------------------------------------------
def test_resize_matches_cv2_on_random_sizes() -> None:
    rng = np.random.default_rng(7)
    for t in range(120):
        c = (1, 3, 4)[t % 3]
        w, h = (int(v) for v in rng.integers(1, 900, 2))
        nw, nh = (int(v) for v in rng.integers(1, 500, 2))
        img = rng.integers(0, 256, (h, w, c), dtype=np.uint8)
        ref = cv2.resize(img if c > 1 else img[:, :, 0], (nw, nh), interpolation=cv2.INTER_LINEAR)
        assert np.array_equal(pk.emulate_resize(img, nw, nh), ref.reshape(nh, nw, c)), (w, h, nw, nh, c)


@pytest.mark.parametrize("src,dst", [((1920, 1080), (640, 360)), ((1280, 720), (640, 360)),
                                     ((640, 480), (640, 480)), ((1, 1), (7, 5)), ((5, 1), (1, 9)),
                                     ((3, 2), (640, 427)), ((2000, 3), (640, 1))])
def test_resize_matches_cv2_on_special_ratios(src: tuple[int, int], dst: tuple[int, int]) -> None:
    img = np.random.default_rng(1).integers(0, 256, (src[1], src[0], 3), dtype=np.uint8)
    ref = cv2.resize(img, dst, interpolation=cv2.INTER_LINEAR)
    assert np.array_equal(pk.emulate_resize(img, *dst), ref)


@pytest.mark.parametrize("fmt,dtype", COMBOS)
def test_kernel_emulation_equals_cpu_pack(fmt: str, dtype: str) -> None:
    rng = np.random.default_rng(hash((fmt, dtype)) % 2**32)
    cases = [((67, 45), (131, 77)), ((64, 64), (10, 600)), ((33, 35), (40, 31)), ((97, 61), (97, 61))]
    for i, ((dw, dh), (sw, sh)) in enumerate(cases):
        encoding = list(ENCODINGS)[i % len(ENCODINGS)]
        spec = _spec(dw, dh, order=("rgb", "bgr")[i % 2], imagenet=i % 2 == 1)
        img = rng.integers(0, 256, (sh, sw, ENCODINGS[encoding]), dtype=np.uint8)
        dense = TensorLayout.dense(fmt, dtype, 1, 3, dh, dw)
        for layout in (dense, _padded(dense), _padded(dense, tight=True)):
            try:
                gpp.check_layout(spec, layout, SCALE)
            except gpp.GpuPreprocessError:
                continue  # e.g. a 66-byte line: the GPU path refuses it (tested below)
            got = emulate_kernel(img, encoding, spec, layout, SCALE)
            want = cpu_reference(img, encoding, spec, layout, SCALE)
            assert np.array_equal(got, want), (fmt, dtype, encoding, layout.strides, layout.size)


def test_strided_frame_is_the_same_as_contiguous() -> None:
    spec = _spec(48, 48)
    big = np.random.default_rng(3).integers(0, 256, (40, 70, 3), dtype=np.uint8)
    view = big[::2, 5:65]  # row step 420 bytes, 30 rows of 60 pixels
    layout = TensorLayout.dense("hwc4", "fp16", 1, 3, 48, 48)
    got = emulate_kernel(np.ascontiguousarray(view), "rgb8", spec, layout, None)
    assert np.array_equal(got, cpu_reference(view, "rgb8", spec, layout, None))


def test_cpu_path_fusion_probe() -> None:
    spec = _spec(640, 640, imagenet=True)
    assert gpp.cpu_path_fuses(spec, 640, 360, 640)  # full-width rows: OpenCV's SIMD loop
    assert gpp.cpu_path_fuses(_spec(64, 64), 1, 64, 64)  # mean 0: both roundings agree


# ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("chunk", sorted(set(pk.CHUNK_BYTES.values())))
def test_launch_geometry_covers_every_byte(chunk: int) -> None:
    assert pk.STRIDE_ALIGN % chunk == 0  # a chunk never straddles a line, surface or batch boundary
    for size in (1, 15, 16, 17, 4095, 4096, 4097, 640 * 640 * 32, 3 * 640 * 640 * 2 + 40):
        blocks, threads = pk.launch_geometry(size, chunk)
        assert threads == pk.BLOCK_THREADS
        assert blocks * threads * chunk >= size
        assert (blocks - 1) * threads * chunk < size


@pytest.mark.parametrize("fmt,dtype", COMBOS)
def test_each_output_pixel_is_converted_by_one_thread(fmt: str, dtype: str) -> None:
    """Linear threads write all three planes of their pixels: a 640x640 tensor takes 640*640 pixel
    conversions in every layout, not three times as many in linear."""
    layout = TensorLayout.dense(fmt, dtype, 1, 3, 640, 640)
    p = gpp.static_params(_spec(640, 640), layout, SCALE)
    cb = pk.CHUNK_BYTES[(layout.elem_size, layout.vector)]
    pixels, _, surfaces = pk.chunk_plan(layout.elem_size, layout.vector, cb)
    real_chunks = p.work // max(cb, layout.vector * layout.elem_size)  # chw: one chunk of each atom is real
    assert real_chunks * pixels == 640 * 640
    assert surfaces == (3 if fmt == "linear" else 1) and p.work * surfaces == layout.size


def test_chunk_plan_refuses_chunks_off_the_atoms() -> None:
    assert pk.chunk_plan(2, 1, 4) == (2, 1, 3) and pk.chunk_plan(1, 32, 16) == (1, 16, 1)
    for bad in ((2, 4, 4), (1, 32, 2), (2, 1, 32), (1, 4, 6)):
        with pytest.raises(ValueError):
            pk.chunk_plan(*bad)


def test_divisor_magic_is_exact() -> None:
    rng = np.random.default_rng(4)
    divisors = [16, 32, 48, 64, 80, 1280, 409600, 1228800, 6553600, 2**30, 2**31 - 1,
                *(int(d) * 16 for d in rng.integers(1, 2**26, 200))]
    top = 2**31 - 1
    for d in divisors:
        m, s = pk.divisor_magic(d)
        n = np.concatenate([rng.integers(0, 2**31, 2000), [0, 1, d - 1, d, d + 1, top, top - top % d,
                                                           top - top % d - 1]]).astype(object)
        n = n[(n >= 0) & (n <= top)]
        assert all((int(v) * m >> 32) >> s == int(v) // d for v in n), d


def test_check_layout_rejects_what_the_kernel_cannot_fill() -> None:
    spec = _spec(64, 64)
    gpp.check_layout(spec, TensorLayout.dense("chw16", "fp16", 1, 3, 64, 64), None)
    with pytest.raises(ParameterError):
        gpp.check_layout(spec, TensorLayout.dense("chw32", "int8", 1, 3, 64, 64), None)
    with pytest.raises(ParameterError):
        gpp.check_layout(spec, TensorLayout.dense("linear", "int8", 1, 3, 64, 64), -1.0)
    bad = [TensorLayout.dense("linear", "fp16", 2, 3, 64, 64),   # batch 2
           TensorLayout.dense("hwc4", "fp16", 1, 4, 64, 64),     # 4 channels
           TensorLayout.dense("linear", "fp16", 1, 3, 32, 64),   # not the metadata size
           TensorLayout.from_descriptor("linear", "fp16", 1, 3, 64, 64, (2, 136, 136 * 64, 136 * 64 * 3),
                                        136 * 64 * 3)]           # 136-byte lines: not 16-aligned
    for layout in bad:
        with pytest.raises(gpp.GpuPreprocessError) as info:
            gpp.check_layout(spec, layout, None)
        assert info.value.stage == gpp.STAGE and "preprocess_device" in str(info.value)


@pytest.mark.parametrize("image,encoding,needle", [
    (np.zeros((10, 10, 3), np.uint8), "16UC1", "unsupported encoding"),
    (np.zeros((0, 10, 3), np.uint8), "rgb8", "empty"),
    (np.zeros((10, 10, 3), np.float32), "rgb8", "uint8"),
    (np.zeros((10, 10, 4), np.uint8), "rgb8", "channel"),
    (np.zeros((101, 10, 3), np.uint8), "rgb8", "larger than the staging"),
    (np.zeros((10, 201), np.uint8), "mono8", "larger than the staging"),
])
def test_check_frame_errors_name_the_stage(image: np.ndarray, encoding: str, needle: str) -> None:
    with pytest.raises(InputError) as info:
        gpp.check_frame(image, encoding, max_w=200, max_h=100)
    assert info.value.stage == gpp.STAGE and needle in str(info.value)


@pytest.mark.parametrize("image,encoding,needle", [
    (np.zeros((10, 10, 3), np.uint8), "nv24", "not supported"),
    (np.zeros((10, 10, 3), np.uint8), "yuv422", "needs 2 channel(s)"),
    (np.zeros((10, 9, 2), np.uint8), "yuyv", "an even width"),
    (np.zeros((10, 10), np.uint8), "nv12", "height * 3 / 2 rows"),
    (np.zeros((15, 9), np.uint8), "nv21", "an even width and height"),
    (np.zeros((10, 10), np.uint8), "bayer_rggb16", "dtype must be uint16"),
    (np.zeros((10, 10, 4), np.uint16), "bgr16", "needs 3 channel(s)"),
    (np.zeros((0, 10), np.uint16), "mono16", "empty"),
    (np.zeros((153, 10), np.uint8), "nv12", "larger than the staging"),
])
def test_check_frame_of_camera_encodings_errors(image: np.ndarray, encoding: str, needle: str) -> None:
    with pytest.raises(InputError) as info:
        gpp.check_frame(image, encoding, max_w=200, max_h=100)
    assert info.value.stage == gpp.STAGE and needle in str(info.value)


def test_check_frame_takes_the_views_of_core_encodings() -> None:
    """NV12 and Bayer views with or without their trailing axis of 1, 16-bit views in either byte order."""
    assert gpp.check_frame(np.zeros((6, 4), np.uint8), "nv21", 4, 4).shape == (6, 4, 1)
    assert gpp.check_frame(np.zeros((4, 5, 1), np.uint16), "bayer_gbrg16", 5, 4).shape == (4, 5, 1)
    assert gpp.check_frame(np.zeros((4, 5), ">u2"), "mono16", 5, 4).shape == (4, 5, 1)
    assert gpp.source_format("8UC3") == gpp.source_format("bgr8")  # generic names as the table says


def test_check_frame_accepts_mono_2d_and_strided() -> None:
    assert gpp.check_frame(np.zeros((4, 5), np.uint8), "mono8", 5, 4).shape == (4, 5, 1)
    big = np.zeros((8, 12, 3), np.uint8)
    assert gpp.check_frame(big[::2, ::2], "bgr8", 6, 4).shape == (4, 6, 3)


def test_construction_without_a_gpu_is_a_package_error() -> None:
    """On CI (no GPU, maybe no cuda.core) construction fails with a stage error, never a bare one."""
    spec = _spec(64, 64)
    layout = TensorLayout.dense("linear", "fp16", 1, 3, 64, 64)
    try:
        path = gp.GpuInputPath(spec, layout, None, 640, 480)
    except DlaInferError as exc:
        assert exc.stage in (gpp.STAGE, "memory", "device")
    else:  # a GPU machine running the CPU tests
        path.close()
        path.close()


# ---------------------------------------------------------------------------------------------------
NVCC = shutil.which("nvcc")


def _struct_asserts() -> str:
    names = [field[0] for field in pk.PackParams._fields_]
    lines = [f"static_assert(__builtin_offsetof(PackParams, {name}) == "
             f'{getattr(pk.PackParams, name).offset}, "{name}");' for name in names]
    lines.append(f'static_assert(sizeof(PackParams) == {pk.ctypes.sizeof(pk.PackParams)}, "size");')
    return "\n".join(lines) + "\n"


@pytest.mark.skipif(NVCC is None, reason="nvcc not installed: compile-only check skipped")
@pytest.mark.parametrize("arch", ["sm_87", "sm_90"])
def test_kernel_source_compiles_and_struct_matches(tmp_path: Path, arch: str) -> None:
    src = tmp_path / "preprocess.cu"
    src.write_text(pk.KERNEL_SOURCE + _struct_asserts())
    for es, cpg in pk.VARIANTS if arch == "sm_90" else pk.VARIANTS[:1]:
        cb = pk.CHUNK_BYTES[(es, cpg)]
        res = subprocess.run([str(NVCC), f"-arch={arch}", "--ptx", f"-DDLA_ES={es}", f"-DDLA_CPG={cpg}",
                              f"-DDLA_CB={cb}", "-o", str(tmp_path / f"k{es}_{cpg}.ptx"), str(src)],
                             capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr
        assert ".entry dla_pack" in (tmp_path / f"k{es}_{cpg}.ptx").read_text()


# ---------------------------------------------------------------------------------------------------
# Every other encoding, against cv_bridge's conversion (the reference the CPU path and the GPU tests use)
NEW_ENCODINGS = [e for e in gpp.SOURCE_FORMATS if e not in ENCODINGS]


def camera_frame(rng: np.random.Generator, encoding: str, w: int, h: int) -> np.ndarray:
    shape, dtype = gpp.frame_shape(encoding, w, h)  # random samples, as a camera delivers them
    return rng.integers(0, np.iinfo(dtype).max + 1, shape, dtype=dtype)


@pytest.mark.parametrize("encoding", NEW_ENCODINGS)
def test_source_reading_equals_cv_bridge(encoding: str) -> None:
    """Per pixel, no resize: all size classes (tiny Bayer frames are zeros in OpenCV too), both orders."""
    rng = np.random.default_rng(sum(map(ord, encoding)))
    spec, layout = _spec(64, 64), TensorLayout.dense("linear", "fp16", 1, 3, 64, 64)
    fmt = gpp.source_format(encoding)
    for w, h in [(64, 48), (2, 2), (6, 4), (130, 22), (1, 1), (3, 3), (9, 5), (4, 2), (2, 6)]:
        if not encodings.lookup(encoding).fits(w, h):
            continue
        for big_endian in (False, True) if fmt.sample_bytes == 2 else (False,):
            frame = camera_frame(rng, encoding, w, h)
            frame = frame.astype(">u2") if big_endian else frame
            img = gpp.check_frame(frame, encoding, 200, 200)
            p = gpp.static_params(spec, layout, None)
            gpp.set_geometry(p, spec, Letterbox.fit(w, h, 64, 64), encoding, big_endian)
            got = gpp.emulate_source_channels(gpp.staged_bytes(img), p, fmt.family)
            assert np.array_equal(got, cv_bridge_rgb8(frame, encoding).reshape(h, w, 3)), (w, h, big_endian)


@pytest.mark.parametrize("encoding", ["yuyv", "uyvy", "nv12", "nv21"])
def test_yuv_arithmetic_over_a_million_triples(encoding: str) -> None:
    """OpenCV's fixed-point BT.601: every Y with 65 x 65 (U, V) pairs (a grid of step 4, and 255)."""
    y, uv = np.arange(256), np.append(np.arange(0, 255, 4), 255)
    u, v = np.meshgrid(uv, uv, indexing="ij")
    w = 512  # each (Y, U, V) fills a pixel pair in 4:2:2 and a 2x2 block in NV
    yy = np.broadcast_to(y[None, :], (u.size, 256)).reshape(-1)
    uu, vv = (np.repeat(a.reshape(-1), 256) for a in (u, v))
    fmt = gpp.source_format(encoding)
    if fmt.family == "yuv422":
        pairs = np.zeros((yy.size, 4), np.uint8)
        yo, uo, vo = fmt.yuv_off
        pairs[:, yo], pairs[:, yo + 2], pairs[:, uo], pairs[:, vo] = yy, yy, uu, vv
        frame = pairs.reshape(-1, w, 2)
    else:
        luma = np.repeat(np.repeat(yy.reshape(-1, w // 2), 2, axis=0), 2, axis=1)
        chroma = np.zeros((yy.size, 2), np.uint8)
        chroma[:, fmt.yuv_off[1]], chroma[:, fmt.yuv_off[2]] = uu, vv
        frame = np.concatenate([luma, chroma.reshape(-1, w)]).astype(np.uint8)
    h = frame.shape[0] * 2 // 3 if fmt.family == "nv" else frame.shape[0]
    spec, layout = _spec(64, 64), TensorLayout.dense("linear", "fp16", 1, 3, 64, 64)
    p = gpp.static_params(spec, layout, None)
    gpp.set_geometry(p, spec, Letterbox.fit(w, h, 64, 64), encoding)
    got = gpp.emulate_source_channels(gpp.staged_bytes(frame), p, fmt.family)
    assert np.array_equal(got, cv_bridge_rgb8(frame, encoding))


@pytest.mark.parametrize("fmt,dtype", COMBOS)
def test_kernel_emulation_of_every_encoding_equals_cv_bridge_then_cpu_pack(fmt: str, dtype: str) -> None:
    rng = np.random.default_rng(hash((fmt, dtype, "enc")) % 2**32)
    sizes = [((67, 45), (132, 76)), ((64, 64), (10, 600)), ((33, 35), (40, 32)), ((96, 60), (96, 60))]
    for i, encoding in enumerate(NEW_ENCODINGS):
        (dw, dh), (sw, sh) = sizes[i % len(sizes)]
        spec = _spec(dw, dh, order=("rgb", "bgr")[i % 2], imagenet=i % 3 == 1)
        frame = camera_frame(rng, encoding, sw, sh)
        if i % 2 and frame.dtype == np.uint16:
            frame = frame.astype(">u2")
        layout = TensorLayout.dense(fmt, dtype, 1, 3, dh, dw)
        if i % 3 == 2:
            layout = _padded(layout, tight=i % 2 == 1)
        try:
            gpp.check_layout(spec, layout, SCALE)
        except gpp.GpuPreprocessError:
            continue
        got = emulate_kernel(frame, encoding, spec, layout, SCALE)
        want = cpu_reference(cv_bridge_rgb8(frame, encoding), "rgb8", spec, layout, SCALE)
        assert np.array_equal(got, want), (fmt, dtype, encoding, frame.dtype)


def test_parameter_block_of_each_family() -> None:
    """What the kernel is told about the source: row bytes, byte order, YUV offsets, Bayer tile."""
    spec, layout = _spec(64, 64, order="bgr"), TensorLayout.dense("hwc4", "fp16", 1, 3, 64, 64)
    expect = {"rgba16": (100 * 8, (4, 2, 0)), "mono16": (200, (0, 0, 0)), "yuyv": (200, (2, 1, 0)),
              "nv21": (100, (2, 1, 0)), "bayer_grbg16": (200, (2, 1, 0)), "bayer_bggr8": (100, (2, 1, 0))}
    for encoding, (step, src_off) in expect.items():
        p = gpp.static_params(spec, layout, None)
        gpp.set_geometry(p, spec, Letterbox.fit(100, 50, 64, 64), encoding, big_endian=True)
        fmt = gpp.source_format(encoding)
        assert (p.src_step, tuple(p.src_off)[:3], p.src_w, p.src_h) == (step, src_off, 100, 50), encoding
        assert p.swap == (fmt.sample_bytes == 2)
    assert tuple(gpp.source_format("yuv422_yuy2").yuv_off) == (0, 1, 3)  # old names are aliases
    assert gpp.source_format("yuv422") == gpp.source_format("uyvy")
    p = gpp.static_params(spec, layout, None)
    gpp.set_geometry(p, spec, Letterbox.fit(100, 50, 64, 64), "bayer_gbrg8")
    assert [(p.bayer >> (2 * i)) & 3 for i in range(4)] == [1, 2, 0, 1]  # G B / R G
    assert set(pk.KERNEL_NAMES) == {f.family for f in gpp.SOURCE_FORMATS.values()}


def test_tap_tables_address_each_family_in_its_own_units() -> None:
    """Packed frames: byte offsets (pixel bytes, row bytes); the others: pixel and row indices."""
    x0, x1, _, _ = pk.axis_taps(100, 37, clamp=True)
    y0, _, _, _ = pk.axis_taps(50, 19, clamp=False)
    for encoding, (x_unit, y_unit, step) in {"rgb8": (3, 300, 300), "bgra16": (8, 800, 800),
                                              "mono16": (2, 200, 200), "yuyv": (1, 1, 200),
                                              "nv12": (1, 1, 100), "bayer_rggb16": (1, 1, 200)}.items():
        units = gpp.source_tables(gpp.source_format(encoding), 100)
        assert units == (x_unit, y_unit, step), encoding
        xtab, ytab = pk.tap_tables(100, 50, units[0], 37, 19, row_bytes=units[1])
        assert np.array_equal(xtab[:, 0], x0 * x_unit) and np.array_equal(xtab[:, 1], x1 * x_unit)
        assert np.array_equal(ytab[:, 0], y0 * y_unit)


# ---------------------------------------------------------------------------------------------------
# The CUDA source itself, compiled for the host with a few definitions in place of CUDA's built-ins and
# run thread by thread on the CPU: every family, layout, odd size and descriptor gives the bytes of
# cv_bridge + the CPU path (the GPU tests check the same on a GPU; this catches a kernel bug on CI).
CXX = shutil.which("g++") or shutil.which("c++")
F16_ASM = 'asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));'
HOST_PRELUDE = r"""
#include <cmath>
#include <cstring>
#define __device__
#define __forceinline__ inline
#define __global__
#define __launch_bounds__(n)
struct HostIdx { unsigned int x; };
static HostIdx blockIdx, blockDim, threadIdx;
struct int3 { int x, y, z; };
struct alignas(16) int4 { int x, y, z, w; };
struct alignas(8) uint2 { unsigned int x, y; };
struct alignas(16) uint4 { unsigned int x, y, z, w; };
inline int3 make_int3(int x, int y, int z) { return {x, y, z}; }
inline int4 make_int4(int x, int y, int z, int w) { return {x, y, z, w}; }
inline uint2 make_uint2(unsigned int x, unsigned int y) { return {x, y}; }
inline uint4 make_uint4(unsigned int x, unsigned int y, unsigned int z, unsigned int w) {
    return {x, y, z, w};
}
template <class T> inline T __ldg(const T* p) { return *p; }
inline unsigned int __umulhi(unsigned int a, unsigned int b) { return (unsigned int)((1ull * a * b) >> 32); }
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned int min(unsigned int a, unsigned int b) { return a < b ? a : b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline unsigned short host_f16(float f) {  // round to nearest even, as cvt.rn.f16.f32
    _Float16 h = (_Float16)f;
    unsigned short u;
    std::memcpy(&u, &h, 2);
    return u;
}
"""


def _host_launcher() -> str:
    table = ", ".join(f'{{"{name}", {name}}}' for name in pk.KERNEL_NAMES.values())
    return ("struct Entry { const char* name; void (*fn)(const PackParams); };\n"
            f"static const Entry kernels[] = {{{table}}};\n"
            'extern "C" int launch(const char* name, const PackParams* p, unsigned int blocks) {\n'
            "    for (const Entry& e : kernels) {\n"
            "        if (std::strcmp(e.name, name)) continue;\n"
            f"        blockDim.x = {pk.BLOCK_THREADS};\n"
            "        for (blockIdx.x = 0; blockIdx.x < blocks; ++blockIdx.x)\n"
            "            for (threadIdx.x = 0; threadIdx.x < blockDim.x; ++threadIdx.x) e.fn(*p);\n"
            "        return 0;\n"
            "    }\n"
            "    return 1;\n"
            "}\n")


@pytest.fixture(scope="module")
def host_kernels(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[int, int], ctypes.CDLL]:
    if CXX is None:
        pytest.skip("no C++ compiler: host run of the kernel source skipped")
    assert pk.KERNEL_SOURCE.count(F16_ASM) == 1  # the one device instruction, replaced for the host
    src = tmp_path_factory.mktemp("kernel_host") / "kernel_host.cpp"
    src.write_text(HOST_PRELUDE + pk.KERNEL_SOURCE.replace(F16_ASM, "h = host_f16(f);") + _struct_asserts()
                   + _host_launcher())
    libs = {}
    for es, cpg in pk.VARIANTS:
        lib = src.with_name(f"kernel_{es}_{cpg}.so")
        res = subprocess.run([str(CXX), "-std=c++17", "-O1", "-shared", "-fPIC", "-fno-strict-aliasing",
                              "-ffp-contract=off", f"-DDLA_ES={es}", f"-DDLA_CPG={cpg}",
                              f"-DDLA_CB={pk.CHUNK_BYTES[(es, cpg)]}", "-o", str(lib), str(src)],
                             capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr
        libs[(es, cpg)] = ctypes.CDLL(str(lib))
    return libs


def _aligned(data: np.ndarray) -> np.ndarray:
    """A copy of ``data``'s bytes at a 256-byte aligned address (as device staging is)."""
    raw = np.empty(data.nbytes + 256, np.uint8)
    start = -raw.ctypes.data % 256
    out = raw[start: start + data.nbytes]
    out[:] = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
    return out


def run_on_host(libs: dict[tuple[int, int], ctypes.CDLL], frame: np.ndarray, encoding: str, spec: InputSpec,
                layout: TensorLayout, scale: float | None) -> np.ndarray:
    """What GpuInputPath stages and launches, with the kernel running on the CPU; dst plus 64 guard bytes."""
    img = gpp.check_frame(frame, encoding, 1 << 14, 1 << 14)
    fmt = gpp.source_format(encoding)
    w, h = gpp.frame_size(img, encoding)
    lb = Letterbox.fit(w, h, spec.width, spec.height)
    unit, row, _ = gpp.source_tables(fmt, w)
    xtab, ytab = pk.tap_tables(w, h, unit, lb.new_w, lb.new_h, row_bytes=row)
    p = gpp.static_params(spec, layout, scale)
    gpp.set_geometry(p, spec, lb, encoding, big_endian=not img.dtype.isnative)
    keep = [_aligned(xtab), _aligned(ytab), _aligned(gpp.staged_bytes(img)),
            _aligned(np.full(layout.size + 64, 0xAB, np.uint8))]
    p.xtab, p.ytab, p.src, p.dst = (a.ctypes.data for a in keep)
    blocks, _ = pk.launch_geometry(p.work, pk.CHUNK_BYTES[(layout.elem_size, layout.vector)])
    name = pk.KERNEL_NAMES[fmt.family].encode()
    assert libs[(layout.elem_size, layout.vector)].launch(name, ctypes.byref(p), blocks) == 0
    return keep[3].copy()


@pytest.mark.parametrize("fmt,dtype", COMBOS)
def test_kernel_source_run_on_the_host_equals_cv_bridge_then_cpu_pack(
        host_kernels: dict[tuple[int, int], ctypes.CDLL], fmt: str, dtype: str) -> None:
    rng = np.random.default_rng(hash((fmt, dtype, "host")) % 2**32)
    # 192x108 -> 64x64 is the 1080p -> 640 ratio (every second tap of weight 0); 130x192 and 192x130 have it
    # in one direction only; the others in neither
    cases = [((64, 64), (192, 108), "dense"), ((64, 64), (130, 192), "padded"),
             ((64, 64), (192, 130), "dense"), ((67, 45), (132, 76), "padded"), ((33, 35), (40, 32), "tight"),
             ((16, 16), (6, 4), "dense"), ((16, 16), (2, 2), "tight")]
    for i, encoding in enumerate([*ENCODINGS, *NEW_ENCODINGS]):
        for k, ((dw, dh), (sw, sh), variant) in enumerate(cases):
            if not encodings.lookup(encoding).fits(sw, sh):
                continue
            spec = _spec(dw, dh, order=("rgb", "bgr")[(i + k) % 2], imagenet=(i + k) % 3 == 1)
            frame = camera_frame(rng, encoding, sw, sh)
            if (i + k) % 2 and frame.dtype == np.uint16:
                frame = frame.astype(">u2")
            layout = TensorLayout.dense(fmt, dtype, 1, 3, dh, dw)
            layout = layout if variant == "dense" else _padded(layout, tight=variant == "tight")
            try:
                gpp.check_layout(spec, layout, SCALE)
            except gpp.GpuPreprocessError:
                continue
            got = run_on_host(host_kernels, frame, encoding, spec, layout, SCALE)
            want = cpu_reference(cv_bridge_rgb8(frame, encoding), "rgb8", spec, layout, SCALE)
            where = (encoding, (sw, sh), variant, frame.dtype.str)
            assert (got[layout.size:] == 0xAB).all(), ("wrote past the end", *where)
            assert np.array_equal(got[: layout.size], want), where

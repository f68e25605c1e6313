"""GPU preprocessing path, everything that needs no GPU.

- The kernel's integer resize (host tap tables + OpenCV's 8-bit arithmetic) equals ``cv2.resize``.
- A numpy emulation of the whole kernel (resize, normalisation, quantisation and the chunk addressing of
  ``pack_chunk``) equals the CPU reference ``Preprocessor`` + ``tensor_format.pack`` byte for byte, for
  every format, dtype, encoding, odd sizes and padded descriptors.
- The ctypes parameter block matches the CUDA struct (nvcc, when installed), and the source compiles.
- Layouts, scales and frames the GPU path cannot take fail before any CUDA call.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import cv2
import numpy as np
import pytest

from dla_infer_node.backends import gpu_preprocess as gp
from dla_infer_node.backends import gpu_preprocess_params as gpp
from dla_infer_node.backends import preprocess_kernel as pk
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


def _padded(layout: TensorLayout) -> TensorLayout:
    """The same tensor with larger strides and a size that is not a multiple of 16 (tail chunk)."""
    a, line, surface, batch = layout.strides
    line2 = line + 64
    planes = batch // surface
    surface2 = line2 * layout.h + 128
    batch2 = surface2 * planes + 256
    return TensorLayout.from_descriptor(layout.format, layout.dtype, layout.n, layout.c, layout.h, layout.w,
                                        (a, line2, surface2, batch2), batch2 * layout.n + 40)


def emulate_kernel(img: np.ndarray, encoding: str, spec: InputSpec, layout: TensorLayout,
                   scale: float | None) -> np.ndarray:
    """What the kernel writes, computed in numpy from the same parameter block."""
    h, w = img.shape[:2]
    lb = Letterbox.fit(w, h, spec.width, spec.height)
    p = gpp.static_params(spec, layout, scale)
    gpp.set_geometry(p, spec, lb, encoding)
    small = pk.emulate_resize(img, lb.new_w, lb.new_h)
    canvas = np.empty((p.c, p.h, p.w), np.float32)
    for ch in range(p.c):
        canvas[ch].fill(np.float32(p.pad[ch]))
        v = small[:, :, p.src_off[ch]]
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
    # the addressing of pack_chunk, element by element
    o = np.arange(layout.size // es, dtype=np.int64) * es
    n = o // p.batch
    r = o - n * p.batch
    g_ = r // p.surface
    r = r - g_ * p.surface
    y = r // p.line
    e = (r - y * p.line) // es
    x, k = e // cpg, e % cpg
    chan = g_ * cpg + k
    ok = (n < p.n) & (g_ < p.groups) & (y < p.h) & (x < p.w) & (chan < p.c)
    out = np.zeros(layout.size, np.uint8)
    elems = out[: o.size * es].view("<u2" if es == 2 else np.uint8)
    elems[ok] = q[chan[ok], y[ok], x[ok]]
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
        for layout in (dense, _padded(dense)):
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
    (np.zeros((10, 10, 3), np.uint8), "yuv422", "unsupported encoding"),
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

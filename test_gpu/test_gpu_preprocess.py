"""GPU preprocessing kernel on a real GPU (run by scripts/test_gpu.sh): the same bytes as the CPU reference
(``Preprocessor`` + ``tensor_format.pack``) for every format, dtype, encoding, odd sizes and descriptors
(padded, or ending at the last element), every pad byte written, nothing past the end, bad input refused
before any launch, stream ordering without host syncs.

Encodings other than rgb8/bgr8/rgba8/bgra8/mono8 (16-bit, YUYV/UYVY, NV12/NV21, Bayer) are read by the
kernel as they come; the reference is cv_bridge's conversion of the whole frame (``cv2.cvtColor`` with
its code in the source depth, then 16 -> 8 bit by 255/65535) followed by the same CPU preprocess. A
mismatch reports its largest error too (fp16: 1e-3 and int8: one quantisation step would not be seen
by the network).

Set ``DLA_GPU_REPORT=<file.json>`` to write the measured per-format maximum errors.
"""

from __future__ import annotations

import ctypes
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

cuda_runtime = pytest.importorskip("cuda.bindings.runtime")
pytest.importorskip("cuda.core")

from dla_infer_node.backends import cuda_runtime as cr  # noqa: E402
from dla_infer_node.backends import gpu_preprocess as gp  # noqa: E402
from dla_infer_node.backends import gpu_preprocess_params as gpp  # noqa: E402
from dla_infer_node.core import encodings  # noqa: E402
from dla_infer_node.core.color_convert import to_rgb8 as cv_bridge_rgb8  # noqa: E402  (cv_bridge's way)
from dla_infer_node.core.errors import InputError  # noqa: E402
from dla_infer_node.core.model_meta import InputSpec  # noqa: E402
from dla_infer_node.core.preprocess import Preprocessor  # noqa: E402
from dla_infer_node.core.synth_frames import frame_in  # noqa: E402
from dla_infer_node.core.tensor_format import pack, unpack  # noqa: E402
from dla_infer_node.core.tensor_layout import TensorLayout  # noqa: E402

COMBOS = [("linear", "fp16"), ("linear", "int8"), ("hwc4", "fp16"), ("hwc4", "int8"),
          ("chw16", "fp16"), ("chw32", "int8")]
CHANNELS = {"rgb8": 3, "bgr8": 3, "rgba8": 4, "bgra8": 4, "mono8": 1}
SCALE = 2.6 / 127.0  # covers the ImageNet-normalised range
POISON = 0xAB
REPORT: dict[str, dict[str, Any]] = {}


def _has_gpu() -> bool:
    if os.environ.get("DLA_TEST_FAKE_DRIVER") == "1":  # the fake libcuda cannot run kernels
        return False
    try:
        err, n = cuda_runtime.cudaGetDeviceCount()
        return int(err) == 0 and n > 0
    except Exception:
        return False


pytestmark = pytest.mark.skipif(not _has_gpu(), reason="no CUDA GPU")


@pytest.fixture(scope="module")
def stream() -> Iterator[cr.Stream]:
    cr.make_context_current(0)
    s = cr.Stream()
    yield s
    s.synchronize()
    s.destroy()
    path = os.environ.get("DLA_GPU_REPORT")
    if path and REPORT:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(REPORT, f, indent=2, sort_keys=True)


def _spec(w: int, h: int, imagenet: bool, order: str) -> InputSpec:
    if imagenet:
        return InputSpec("images", w, h, order, (123.675, 116.28, 103.53), (58.395, 57.12, 57.375), 114)
    return InputSpec("images", w, h, order, (0.0, 0.0, 0.0), (255.0, 255.0, 255.0), 114)


def _padded(layout: TensorLayout, tight: bool = False) -> TensorLayout:
    """Larger strides and a tail past the batch, or (``tight``) a size ending at the last element."""
    a, line, surface, batch = layout.strides
    line2 = line + 64
    surface2 = line2 * layout.h + 128
    batch2 = surface2 * (batch // surface) + 256
    end = (batch // surface - 1) * surface2 + (layout.h - 1) * line2 + layout.w * a
    return TensorLayout.from_descriptor(layout.format, layout.dtype, 1, layout.c, layout.h, layout.w,
                                        (a, line2, surface2, batch2), end if tight else batch2 + 40)


def _download(ptr: int, size: int) -> np.ndarray:
    out = np.empty(size, np.uint8)
    kind = cuda_runtime.cudaMemcpyKind.cudaMemcpyDeviceToHost
    err = cuda_runtime.cudaMemcpy(out.ctypes.data, ptr, size, kind)
    assert int(err[0]) == 0, err
    return out


def _real_byte_mask(layout: TensorLayout) -> np.ndarray:
    """True on the bytes of real elements (channels < C); every other byte must be written as zero."""
    marker = np.zeros(layout.size, np.uint8)
    elem = layout.element_view(marker).view(f"u{layout.elem_size}")
    top = np.iinfo(elem.dtype).max
    if layout.format in ("linear", "hwc4"):
        elem[...] = top
    else:  # (N, G, V, H, W): only the first C of the G*V channel slots are real
        v = layout.vector
        for c in range(layout.c):
            elem[:, c // v, c % v] = top
    return marker != 0


class Poisoned:
    """A device buffer of ``layout.size`` bytes filled with POISON before each use."""

    def __init__(self, layout: TensorLayout, stream: cr.Stream) -> None:
        self.layout, self.stream = layout, stream
        self.ptr = cr.malloc(layout.size + 64, what="test dst")

    def poison(self) -> None:
        cr.memset_async(self.ptr, POISON, self.layout.size + 64, self.stream.handle)

    def read(self) -> np.ndarray:
        self.stream.synchronize()
        return _download(self.ptr, self.layout.size + 64)

    def free(self) -> None:
        cr.free(self.ptr)


def _frames(rng: np.random.Generator, count: int) -> list[tuple[np.ndarray, str]]:
    sizes = [(1920, 1080), (1, 1), (7, 3), (3, 900), (1000, 2), (641, 479), (99, 101), (640, 640)]
    out = []
    for i in range(count):
        w, h = sizes[i] if i < len(sizes) else (int(rng.integers(1, 1921)), int(rng.integers(1, 1081)))
        enc = list(CHANNELS)[i % len(CHANNELS)]
        out.append((rng.integers(0, 256, (h, w, CHANNELS[enc]), dtype=np.uint8), enc))
    return out


def _compare(got: np.ndarray, want: np.ndarray, layout: TensorLayout, key: str) -> None:
    real = _real_byte_mask(layout)
    assert (got[layout.size:] == POISON).all(), f"{key}: wrote past the end of the buffer"
    got = got[: layout.size]
    assert (got[~real] == 0).all(), f"{key}: pad bytes not zero"
    scale = SCALE if layout.dtype == "int8" else None
    g, w = unpack(got, layout, scale), unpack(want, layout, scale)
    err = float(np.abs(g - w).max())
    entry = REPORT.setdefault(key, {"max_abs_err": 0.0, "mismatched_bytes": 0, "bytes": 0, "frames": 0})
    entry["max_abs_err"] = max(entry["max_abs_err"], err)
    entry["mismatched_bytes"] += int((got != want).sum())
    entry["bytes"] += int(layout.size)
    entry["frames"] += 1
    tol = SCALE * 1.0001 if layout.dtype == "int8" else 1e-3
    assert err <= tol, f"{key}: max error {err} > {tol}"
    assert np.array_equal(got, want), f"{key}: {int((got != want).sum())} bytes differ from the CPU path"


@pytest.mark.parametrize("fmt,dtype", COMBOS)
@pytest.mark.parametrize("dst", [(640, 640), (67, 45), (33, 97)])
def test_matches_cpu_reference(stream: cr.Stream, fmt: str, dtype: str, dst: tuple[int, int]) -> None:
    rng = np.random.default_rng(hash((fmt, dtype, dst)) % 2**32)
    variants = (("dense", False, "rgb"), ("padded", True, "bgr"), ("tight", False, "bgr"))
    for variant, imagenet, order in variants:
        spec = _spec(dst[0], dst[1], imagenet, order)
        layout = TensorLayout.dense(fmt, dtype, 1, 3, dst[1], dst[0])
        if variant != "dense":
            layout = _padded(layout, tight=variant == "tight")
        scale = SCALE if dtype == "int8" else None
        buf = Poisoned(layout, stream)
        with gp.GpuInputPath(spec, layout, scale, 1920, 1080) as path:
            for img, enc in _frames(rng, 10):  # the geometry changes every frame: tables re-uploaded
                buf.poison()
                lb = path.enqueue(img, enc, buf.ptr, stream.handle)
                x, lb_cpu = Preprocessor(spec)(img, enc)
                assert lb == lb_cpu
                _compare(buf.read(), pack(x, layout, scale=scale), layout, f"{fmt}/{dtype}")
        buf.free()


def test_strided_frame(stream: cr.Stream) -> None:
    spec = _spec(640, 640, True, "rgb")
    layout = TensorLayout.dense("hwc4", "int8", 1, 3, 640, 640)
    big = np.random.default_rng(5).integers(0, 256, (1100, 1930, 3), dtype=np.uint8)
    view = big[10:1090, 3:1923]  # a 1920x1080 frame with a 5790-byte row step
    buf = Poisoned(layout, stream)
    with gp.GpuInputPath(spec, layout, SCALE, 1920, 1080) as path:
        buf.poison()
        path.enqueue(view, "rgb8", buf.ptr, stream.handle)
        x, _ = Preprocessor(spec)(view, "rgb8")
        _compare(buf.read(), pack(x, layout, scale=SCALE), layout, "hwc4/int8")
    buf.free()


def test_back_to_back_frames_without_host_sync(stream: cr.Stream) -> None:
    """Several frames enqueued into different buffers with no sync in between all come out right."""
    spec = _spec(320, 320, False, "rgb")
    layout = TensorLayout.dense("chw16", "fp16", 1, 3, 320, 320)
    rng = np.random.default_rng(11)
    frames = _frames(rng, 6)
    bufs = [Poisoned(layout, stream) for _ in frames]
    with gp.GpuInputPath(spec, layout, None, 1920, 1080) as path:
        for b in bufs:
            b.poison()
        for (img, enc), b in zip(frames, bufs, strict=True):
            path.enqueue(img, enc, b.ptr, stream.handle)
        for (img, enc), b in zip(frames, bufs, strict=True):
            x, _ = Preprocessor(spec)(img, enc)
            _compare(b.read(), pack(x, layout), layout, "chw16/fp16")
    for b in bufs:
        b.free()


@pytest.mark.parametrize("image,encoding", [
    (np.zeros((1081, 100, 3), np.uint8), "rgb8"),     # taller than the staging buffer
    (np.zeros((10, 1921, 4), np.uint8), "bgra8"),     # wider
    (np.zeros((10, 10, 3), np.uint8), "nv24"),        # unsupported encoding
    (np.zeros((10, 10, 3), np.uint8), "yuv422"),      # not the (H, W, 2) of UYVY
    (np.zeros((10, 9, 2), np.uint8), "yuyv"),         # odd width
    (np.zeros((16, 10), np.uint8), "nv12"),           # not H*3/2 rows
    (np.zeros((10, 10), np.uint8), "bayer_rggb16"),   # 8-bit samples for a 16-bit encoding
    (np.zeros((0, 10, 3), np.uint8), "rgb8"),         # zero size
    (np.zeros((10, 10, 3), np.uint8), "mono8"),       # channels disagree with the encoding
])
def test_bad_input_fails_before_launch(stream: cr.Stream, image: np.ndarray, encoding: str) -> None:
    spec = _spec(64, 64, False, "rgb")
    layout = TensorLayout.dense("linear", "fp16", 1, 3, 64, 64)
    buf = Poisoned(layout, stream)
    with gp.GpuInputPath(spec, layout, None, 1920, 1080) as path:
        buf.poison()
        stream.synchronize()
        with pytest.raises(InputError) as info:
            path.enqueue(image, encoding, buf.ptr, stream.handle)
        assert info.value.stage == gp.STAGE
        assert (buf.read() == POISON).all(), "something was launched for a bad frame"
    buf.free()


def test_close_is_idempotent_and_final(stream: cr.Stream) -> None:
    spec = _spec(64, 64, False, "rgb")
    layout = TensorLayout.dense("linear", "int8", 1, 3, 64, 64)
    path = gp.GpuInputPath(spec, layout, SCALE, 64, 64)
    buf = Poisoned(layout, stream)
    path.enqueue(np.zeros((64, 64, 3), np.uint8), "rgb8", buf.ptr, stream.handle)
    stream.synchronize()
    path.close()
    path.close()
    with pytest.raises(InputError):
        path.enqueue(np.zeros((64, 64, 3), np.uint8), "rgb8", buf.ptr, stream.handle)
    buf.free()


def test_parameter_block_size_matches_the_kernel() -> None:
    from cuda.bindings import driver

    if not hasattr(driver, "cuFuncGetParamInfo"):
        pytest.skip("cuFuncGetParamInfo not in this cuda.bindings")
    spec = _spec(64, 64, False, "rgb")
    for fmt, dtype in COMBOS:
        layout = TensorLayout.dense(fmt, dtype, 1, 3, 64, 64)
        with gp.GpuInputPath(spec, layout, SCALE, 64, 64) as path:
            err, offset, size = driver.cuFuncGetParamInfo(path._function, 0)
            assert int(err) == 0
            assert (offset, size) == (0, ctypes.sizeof(gp.pk.PackParams)), (fmt, dtype)


# ---------------------------------------------------------------------------------------------------
# Every other encoding, read directly by the kernel, against cv_bridge + the CPU path

NEW_ENCODINGS = [e for e in gpp.SOURCE_FORMATS if e not in CHANNELS]


def _against_cv_bridge(path: gp.GpuInputPath, buf: Poisoned, frame: np.ndarray, encoding: str,
                       spec: InputSpec, scale: float | None, key: str) -> None:
    """One frame through the kernel vs cv_bridge's RGB of it through the CPU path."""
    buf.poison()
    lb = path.enqueue(frame, encoding, buf.ptr, buf.stream.handle)
    x, lb_cpu = Preprocessor(spec)(cv_bridge_rgb8(frame, encoding), "rgb8")
    assert lb == lb_cpu
    _compare(buf.read(), pack(x, buf.layout, scale=scale), buf.layout, key)


@pytest.mark.parametrize("fmt,dtype", COMBOS)
@pytest.mark.parametrize("encoding", NEW_ENCODINGS)
def test_encoding_matches_cv_bridge_then_cpu_path(stream: cr.Stream, encoding: str, fmt: str,
                                                  dtype: str) -> None:
    rng = np.random.default_rng(hash((encoding, fmt, dtype)) % 2**32)
    sizes = [(w, h) for w, h in [(1920, 1080), (642, 482), (130, 22), (6, 4), (2, 2), (7, 5), (1, 1)]
             if encodings.lookup(encoding).fits(w, h)]  # odd sizes only where the layout allows them
    cases = (("dense", False, "rgb", (640, 640)), ("padded", True, "bgr", (67, 45)),
             ("tight", False, "rgb", (33, 35)))
    for variant, imagenet, order, dst in cases:
        spec = _spec(dst[0], dst[1], imagenet, order)
        layout = TensorLayout.dense(fmt, dtype, 1, 3, dst[1], dst[0])
        layout = layout if variant == "dense" else _padded(layout, tight=variant == "tight")
        scale = SCALE if dtype == "int8" else None
        buf = Poisoned(layout, stream)
        with gp.GpuInputPath(spec, layout, scale, 1920, 1080) as path:
            for k, (w, h) in enumerate(sizes):
                shape, dt = gpp.frame_shape(encoding, w, h)
                frame = rng.integers(0, np.iinfo(dt).max + 1, shape, dtype=dt)
                if dt == np.uint16 and k % 2:
                    frame = frame.astype(">u2")  # is_bigendian frames carry their byte order in the dtype
                _against_cv_bridge(path, buf, frame, encoding, spec, scale, f"{encoding}/{fmt}/{dtype}")
        buf.free()


def test_encoding_changes_between_frames(stream: cr.Stream) -> None:
    """One path, frames of different families back to back (kernel and tables follow the frame)."""
    spec = _spec(320, 320, True, "rgb")
    layout = TensorLayout.dense("chw16", "fp16", 1, 3, 320, 320)
    rng = np.random.default_rng(3)
    buf = Poisoned(layout, stream)
    with gp.GpuInputPath(spec, layout, None, 1920, 1080) as path:
        for encoding in ("nv12", "rgb8", "bayer_gbrg16", "yuyv", "mono16", "nv12", "bayer_bggr8", "rgb8"):
            shape, dt = gpp.frame_shape(encoding, 640, 480)
            frame = rng.integers(0, np.iinfo(dt).max + 1, shape, dtype=dt)
            _against_cv_bridge(path, buf, frame, encoding, spec, None, "mixed/chw16/fp16")
    buf.free()


# ---------------------------------------------------------------------------------------------------
# Through the cuDLA backend and the DLA EMULATOR (fixtures from conftest.py)

def _backends(sidecar: Path, cuda: Any) -> tuple[Any, Any]:
    from dla_infer_node.artifact.sidecar import load_artifact
    from dla_infer_node.backends.cudla import CudlaBackend

    art = load_artifact(sidecar)
    return (CudlaBackend(art, cuda=cuda, preprocess_device="gpu"),
            CudlaBackend(art, cuda=cuda, preprocess_device="cpu"))


@pytest.mark.parametrize(("in_fmt", "in_dt"), COMBOS)
def test_backend_gpu_path_equals_cpu_path(emu: Any, cuda: Any, artifacts_dir: Path, in_fmt: str,
                                          in_dt: str) -> None:
    """The registered input buffer (read back through echo) is the same with either input path."""
    from emulator import cases

    out_fmt, out_dt = ("chw16", "fp16") if in_dt == "fp16" else ("chw32", "int8")
    art = cases.echo_artifact(artifacts_dir / "gpu_path", in_fmt, in_dt, out_fmt, out_dt)
    gpu, cpu = _backends(art.sidecar, cuda)
    try:
        rng = np.random.default_rng(2)
        for img in (cases.make_frame(3, 160, 90).image, cases.make_frame(9, 256, 192, unit=2).image,
                    rng.integers(0, 256, (1080, 1920, 3), dtype=np.uint8)):
            g, c = gpu.infer(img, "rgb8"), cpu.infer(img, "rgb8")
            assert g.letterbox == c.letterbox
            err = float(np.abs(g.tensors[0] - c.tensors[0]).max())
            assert err <= (1e-3 if in_dt == "fp16" else cases.IN_SCALE * 1.0001), err
            entry = REPORT.setdefault(f"backend_echo/{in_fmt}/{in_dt}", {"max_abs_err": 0.0})
            entry["max_abs_err"] = max(entry["max_abs_err"], err)
    finally:
        gpu.close()
        cpu.close()


@pytest.mark.parametrize(("in_fmt", "in_dt"), [("hwc4", "int8"), ("chw16", "fp16"), ("linear", "fp16")])
def test_backend_gpu_path_oracle_finds_the_rectangles(emu: Any, cuda: Any, artifacts_dir: Path, in_fmt: str,
                                                      in_dt: str) -> None:
    from dla_infer_node.core.decode import make_decoder
    from emulator import cases

    art = cases.oracle_artifact(artifacts_dir / "gpu_path", in_fmt, in_dt, "chw16", "fp16", "raw")
    gpu, cpu = _backends(art.sidecar, cuda)
    cpu.close()
    try:
        decoder = make_decoder(gpu.metadata)
        for fr in [cases.make_frame(s) for s in range(3)] + [cases.make_frame(9, 256, 192, unit=2)]:
            raw = gpu.infer(fr.image, "rgb8")
            det = decoder(raw.tensors, 0.5, 0.45, 100)
            why = cases.match_detections(fr, raw.letterbox.to_source(det.boxes), det.class_ids, 2.5)
            assert why is None, why
    finally:
        gpu.close()


@pytest.mark.parametrize("encoding", ["yuyv", "uyvy", "nv12", "nv21", "bayer_rggb8", "bayer_bggr8",
                                      "bayer_gbrg8", "bayer_grbg8", "bayer_rggb16", "bayer_grbg16",
                                      "rgb16", "bgra16"])
def test_backend_gpu_path_camera_encodings_detect_like_rgb8(emu: Any, cuda: Any, artifacts_dir: Path,
                                                            encoding: str) -> None:
    """The cudla backend through the DLA EMULATOR's rectangle oracle: a scene sent as a camera of this
    encoding gives the detections of its rgb8 twin (same classes, boxes within 1 px) and the scene's.

    Bayer: within one network pixel (2 px of these 2:1 frames, plus the decode's float error). The oracle
    takes only pixels within 3 of a class colour, and a demosaiced edge pixel mixes both sides (cv2 gives
    the same), so the rectangle it finds loses that edge line: 2.002 px measured on an H100, 0 for the
    other encodings."""
    from dla_infer_node.core.decode import make_decoder
    from emulator import cases

    art = cases.oracle_artifact(artifacts_dir / "gpu_path", "hwc4", "int8", "chw16", "fp16", "raw")
    gpu, cpu = _backends(art.sidecar, cuda)
    cpu.close()
    try:
        decoder = make_decoder(gpu.metadata)
        for fr in [cases.make_frame(s, 256, 192, unit=2) for s in range(4)]:
            found = {}
            camera = frame_in(fr.image, encoding, pad=4, bigendian=encoding.endswith("16"))  # as a message
            for enc, img in (("rgb8", fr.image), (encoding, camera)):
                raw = gpu.infer(img, enc)
                det = decoder(raw.tensors, 0.5, 0.45, 100)
                found[enc] = (raw.letterbox.to_source(det.boxes), det.class_ids)
            boxes, ids = found[encoding]
            why = cases.match_detections(fr, boxes, ids, 2.5 * 2)
            assert why is None, why
            twin_boxes, twin_ids = found["rgb8"]
            order, twin = np.lexsort(boxes.T[::-1]), np.lexsort(twin_boxes.T[::-1])
            assert np.array_equal(ids[order], twin_ids[twin])
            err = float(np.abs(boxes[order] - twin_boxes[twin]).max()) if len(boxes) else 0.0
            entry = REPORT.setdefault(f"oracle_vs_rgb8/{encoding}", {"max_box_px": 0.0})
            entry["max_box_px"] = max(entry["max_box_px"], err)
            assert err <= (2.05 if encoding.startswith("bayer") else 1.0), (encoding, err)
    finally:
        gpu.close()

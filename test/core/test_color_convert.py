"""Every encoding converts to the RGB cv_bridge gives, through the node's own path.

For each encoding a frame is made from a known RGB picture (``core.synth_frames``), read the way the node
reads a message (``image_from_fields``: step padding, byte order), and compared with ``cv2.cvtColor`` under
cv_bridge's colour code (written out here, apart from the package's table, so a wrong table entry fails):
- the conversion function (debug overlay, ``detect``) gives those bytes exactly;
- the CPU preprocess gives the tensor of preprocessing those bytes as rgb8: exactly where the frame is
  gathered before it is converted (the odd-factor shortcut), exactly when converted whole; 16-bit Bayer is
  scaled to 8 bits before its demosaic on the shortcut, at most 1/255 (one 8-bit level) away.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest
from _core_fixtures import build_raw_model, write_metadata

from dla_infer_node.core import encodings
from dla_infer_node.core.color_convert import to_bgr8, to_rgb8
from dla_infer_node.core.detections import Detections
from dla_infer_node.core.image_io import decode_compressed, draw_detections, image_from_fields
from dla_infer_node.core.model_meta import InputSpec
from dla_infer_node.core.preprocess import Preprocessor
from dla_infer_node.core.synth_frames import fields_in, frame_in, pixels_in

REPO = Path(__file__).resolve().parents[2]
# cv_bridge (cv_bridge.cpp, getConversionCodes) -> RGB; NV12/NV21 are OpenCV's own (cv_bridge has none)
CV_BRIDGE_TO_RGB = {
    "yuyv": cv2.COLOR_YUV2RGB_YUY2, "yuv422_yuy2": cv2.COLOR_YUV2RGB_YUY2,
    "uyvy": cv2.COLOR_YUV2RGB_UYVY, "yuv422": cv2.COLOR_YUV2RGB_UYVY,
    "nv12": cv2.COLOR_YUV2RGB_NV12, "nv21": cv2.COLOR_YUV2RGB_NV21,
    "bayer_rggb8": cv2.COLOR_BayerBG2RGB, "bayer_bggr8": cv2.COLOR_BayerRG2RGB,
    "bayer_gbrg8": cv2.COLOR_BayerGR2RGB, "bayer_grbg8": cv2.COLOR_BayerGB2RGB,
    "bayer_rggb16": cv2.COLOR_BayerBG2RGB, "bayer_bggr16": cv2.COLOR_BayerRG2RGB,
    "bayer_gbrg16": cv2.COLOR_BayerGR2RGB, "bayer_grbg16": cv2.COLOR_BayerGB2RGB,
    "rgb8": None, "bgr8": cv2.COLOR_BGR2RGB, "rgba8": cv2.COLOR_RGBA2RGB, "bgra8": cv2.COLOR_BGRA2RGB,
    "mono8": cv2.COLOR_GRAY2RGB, "8UC1": cv2.COLOR_GRAY2RGB, "8UC3": cv2.COLOR_BGR2RGB,
    "8UC4": cv2.COLOR_BGRA2RGB,
    "rgb16": None, "bgr16": cv2.COLOR_BGR2RGB, "rgba16": cv2.COLOR_RGBA2RGB, "bgra16": cv2.COLOR_BGRA2RGB,
    "mono16": cv2.COLOR_GRAY2RGB,
}
ALL = sorted(CV_BRIDGE_TO_RGB)


def picture(w: int, h: int, seed: int = 0) -> np.ndarray:
    """A known RGB picture with smooth areas and hard edges (what the detector sees)."""
    rng = np.random.default_rng(seed)
    img = cv2.GaussianBlur(rng.integers(0, 256, (h, w, 3), dtype=np.uint8), (0, 0), 1.5)
    cv2.rectangle(img, (w // 5, h // 4), (w // 2, h // 2), (250, 30, 20), -1)
    cv2.circle(img, (2 * w // 3, 2 * h // 3), min(w, h) // 6, (10, 200, 240), -1)
    return np.asarray(img, np.uint8)


def cv_bridge_rgb8(values: np.ndarray, encoding: str) -> np.ndarray:
    """cv_bridge's toCvCopy(msg, 'rgb8'): cvtColor at the source depth, then 16 -> 8 bits by 255/65535."""
    code = CV_BRIDGE_TO_RGB[encoding]
    native = np.ascontiguousarray(values.astype(values.dtype.newbyteorder("=")))
    src = native[:, :, 0] if native.shape[2] == 1 else native
    rgb = src if code is None else cv2.cvtColor(src, code)
    if rgb.dtype == np.uint16:
        rgb = np.asarray(rgb, np.float64) * (255.0 / 65535.0)
        rgb = np.rint(rgb).astype(np.uint8)  # convertTo rounds to nearest; no value lies on a half
    return rgb


@pytest.mark.parametrize("encoding", ALL)
@pytest.mark.parametrize(("pad", "bigendian"), [(0, False), (6, True)])
def test_conversion_is_cv_bridge_s(encoding: str, pad: int, bigendian: bool) -> None:
    rgb = picture(40, 30)
    frame = frame_in(rgb, encoding, pad=pad, bigendian=bigendian)
    want = cv_bridge_rgb8(frame, encoding)
    assert np.array_equal(to_rgb8(frame, encoding), want)
    assert np.array_equal(to_bgr8(frame, encoding), want[:, :, ::-1])
    # the debug overlay draws on the same conversion
    assert np.array_equal(draw_detections(frame, encoding, Detections.empty(), ["a"]), want[:, :, ::-1])


@pytest.mark.parametrize("encoding", ALL)
def test_frames_carry_the_picture(encoding: str) -> None:
    """The generated frames are the picture as such a camera would send it (what later tests rely on)."""
    rgb = picture(40, 30)
    err = np.abs(to_rgb8(frame_in(rgb, encoding), encoding).astype(int) - rgb)
    if encoding.startswith(("mono", "8UC1")):
        err = np.abs(to_rgb8(frame_in(rgb, encoding), encoding).astype(int)
                     - cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY)[:, :, None])
    if encoding in ("rgb8", "bgr8", "rgba8", "bgra8", "8UC3", "8UC4", "rgb16", "bgr16", "rgba16", "bgra16",
                    "mono8", "8UC1", "mono16"):
        assert err.max() == 0
    else:  # YUV's 8-bit video range and shared chroma, and Bayer's interpolation, lose a little
        assert err.mean() < 10
        flat = np.full((30, 40, 3), (200, 40, 90), np.uint8)  # one colour: only YUV's rounding is left
        assert np.abs(to_rgb8(frame_in(flat, encoding), encoding).astype(int) - flat).max() <= 3


SPEC = InputSpec(name="images", width=64, height=48, channel_order="rgb", mean=(0.0, 0.0, 0.0),
                 std=(255.0, 255.0, 255.0), pad_value=114)


@pytest.mark.parametrize("encoding", ALL)
@pytest.mark.parametrize("size", [(192, 108), (320, 240), (96, 54), (70, 46)])
def test_preprocess_gives_the_tensor_of_cv_bridge_s_rgb(encoding: str, size: tuple[int, int]) -> None:
    """192x108 -> 64x36 and 320x240 -> 64x48 are odd factors (3x, 5x: gathered, then converted), 96x54 is
    1.5x and 70x46 barely shrinks (converted whole, then resized)."""
    w, h = size
    frame = frame_in(picture(w, h, seed=w), encoding, pad=4, bigendian=True)
    pre = Preprocessor(SPEC)
    tensor, lb = pre(frame, encoding)
    want, want_lb = Preprocessor(SPEC)(cv_bridge_rgb8(frame, encoding), "rgb8")
    assert (lb.src_w, lb.src_h, lb.new_w, lb.new_h, lb.pad_x, lb.pad_y) == (
        want_lb.src_w, want_lb.src_h, want_lb.new_w, want_lb.new_h, want_lb.pad_x, want_lb.pad_y)
    gathered = "gathered" in pre.conversion_path(frame, encoding)  # Bayer: after a whole-frame demosaic
    packed8 = encodings.lookup(encoding).family == encodings.PACKED and encodings.lookup(encoding).bits == 8
    assert gathered == (size in ((192, 108), (320, 240)) and not packed8)
    # normalize()'s float rounding differs by <1e-7 with the plane's range; an 8-bit level is 1/255
    bayer16 = encoding.startswith("bayer") and encoding.endswith("16")
    tolerance = 1 / 255 + 1e-6 if gathered and bayer16 else 1e-6
    assert np.abs(tensor - want).max() <= tolerance


@pytest.mark.parametrize("encoding", ["yuyv", "uyvy", "nv12", "nv21", "bayer_gbrg8", "bayer_bggr16"])
@pytest.mark.parametrize("size", [(210, 126), (350, 210)])
def test_gather_with_odd_sized_chroma_planes_is_exact(encoding: str, size: tuple[int, int]) -> None:
    """210x126 -> 70x42 (3x) and 350x210 (5x): the NV chroma plane (105x63, 175x105) has odd sides,
    where OpenCV's nearest-exact offsets round differently than for even ones."""
    spec = InputSpec(name="images", width=70, height=42, channel_order="rgb", mean=(0.0, 0.0, 0.0),
                     std=(255.0, 255.0, 255.0), pad_value=114)
    w, h = size
    frame = frame_in(picture(w, h, seed=h), encoding, pad=2)
    pre = Preprocessor(spec)
    tensor, lb = pre(frame, encoding)
    assert "gathered" in pre.conversion_path(frame, encoding)
    assert (lb.new_w, lb.new_h, lb.pad_x, lb.pad_y) == (70, 42, 0, 0)
    want, _ = Preprocessor(spec)(cv_bridge_rgb8(frame, encoding), "rgb8")
    tolerance = 1 / 255 + 1e-6 if encoding.endswith("16") else 1e-6
    assert np.abs(tensor - want).max() <= tolerance


def test_preprocess_of_1080p_yuyv_nv12_bayer_is_convert_then_letterbox() -> None:
    """The camera case: 1920x1080 into the shipped model's 640x512 (3x, gathered)."""
    spec = InputSpec(name="images", width=640, height=512, channel_order="rgb", mean=(0.0, 0.0, 0.0),
                     std=(255.0, 255.0, 255.0), pad_value=114)
    rgb = picture(1920, 1080, seed=3)
    for encoding in ("yuyv", "nv12", "bayer_rggb8", "mono16"):
        frame = frame_in(rgb, encoding)
        pre = Preprocessor(spec)
        tensor, _ = pre(frame, encoding)
        assert "gathered" in pre.conversion_path(frame, encoding)
        want, _ = Preprocessor(spec)(cv_bridge_rgb8(frame, encoding), "rgb8")
        assert np.abs(tensor - want).max() <= 1e-6, encoding


def test_16_bit_png_is_scaled_as_cv_bridge_scales_mono16() -> None:
    rng = np.random.default_rng(5)
    thermal = rng.integers(0, 65536, (24, 32), dtype=np.uint16)
    ok, png = cv2.imencode(".png", thermal)
    assert ok
    out, enc = decode_compressed(png.tobytes())
    want = np.rint(thermal * (255.0 / 65535.0)).astype(np.uint8)
    assert enc == "bgr8" and out.dtype == np.uint8 and np.array_equal(out, np.dstack([want] * 3))
    colour = rng.integers(0, 65536, (24, 32, 3), dtype=np.uint16)
    ok, png = cv2.imencode(".png", colour)
    out, _ = decode_compressed(png.tobytes())
    assert np.array_equal(out, np.rint(colour * (255.0 / 65535.0)).astype(np.uint8))


def test_message_fields_round_trip() -> None:
    rgb = picture(8, 6)
    f = fields_in(rgb, "bayer_gbrg16", pad=2, bigendian=True)
    assert (f["step"], f["is_bigendian"], len(f["data"])) == (18, 1, 108)
    view = image_from_fields(**f)
    assert np.array_equal(view, pixels_in(rgb, "bayer_gbrg16"))


@pytest.mark.parametrize("encoding", ["yuyv", "nv12", "bayer_rggb8", "mono16"])
def test_detect_reads_raw_camera_frames(tmp_path: Path, encoding: str) -> None:
    """``detect --raw`` answers a raw YUYV/NV12/Bayer/16-bit frame as it answers the same picture as PNG."""
    build_raw_model(tmp_path / "tiny.onnx")
    write_metadata(tmp_path / "tiny.meta.yaml", "tiny.onnx")
    rgb = picture(96, 64, seed=9)
    raw = tmp_path / f"frame.{encoding}"
    raw.write_bytes(fields_in(rgb, encoding)["data"])
    png = tmp_path / "frame.png"
    cv2.imwrite(str(png), cv_bridge_rgb8(frame_in(rgb, encoding), encoding)[:, :, ::-1])

    def detect(out_dir: str, *args: str) -> str:
        out = subprocess.run([sys.executable, "-m", "dla_infer_node.cli.detect", *args, "--json", "--conf",
                              "0.05", "--model", str(tmp_path / "tiny.meta.yaml"),
                              "--out", str(tmp_path / out_dir)],
                             capture_output=True, text=True, timeout=300, cwd=REPO)
        assert out.returncode == 0, out.stderr
        return out.stdout

    answer, from_png = (json.loads(detect("raw", str(raw), "--raw", f"{encoding}:96x64")),
                        json.loads(detect("png", str(png))))
    # the same detections; ONNX Runtime's threaded kernels may differ in the last float32 bit between two
    # processes, which detect's full-precision JSON shows, so values agree to far below a pixel / a score step
    assert answer and [d["class"] for d in answer] == [d["class"] for d in from_png]
    for a, b in zip(answer, from_png, strict=True):
        assert abs(a["score"] - b["score"]) < 1e-5 and np.allclose(a["bbox"], b["bbox"], atol=1e-3), (a, b)
    # the annotated copy is drawn on the same conversion
    assert np.array_equal(cv2.imread(str(tmp_path / "raw" / "frame_det.png")),
                          cv2.imread(str(tmp_path / "png" / "frame_det.png")))
    bad = subprocess.run([sys.executable, "-m", "dla_infer_node.cli.detect", str(raw), "--raw",
                          f"{encoding}:97x64", "--model", str(tmp_path / "tiny.meta.yaml")],
                         capture_output=True, text=True, timeout=300, cwd=REPO)
    assert bad.returncode == 2 and bad.stderr.startswith("error: [input]") and encoding in bad.stderr


def test_16_bit_bayer_shortcut_leaves_the_detections_unchanged() -> None:
    """The one reordered conversion (16-bit Bayer scaled before, not after, its demosaic on the 1080p
    shortcut) moves the input tensor by at most one 8-bit level and no detection of the shipped model."""
    from dla_infer_node.backends.factory import BackendSettings, open_backend
    from dla_infer_node.core.pipeline import Detector
    from dla_infer_node.core.resources import find_model_file
    from dla_infer_node.core.synth import generate_scene

    backend, meta = open_backend(BackendSettings(model_path=str(find_model_file("shapes_yolo.onnx"))))
    pre = Preprocessor(meta.input)
    worst, found = 0.0, 0
    with Detector(backend, meta) as det:
        for seed in range(3):
            scene = generate_scene(2000 + seed, width=1920, height=1080)
            frame = frame_in(scene.image, "bayer_grbg16")
            rgb = cv_bridge_rgb8(frame, "bayer_grbg16")
            tensor, _ = pre(frame, "bayer_grbg16")
            assert "scaled to 8 bits" in pre.conversion_path(frame, "bayer_grbg16")
            worst = max(worst, float(np.abs(tensor - Preprocessor(meta.input)(rgb, "rgb8")[0]).max()))
            got, want = det.detect(frame, "bayer_grbg16"), det.detect(rgb, "rgb8")
            assert got.class_ids.tolist() == want.class_ids.tolist()
            np.testing.assert_allclose(got.boxes, want.boxes, atol=1.0)
            found += len(got)
    assert 0 < worst <= 1 / 255 + 1e-6 and found > 0

"""cuDLA backend end to end through the REAL cuda.bindings.cudla binding against the DLA EMULATOR:
synthetic rectangles -> CPU pack -> emulated DLA (oracle) -> unpack -> decode -> boxes == ground truth,
for every input format x output format x fp16/int8, both YOLO output kinds; injected faults; teardown;
device memory steady over 1000 frames; the doctor passing every stage.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dla_infer_node.artifact.sidecar import load_artifact
from dla_infer_node.backends.cudla import CudlaBackend
from dla_infer_node.backends.cudla_errors import DeviceError, LoadableError, MemoryStageError, SubmitError
from dla_infer_node.core.decode import make_decoder
from dla_infer_node.core.preprocess import reference_preprocess
from dla_infer_node.core.tensor_format import unpack
from emulator import cases

pytestmark = pytest.mark.emulated
ROOT = Path(__file__).resolve().parents[1]


def run_frames(backend: CudlaBackend, frames: list[cases.Frame], tol: float, encoding: str = "rgb8") -> None:
    decoder = make_decoder(backend.metadata)
    for i, fr in enumerate(frames):
        img = fr.image if encoding == "rgb8" else np.ascontiguousarray(fr.image[:, :, ::-1])
        raw = backend.infer(img, encoding)
        det = decoder(raw.tensors, 0.5, 0.45, 100)
        why = cases.match_detections(fr, raw.letterbox.to_source(det.boxes), det.class_ids, tol)
        assert why is None, f"frame {i}: {why}"


@pytest.mark.parametrize("kind", ["raw", "final"])
@pytest.mark.parametrize(("out_fmt", "out_dt"), cases.OUT_VARIANTS)
@pytest.mark.parametrize(("in_fmt", "in_dt"), cases.IN_VARIANTS)
def test_oracle_every_format(emu: Any, cuda: Any, artifacts_dir: Path, in_fmt: str, in_dt: str,
                             out_fmt: str, out_dt: str, kind: str) -> None:
    art = cases.oracle_artifact(artifacts_dir, in_fmt, in_dt, out_fmt, out_dt, kind)
    with CudlaBackend(load_artifact(art.sidecar), cuda=cuda) as be:
        frames = [cases.make_frame(s) for s in range(4)] + [cases.make_frame(9, 256, 192, unit=2)]
        run_frames(be, frames, tol=2.5)


@pytest.mark.gpu_only
@pytest.mark.parametrize(("in_fmt", "in_dt"), cases.IN_VARIANTS)
def test_oracle_with_gpu_input_path(emu: Any, cuda: Any, artifacts_dir: Path, in_fmt: str,
                                    in_dt: str) -> None:
    """The fused GPU preprocessing kernel feeding the registered input buffer (preprocess_device: gpu)."""
    pytest.importorskip("cuda.core")
    art = cases.oracle_artifact(artifacts_dir / "gpu", in_fmt, in_dt, "chw16", "fp16", "raw")
    with CudlaBackend(load_artifact(art.sidecar), cuda=cuda, preprocess_device="gpu") as be:
        frames = [cases.make_frame(s) for s in range(3)] + [cases.make_frame(9, 256, 192, unit=2)]
        run_frames(be, frames, tol=2.5)
        run_frames(be, [cases.make_frame(4, 100, 128)], tol=2.5, encoding="bgr8")


def test_bgr_model_and_encoding_and_padded_rows(emu: Any, cuda: Any, artifacts_dir: Path) -> None:
    art = cases.oracle_artifact(artifacts_dir / "bgr", "hwc4", "int8", "chw16", "fp16", "raw",
                                channel_order="bgr", line_pad=64)
    with CudlaBackend(load_artifact(art.sidecar), cuda=cuda) as be:
        run_frames(be, [cases.make_frame(s, 100, 128) for s in range(3)], tol=2.5, encoding="bgr8")


@pytest.mark.parametrize(("in_fmt", "in_dt"), cases.IN_VARIANTS)
def test_echo_matches_cpu_reference(emu: Any, cuda: Any, artifacts_dir: Path, in_fmt: str,
                                    in_dt: str) -> None:
    """The registered input buffer holds exactly the CPU reference tensor (read back through echo)."""
    out_fmt, out_dt = ("chw16", "fp16") if in_dt == "fp16" else ("chw32", "int8")
    art = cases.echo_artifact(artifacts_dir, in_fmt, in_dt, out_fmt, out_dt)
    with CudlaBackend(load_artifact(art.sidecar), cuda=cuda) as be:
        fr = cases.make_frame(3, 160, 90)
        got = be.infer(fr.image, "rgb8").tensors[0]
        ref, _ = reference_preprocess(fr.image, "rgb8", be.metadata.input)
        tol = 1e-3 if in_dt == "fp16" else cases.IN_SCALE * 0.51
        assert np.abs(got - ref).max() <= tol


def test_close_leaves_nothing_and_is_idempotent(emu: Any, cuda: Any, artifacts_dir: Path) -> None:
    art = cases.oracle_artifact(artifacts_dir, "linear", "fp16", "linear", "fp16")
    be = CudlaBackend(load_artifact(art.sidecar), cuda=cuda)
    assert emu.live() == (1, 1, 8)  # two buffer sets of 1 input + 3 outputs registered
    be.infer(cases.make_frame(0).image, "rgb8")
    be.close()
    assert emu.live() == (0, 0, 0) and not be.close_errors
    be.close()


@pytest.mark.parametrize(("env", "value", "error", "stage"), [
    ("DLA_EMU_FAIL_CREATE", "ErrorCreationFailed", DeviceError, "device"),
    ("DLA_EMU_FAIL_LOAD", "ErrorUmd", LoadableError, "loadable"),
    ("DLA_EMU_FAIL_REGISTER_N", "3", MemoryStageError, "memory"),
])
def test_injected_start_faults_clean_error_and_teardown(emu: Any, cuda: Any, artifacts_dir: Path,
                                                       monkeypatch: Any, env: str, value: str, error: type,
                                                       stage: str) -> None:
    art = cases.oracle_artifact(artifacts_dir, "hwc4", "fp16", "chw16", "fp16")
    # counters are per process: fail the third registration from now
    monkeypatch.setenv(env, str(emu.register_calls() + 3) if env == "DLA_EMU_FAIL_REGISTER_N" else value)
    with pytest.raises(error) as ei:
        CudlaBackend(load_artifact(art.sidecar), cuda=cuda)
    assert getattr(ei.value, "stage", None) == stage and "cudla.Status." in str(ei.value)
    # the emu fixture asserts that nothing is left open


def test_injected_submit_failure_then_recovery(emu: Any, cuda: Any, artifacts_dir: Path,
                                               monkeypatch: Any) -> None:
    art = cases.oracle_artifact(artifacts_dir, "linear", "int8", "chw32", "int8")
    with CudlaBackend(load_artifact(art.sidecar), cuda=cuda) as be:
        fr = cases.make_frame(1)
        run_frames(be, [fr], tol=3.0)
        monkeypatch.setenv("DLA_EMU_FAIL_SUBMIT_N", str(emu.submit_calls() + 1))
        with pytest.raises(SubmitError) as ei:
            be.infer(fr.image, "rgb8")
        assert ei.value.stage == "submit" and "cudla.submit_task" in str(ei.value)
        monkeypatch.delenv("DLA_EMU_FAIL_SUBMIT_N")
        run_frames(be, [fr], tol=3.0)  # a refused submit leaves the backend usable


@pytest.mark.gpu_only
def test_1000_frames_no_device_memory_growth(emu: Any, cuda: Any, artifacts_dir: Path) -> None:
    art = cases.oracle_artifact(artifacts_dir, "hwc4", "int8", "chw16", "fp16")
    with CudlaBackend(load_artifact(art.sidecar), cuda=cuda) as be:
        fr = cases.make_frame(5)
        for _ in range(20):
            be.infer(fr.image, "rgb8")
        free0, _ = cuda.mem_get_info()
        regs0 = emu.live()
        for i in range(1000):
            raw = be.infer(fr.image, "rgb8")
            if i % 250 == 0:
                run_frames(be, [fr], tol=2.5)
        free1, _ = cuda.mem_get_info()
        assert emu.live() == regs0
        assert free0 - free1 <= 0, f"device memory shrank by {free0 - free1} bytes over 1000 frames"
        assert raw.tensors[0].dtype == np.float32


def test_missing_sync_is_visible(emu: Any, cuda: Any, artifacts_dir: Path, monkeypatch: Any) -> None:
    """The emulator really is stream-ordered: reading pinned outputs before the sync gives stale data."""
    art = cases.oracle_artifact(artifacts_dir, "linear", "fp16", "linear", "fp16")
    with CudlaBackend(load_artifact(art.sidecar), cuda=cuda) as be:
        fr = cases.make_frame(2)
        be.infer(np.zeros_like(fr.image), "rgb8")  # pinned outputs now hold the empty-scene answer
        stale = [p.array.copy() for p in be._pinned]
        monkeypatch.setenv("DLA_EMU_DELAY_MS", "300")
        be._input.enqueue(fr.image, "rgb8", be._dev_bufs[0], be._stream.handle)  # type: ignore[union-attr]
        be._cudla.submit_task(be._dev, be._sets[0].task.ptr, 1, be._stream.handle, 0)
        for pos, t in enumerate(be._outputs_by_index()):
            cuda.memcpy_dtoh_async(be._pinned[pos].ptr, be._dev_bufs[1 + pos], t.size, be._stream.handle)
        early = [p.array.copy() for p in be._pinned]
        be._stream.synchronize()
        late = [p.array.copy() for p in be._pinned]
        assert all(np.array_equal(a, b) for a, b in zip(early, stale, strict=True))
        assert not all(np.array_equal(a, b) for a, b in zip(late, stale, strict=True))
        layout = be.outputs[0].layout
        assert unpack(late[0], layout).shape == layout.shape


@pytest.mark.gpu_only
def test_doctor_passes_every_stage(emu: Any, artifacts_dir: Path, tmp_path: Path) -> None:
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    art = cases.echo_artifact(artifacts_dir / "doctor", "hwc4", "fp16", "chw16", "fp16")
    model = helper.make_model(helper.make_graph(
        [helper.make_node("Identity", ["images"], ["echo"])], "echo",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, cases.NET, cases.NET])],
        [helper.make_tensor_value_info("echo", TensorProto.FLOAT, [1, 3, cases.NET, cases.NET])]),
        opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8  # loadable by older onnxruntime releases too
    onnx.save(model, str(tmp_path / "echo.onnx"))
    import yaml

    meta = dict(art.doc["model"])
    meta["onnx"] = "echo.onnx"
    (tmp_path / "echo.meta.yaml").write_text(yaml.safe_dump(meta))
    import cv2

    cv2.imwrite(str(tmp_path / "frame.png"), cases.make_frame(4).image[:, :, ::-1])
    record = tmp_path / "record.yaml"
    out_dir = os.environ.get("DLA_TEST_OUT")
    if out_dir:
        record = Path(out_dir) / "doctor_record.yaml"
    env = dict(os.environ)
    proc = subprocess.run([sys.executable, "-m", "dla_infer_node.cli.doctor", "--loadable", str(art.loadable),
                           "--image", str(tmp_path / "frame.png"),
                           "--onnx-meta", str(tmp_path / "echo.meta.yaml"),
                           "--record", str(record), "--cudla-library", str(emu.path)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    print(proc.stdout, proc.stderr)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = yaml.safe_load(record.read_text())
    assert doc["result"] == "pass" and {"artifact", "runtime", "platform"} <= set(doc)
    # the platform stage WARNs off a Jetson (no L4T, no TensorRT: no DLA line to check the artifact
    # against); every other stage must pass
    status = {s["stage"]: s["status"] for s in doc["stages"]}
    assert status.pop("platform") in ("PASS", "WARN")
    assert status and all(v == "PASS" for v in status.values()), status
    assert doc["runtime"]["dla_emulator"] is True

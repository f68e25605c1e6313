"""dla_build compile / sidecar against the fake trtexec of each TensorRT line, the support matrix, and the
numeric cuDLA status table (binding-spelling independent)."""

from __future__ import annotations

import hashlib
import importlib.machinery
import shutil
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest
from _build_fixtures import FAKES, IN_SCALE, copy_model, fake_env, write_cache, write_fp16, write_qdq

from dla_infer_node.artifact import build_cli, onnx_facts, trt_support
from dla_infer_node.artifact.sidecar import load_artifact
from dla_infer_node.backends import cudla_errors as ce


def dla_build(argv: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dla_infer_node.artifact.build_cli", *argv], env=env,
                          capture_output=True, text=True, timeout=120)


def test_support_matrix_and_version_parsing() -> None:
    banner = "&&&& RUNNING TensorRT.trtexec [TensorRT v100300] # x"
    assert trt_support.parse_trtexec_version(banner) == (10, 3, 0)
    assert trt_support.parse_trtexec_version("[TensorRT v110401]") == (11, 4, 1)
    assert trt_support.parse_trtexec_version("TensorRT v100700") == (10, 7, 0)
    assert trt_support.parse_trtexec_version("[I] TensorRT version: 10.3.0.30") == (10, 3, 0)
    assert trt_support.parse_trtexec_version("no version here") is None
    lines = {v: trt_support.describe(v)["line"] for v in ("8.6", "10.3", "10.7.0", "10.8", "11.2", "11.4.0",
                                                            "11.4.1", "12.0")}
    assert lines == {"8.6": "10.x-flags", "10.3": "10.x-flags", "10.7.0": "10.x-flags", "10.8": None,
                     "11.2": None, "11.4.0": None, "11.4.1": "11.x-typed", "12.0": "11.x-typed"}
    with pytest.raises(Exception, match=r"11\.4\.1"):
        trt_support.line_for("11.3")


def test_dry_run_commands_per_line(tmp_path: Path) -> None:
    model = copy_model(tmp_path)
    cache = write_cache(tmp_path / "shapes_yolo.calib", {"images": IN_SCALE})
    out = tmp_path / "m.loadable"
    p = dla_build(["compile", str(model), "--trt-version", "10.3", "--precision", "int8", "--out", str(out),
                   "--calibration-cache", str(cache), "--dry-run"])
    assert p.returncode == 0, p.stderr
    cmd = next(ln for ln in p.stdout.splitlines() if ln.startswith("trtexec "))
    assert "--int8" in cmd and f"--calib={cache}" in cmd and "--useDLACore=0" in cmd
    assert "--buildDLAStandalone" in cmd and "--inputIOFormats=int8:dla_hwc4" in cmd
    assert "--outputIOFormats=fp16:chw16,fp16:chw16,fp16:chw16" in cmd and f"--saveEngine={out}" in cmd
    assert not out.exists()  # dry run: nothing built
    # 11.4.1: the Q/DQ ONNX from calibrate, no precision flag at all
    qdq = write_qdq(tmp_path)
    p = dla_build(["compile", str(model), "--trt-version", "11.4.1", "--precision", "int8", "--out", str(out),
                   "--dla-core", "1", "--dry-run"])
    assert p.returncode == 0, p.stderr
    cmd = next(ln for ln in p.stdout.splitlines() if ln.startswith("trtexec "))
    assert f"--onnx={qdq}" in cmd and "--useDLACore=1" in cmd
    assert not any(f in cmd for f in ("--int8", "--fp16", "--calib", "--best"))
    # 11.2: no DLA -> one line naming the versions that build DLA loadables
    p = dla_build(["compile", str(model), "--trt-version", "11.2", "--precision", "fp16", "--out", str(out)])
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1
    assert "11.2.0 builds no DLA loadable" in p.stderr and "8.5-10.7" in p.stderr and "11.4.1+" in p.stderr


def test_missing_inputs_on_the_typed_line_are_one_line(tmp_path: Path) -> None:
    model = copy_model(tmp_path)
    out = tmp_path / "m.loadable"
    p = dla_build(["compile", str(model), "--trt-version", "11.4.1", "--precision", "int8",
                   "--out", str(out)])
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1
    assert "shapes_yolo.qdq.onnx" in p.stderr and "dla_build calibrate" in p.stderr
    p = dla_build(["compile", str(model), "--trt-version", "11.4.1", "--precision", "int8", "--out", str(out),
                   "--calibration-cache", str(model)])
    assert p.returncode == 2 and "no --calib" in p.stderr
    if shutil.which("true") and not (Path(build_cli.__file__).parent / "convert.py").exists():
        p = dla_build(["compile", str(model), "--trt-version", "11.4.1", "--precision", "fp16", "--out",
                       str(out)])
        assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1
        assert "dla_infer_node.artifact.convert" in p.stderr


def test_fp16_on_typed_line_converts_first(tmp_path: Path, monkeypatch: Any, capsys: Any) -> None:
    """compile calls convert.convert_fp16(src, dst) -> Path (the interface for dla_build convert)."""
    model = copy_model(tmp_path)
    calls: list[tuple[Path, Path]] = []

    def convert_fp16(src: Path, dst: Path) -> Path:
        calls.append((src, dst))
        return write_fp16(dst.parent)

    stub = types.ModuleType("dla_infer_node.artifact.convert")
    stub.__spec__ = importlib.machinery.ModuleSpec(stub.__name__, None)
    stub.convert_fp16 = convert_fp16  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, stub.__name__, stub)
    for k, v in fake_env("11.4.1").items():
        monkeypatch.setenv(k, v)
    out = tmp_path / "build" / "m.loadable"
    assert build_cli.main(["compile", str(model), "--precision", "fp16", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert calls == [(model, out.with_name("shapes_yolo.fp16.onnx"))]
    assert "building from the fp16-typed ONNX" in text and "TensorRT 11.4.1 (11.x-typed)" in text
    art = load_artifact(str(out) + ".yaml")
    assert art.build["precision_source"]["kind"] == "typed_onnx"
    assert art.build["built_from"]["path"].endswith("shapes_yolo.fp16.onnx")


def test_fake_trtexec_behaves_like_each_line(tmp_path: Path) -> None:
    model = copy_model(tmp_path)
    out = tmp_path / "x.loadable"
    base = [f"--onnx={model}", "--useDLACore=0", "--buildDLAStandalone", "--inputIOFormats=fp16:dla_hwc4",
            "--outputIOFormats=fp16:chw16", f"--saveEngine={out}"]

    def fake(version: str, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(FAKES / f"trt-{version}" / "trtexec"), *args], env=fake_env(version),
                              capture_output=True, text=True, timeout=60)

    p = fake("11.4.1", *base, "--fp16")
    assert p.returncode != 0 and "Unknown option: --fp16" in p.stdout and not out.exists()
    p = fake("11.4.1", *base)  # fp32 ONNX: nothing for the DLA on a strongly typed TensorRT
    assert p.returncode != 0 and "FP32" in p.stdout and not out.exists()
    p = fake("11.2", *base)
    assert p.returncode != 0 and "DLA is not supported" in p.stdout
    p = fake("10.3", *base)  # 10.x needs a precision flag
    assert p.returncode != 0
    p = fake("10.3", *base, "--fp16")
    assert p.returncode == 0 and out.read_bytes().startswith(b"DLAEMU1\0")
    assert trt_support.parse_trtexec_version(fake("11.2", "--version").stdout) == (11, 2, 0)


def test_compile_int8_flags_line_writes_a_sidecar_that_loads(tmp_path: Path, monkeypatch: Any) -> None:
    model = copy_model(tmp_path)
    cache = write_cache(tmp_path / "shapes_yolo.calib", {"images": IN_SCALE, "head_s8": 0.05})
    for k, v in fake_env("10.3").items():
        monkeypatch.setenv(k, v)
    out = tmp_path / "m.loadable"
    assert build_cli.main(["compile", str(model), "--precision", "int8", "--out", str(out),
                           "--calibration-cache", str(cache), "--revision", "v1.2"]) == 0
    art = load_artifact(str(out) + ".yaml")
    b = art.build
    assert (b["tensorrt_version"], b["tensorrt_line"], b["precision"]) == ("10.3.0", "10.x-flags", "int8")
    assert "--int8" in b["command"] and f"--calib={cache}" in b["command"]
    assert b["precision_source"] == {"kind": "calibration_cache", "path": str(cache),
                                     "sha256": hashlib.sha256(cache.read_bytes()).hexdigest()}
    assert art.inputs[0].dtype == "int8" and art.inputs[0].format == "hwc4"
    assert art.inputs[0].scale == pytest.approx(IN_SCALE, rel=1e-6)
    assert [o.format for o in art.outputs] == ["chw16"] * 3
    assert art.loadable_sha256 == hashlib.sha256(out.read_bytes()).hexdigest()
    assert art.source_model == {"path": str(model), "sha256": onnx_facts.sha256_file(model),
                                "revision": "v1.2"}
    assert art.emulated and art.metadata.classes[0] == "circle"


def test_sidecar_subcommand_and_revision(tmp_path: Path) -> None:
    model = copy_model(tmp_path)  # outside any git work tree
    out = tmp_path / "m.loadable"
    env = fake_env("10.3")
    subprocess.run([str(FAKES / "trt-10.3" / "trtexec"), f"--onnx={model}", "--useDLACore=0", "--fp16",
                    "--buildDLAStandalone", "--inputIOFormats=fp16:dla_hwc4", "--outputIOFormats=fp16:chw16",
                    f"--saveEngine={out}"], env=env, check=True, capture_output=True)
    p = dla_build(["sidecar", str(out), "--onnx", str(model), "--trt-version", "10.3", "--precision", "fp16"])
    assert p.returncode == 0, p.stderr
    art = load_artifact(str(out) + ".yaml")
    assert art.source_model["revision"] == "unknown" and "--fp16" in art.build["command"]
    # inside the repository: git describe of the model's folder
    from dla_infer_node.artifact.sidecar_writer import git_revision

    repo_rev = subprocess.run(["git", "describe", "--always", "--dirty", "--tags"], cwd=FAKES,
                              capture_output=True, text=True).stdout.strip()
    assert git_revision(FAKES) == (repo_rev or "unknown")
    # a wrong format for the loadable's sidecar is refused in one line, nothing written
    (tmp_path / "m.loadable.yaml").unlink()
    p = dla_build(["sidecar", str(out), "--onnx", str(model), "--trt-version", "10.3", "--precision", "fp16",
                   "--output-format", "int8:chw16"])
    assert p.returncode == 2 and "chw16 holds fp16" in p.stderr
    assert not (tmp_path / "m.loadable.yaml").exists()


class _Err(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(f"status {status}")
        self.status = status


_Err.__name__ = "CudlaError"


def test_status_names_and_hints_by_value_not_binding_spelling() -> None:
    """13.5.0 spells members ERROR_UMD; the message and hint come from the numeric value only."""
    def raises(status: int) -> Any:
        def fn() -> None:
            raise _Err(status)
        return fn

    with pytest.raises(ce.LoadableError) as ei:
        ce.cudla_call("loadable", "cudla.module_load_from_memory", {}, raises(7))
    assert ei.value.status == 7 and "cudla.Status.ErrorUmd (7)" in str(ei.value)
    assert ei.value.hint and "--buildDLAStandalone" in ei.value.hint
    with pytest.raises(ce.LoadableError) as ei:
        ce.cudla_call("loadable", "cudla.module_load_from_memory", {}, raises(10))
    assert "ErrorIncompatibleDlaSWVersion (10)" in str(ei.value) and "TensorRT" in (ei.value.hint or "")
    with pytest.raises(ce.RuntimeLibraryError):
        ce.cudla_call("device", "cudla.create_device", {}, raises(15))
    assert ce.status_name(0x40000006) == "ErrorDlaErrEngineTimeout" and ce.status_name(99) == "Status(99)"
    assert ce.status_hint("ErrorUmd") == ce.status_hint(7)


def test_status_table_matches_the_binding_values() -> None:
    cudla = pytest.importorskip("cuda.bindings.cudla")
    assert {int(m) for m in cudla.Status} == set(ce.STATUS_NAMES)

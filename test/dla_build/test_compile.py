"""dla_build compile / sidecar against the fake trtexec of each TensorRT line, the support matrix, and the
numeric cuDLA status table (binding-spelling independent)."""

from __future__ import annotations

import hashlib
import shlex
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _build_fixtures import FAKES, IN_SCALE, copy_model, fake_env, write_cache, write_fp16, write_qdq

from dla_infer_node.artifact import trt_support
from dla_infer_node.artifact.sidecar import load_artifact
from dla_infer_node.backends import cudla_errors as ce
from dla_infer_node.dla_build import build_cli, convert, onnx_facts
from dla_infer_node.dla_build.lint_graph import lint
from dla_infer_node.dla_build.trt_cache import header_for


def dla_build(argv: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dla_infer_node.dla_build.build_cli", *argv], env=env,
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


def test_fp16_on_typed_line_converts_first(tmp_path: Path, monkeypatch: Any, capsys: Any) -> None:
    """compile calls convert.convert_fp16(src, dst) -> Path (the interface for dla_build convert)."""
    model = copy_model(tmp_path)
    calls: list[tuple[Path, Path]] = []

    def convert_fp16(src: Path, dst: Path) -> Path:
        calls.append((src, dst))
        return write_fp16(dst.parent)

    monkeypatch.setattr(convert, "convert_fp16", convert_fp16)
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
    # paths relative to the sidecar (here its own folder), so that a copied artifact still resolves
    assert b["precision_source"] == {"kind": "calibration_cache", "path": "shapes_yolo.calib",
                                     "sha256": hashlib.sha256(cache.read_bytes()).hexdigest()}
    assert art.inputs[0].dtype == "int8" and art.inputs[0].format == "hwc4"
    assert art.inputs[0].scale == pytest.approx(IN_SCALE, rel=1e-6)
    assert [o.format for o in art.outputs] == ["chw16"] * 3
    assert art.loadable_sha256 == hashlib.sha256(out.read_bytes()).hexdigest()
    assert art.source_model == {"path": "shapes_yolo.onnx", "sha256": onnx_facts.sha256_file(model),
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
    from dla_infer_node.dla_build.sidecar_writer import git_revision

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


def test_version_codes_of_banners_and_cache_headers() -> None:
    assert trt_support.version_code("10.3") == 100300 and trt_support.version_code("8.6.1") == 8601
    assert trt_support.version_code("11.4.1") == 110401
    banner = "&&&& RUNNING TensorRT.trtexec [TensorRT v8601] # x"
    assert trt_support.parse_trtexec_version(banner) == (8, 6, 1)
    assert header_for("10.3") == "TRT-100300-EntropyCalibration2"
    assert header_for("8.6.1") == "TRT-8601-EntropyCalibration2"


@pytest.mark.parametrize("header", ["TRT-100300-MinMaxCalibration", "TRT-8601-EntropyCalibration2"])
def test_fake_trtexec_uses_a_cache_only_under_its_own_header(tmp_path: Path, header: str) -> None:
    """What TensorRT 10.3 checks: the calibrator (EntropyCalibration2) and its own version code."""
    model = copy_model(tmp_path)
    cache = tmp_path / "c.calib"
    cache.write_text(f"{header}\nimages: {struct.pack('>f', IN_SCALE).hex()}\n", encoding="ascii")
    argv = [str(FAKES / "trt-10.3" / "trtexec"), f"--onnx={model}", "--useDLACore=0", "--int8", "--fp16",
            f"--calib={cache}", "--buildDLAStandalone", "--inputIOFormats=int8:dla_hwc4",
            "--outputIOFormats=fp16:chw16", f"--saveEngine={tmp_path / 'x.loadable'}"]
    p = subprocess.run(argv, env=fake_env("10.3"), capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and "bound to nullptr" in p.stdout and not (tmp_path / "x.loadable").exists()
    if "MinMax" in header:
        assert "Calibration table does not match calibrator algorithm type" in p.stdout
    write_cache(cache, {"images": IN_SCALE})  # TRT-100300-EntropyCalibration2
    assert subprocess.run(argv, env=fake_env("10.3"), capture_output=True, timeout=60).returncode == 0


def test_fake_trtexec_refuses_what_the_real_one_refuses(tmp_path: Path) -> None:
    model = copy_model(tmp_path)
    out = tmp_path / "x.loadable"
    base = ["--useDLACore=0", "--buildDLAStandalone", "--inputIOFormats=fp16:dla_hwc4",
            "--outputIOFormats=fp16:chw16", f"--saveEngine={out}"]

    def fake(version: str, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(FAKES / f"trt-{version}" / "trtexec"), *args], env=fake_env(version),
                              capture_output=True, text=True, timeout=60)

    p = fake("10.8", f"--onnx={model}", "--fp16", *base)  # 10.7 was the last 10.x with a DLA
    assert p.returncode != 0 and "DLA is not supported by TensorRT 10.8.0" in p.stdout
    p = fake("10.3", f"--onnx={tmp_path / 'missing.onnx'}", "--fp16", *base)
    assert p.returncode != 0 and "Could not open file" in p.stdout and "Traceback" not in p.stderr
    p = fake("8.6", f"--onnx={model}", "--fp16", *base)
    assert p.returncode == 0 and "[TensorRT v8601]" in p.stdout
    fp16 = write_fp16(tmp_path)
    assert fake("11.4.1", f"--onnx={fp16}", "--stronglyTyped", *base).returncode == 0


@pytest.mark.parametrize("version, header", [("10.3", "TRT-100300-MinMaxCalibration"),
                                             ("8.6", "TRT-100300-EntropyCalibration2")])
def test_compile_reheads_a_cache_for_the_target_tensorrt(tmp_path: Path, version: str, header: str) -> None:
    """A cache written for another calibrator or TensorRT is what a real trtexec would recalibrate: compile
    hands the fake (which checks as TensorRT does) a copy under the right header, with our scales."""
    model = copy_model(tmp_path)
    cache = tmp_path / "shapes_yolo.calib"
    cache.write_text(f"{header}\nimages: {struct.pack('>f', IN_SCALE).hex()}\n", encoding="ascii")
    out = tmp_path / "jp" / "m.loadable"
    p = dla_build(["compile", str(model), "--precision", "int8", "--calibration-cache", str(cache), "--out",
                   str(out)], env=fake_env(version))
    assert p.returncode == 0, p.stdout + p.stderr
    fixed = out.with_name("m.calib")
    assert f"wrote {fixed}" in p.stdout and f"--calib={fixed}" in p.stdout
    full = {"10.3": "10.3.0", "8.6": "8.6.1"}[version]  # what the fake's trtexec --version says
    assert fixed.read_text().splitlines()[0] == header_for(full)
    assert cache.read_text().splitlines()[0] == header  # the user's cache is left as it was
    art = load_artifact(str(out) + ".yaml")
    assert art.inputs[0].scale == pytest.approx(IN_SCALE, rel=1e-6)
    assert art.build["precision_source"]["path"] == "m.calib"


def test_compile_refuses_a_graph_lint_rejects_unless_forced(tmp_path: Path) -> None:
    model = copy_model(tmp_path)
    write_qdq(tmp_path, zero_point=np.array(128, np.uint8))  # asymmetric uint8: no TensorRT Q/DQ layer
    out = tmp_path / "m.loadable"
    argv = ["compile", str(model), "--precision", "int8", "--out", str(out)]
    p = dla_build(argv, env=fake_env("11.4.1"))
    assert p.returncode == 1 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "images_q" in p.stderr and "--force" in p.stderr and "trtexec" not in p.stdout
    assert not out.exists()
    p = dla_build([*argv, "--force"], env=fake_env("11.4.1"))
    assert p.returncode == 0 and "building anyway (--force)" in p.stderr and out.exists()


def test_lint_folds_qdq_pairs_but_not_asymmetric_ones(tmp_path: Path) -> None:
    ok = lint(write_qdq(tmp_path))
    assert ok["standalone_ok"], ok["offending"]
    rows = {r["name"]: r for r in ok["rows"]}
    q, dq = "QuantizeLinear:images_q", "DequantizeLinear:images_dq"  # unnamed nodes: op and output
    assert rows[q]["verdict"] == rows[dq]["verdict"] == "folded"
    bad = lint(write_qdq(tmp_path, "bad.onnx", np.array(3, np.int8)))
    assert bad["offending"] == [q, dq]
    assert "zero point [3]" in {r["name"]: r for r in bad["rows"]}[q]["reason"]


def test_printed_commands_work_as_printed(tmp_path: Path) -> None:
    """10.3 int8 and 11.4.1 int8 dry runs (fp16 with its convert line: the models/README guide test)."""
    model = copy_model(tmp_path)
    cache = write_cache(tmp_path / "shapes_yolo.calib", {"images": IN_SCALE})
    write_qdq(tmp_path)
    for version, extra in (("10.3", ["--calibration-cache", "shapes_yolo.calib"]), ("11.4.1", [])):
        out = Path("out") / version / "m.loadable"
        p = subprocess.run([sys.executable, "-m", "dla_infer_node.dla_build.build_cli", "compile", model.name,
                            "--trt-version", version, "--precision", "int8", "--out", str(out), *extra,
                            "--dry-run"], cwd=tmp_path, env=fake_env(version), capture_output=True, text=True,
                           timeout=120)
        assert p.returncode == 0, p.stderr
        printed = [ln for ln in p.stdout.splitlines() if ln.startswith(("mkdir ", "dla_build ", "trtexec "))]
        assert [ln.split()[0] for ln in printed] == ["mkdir", "trtexec", "dla_build"]
        for line in printed:
            argv = shlex.split(line)
            head = [sys.executable, "-m", "dla_infer_node.dla_build.build_cli"] if argv[0] == "dla_build" \
                else [argv[0]]
            q = subprocess.run(head + argv[1:], cwd=tmp_path, env=fake_env(version), capture_output=True,
                               text=True, timeout=120)
            assert q.returncode == 0, line + q.stdout + q.stderr
        art = load_artifact(tmp_path / f"{out}.yaml")
        assert art.inputs[0].scale == pytest.approx(IN_SCALE, rel=1e-3) or art.inputs[0].dtype == "fp16"
    assert cache.is_file()


def test_a_missing_build_input_is_one_line(tmp_path: Path) -> None:
    model = copy_model(tmp_path)
    out = tmp_path / "m.loadable"
    out.write_bytes(b"x")
    p = dla_build(["sidecar", str(out), "--onnx", str(model), "--trt-version", "11.4.1", "--precision",
                   "fp16", "--built-from", str(tmp_path / "nowhere.fp16.onnx")])
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "nowhere.fp16.onnx" in p.stderr and "dla_build convert" in p.stderr

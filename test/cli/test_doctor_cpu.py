"""dla_doctor on a machine without a DLA: stops at the first failing stage, exit code != 0, and writes a
record with separate artifact / runtime / platform sections."""

from __future__ import annotations

import argparse
import ctypes
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from dla_infer_node.backends.factory import BackendSettings, open_backend
from dla_infer_node.cli import doctor

ROOT = Path(__file__).resolve().parents[2]


def _libcudla_present() -> bool:
    try:
        ctypes.CDLL("libcudla.so.1")
        return True
    except OSError:
        return False


@pytest.mark.skipif(_libcudla_present(), reason="libcudla.so.1 is loadable here")
def test_doctor_stops_at_runtime_library(tmp_path: Path) -> None:
    record = tmp_path / "record.yaml"
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    proc = subprocess.run([sys.executable, "-m", "dla_infer_node.cli.doctor", "--record", str(record)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    doc = yaml.safe_load(record.read_text())
    assert doc["result"] == "fail"
    # with cuda-bindings installed: runtime_library; without it: python (the binding itself is missing)
    assert doc["failed_stage"] in ("runtime_library", "python")
    assert {"artifact", "runtime", "platform"} <= set(doc)
    assert doc["platform"]["python"]
    failed = [s for s in doc["stages"] if s["status"] == "FAIL"]
    assert len(failed) == 1 and failed[0]["hint"]
    assert "FAIL" in proc.stdout and "hint:" in proc.stdout
    # stopped there: every later stage is in the record as not run, saying which stage failed first
    names = [s["stage"] for s in doc["stages"]]
    assert names == list(doctor.STAGES)
    later = doc["stages"][names.index(doc["failed_stage"]) + 1:]
    assert later and all(s["result"] == "not run" and doc["failed_stage"] in s["detail"] for s in later)
    if doc["failed_stage"] == "runtime_library":  # the platform stage ran before it
        assert doc["stages"][1]["stage"] == "platform" and doc["stages"][1]["result"] == "passed"
        assert doc["platform"]["cudla_library"] is None and "tensorrt" in doc["platform"]
    if doc["failed_stage"] == "runtime_library":
        assert "libcudla.so.1" in failed[0]["detail"] and "Jetson" in failed[0]["hint"]


def test_descriptor_table_and_record(tmp_path: Path) -> None:
    table = doctor._descriptor_table({"inputs": [{
        "name": "images", "n": 1, "c": 3, "h": 64, "w": 64, "size": 65536, "data_format": 10, "data_type": 2,
        "stride": [4, 256, 16384, 16384, 0, 0, 0, 0]}], "outputs": []})
    assert "images" in table and "[4, 256, 16384, 16384]" in table
    rep = doctor.Report()
    rep.add("python", "PASS", "ok")
    rep.add("runtime_library", "FAIL", "missing")
    doctor.write_record(rep, tmp_path / "r.yaml", 1)
    doc = yaml.safe_load((tmp_path / "r.yaml").read_text())
    assert doc["failed_stage"] == "runtime_library" and doc["result"] == "fail"


def test_stage_failed_strips_duplicate_hint() -> None:
    e = doctor.StageFailed("device", "[device] x(): bad (hint: do y)", "do y")
    assert e.message == "[device] x(): bad" and e.hint == "do y"


def test_compare_stage_on_the_cpu() -> None:
    """The compare stage with the ONNX model itself standing in for the DLA: cosine 1, PASS; a "DLA" whose
    outputs are negated fails the stage, naming the cosine."""
    meta = ROOT / "models" / "shapes_yolo.meta.yaml"
    args = argparse.Namespace(image=ROOT / "samples" / "scene_30000001.png", onnx_meta=meta, min_cosine=0.99)
    ort, _ = open_backend(BackendSettings(backend="onnxruntime", metadata_path=str(meta)))

    class Negated:
        def infer(self, rgb: object, encoding: str) -> argparse.Namespace:
            return argparse.Namespace(tensors=[-t for t in ort.infer(rgb, encoding).tensors])

    try:
        rep = doctor.Report()
        doctor._stage_compare(rep, args, ort)
        assert rep.stages[-1]["status"] == "PASS"
        assert rep.runtime["compare"]["min_cosine"] > 0.9999
        with pytest.raises(doctor.StageFailed, match="min cosine"):
            doctor._stage_compare(doctor.Report(), args, Negated())
    finally:
        ort.close()

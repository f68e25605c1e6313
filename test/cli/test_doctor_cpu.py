"""dla_doctor on a machine without a DLA: stops at the first failing stage, exit code != 0, and writes a
record with separate artifact / runtime / platform sections."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

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

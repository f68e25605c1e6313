"""compile -> sidecar -> doctor -> node, for both TensorRT lines, on a machine without a DLA or GPU: the fake
trtexec writes an EMULATED loadable, and the doctor and the node (backend cudla, real cuda.bindings.cudla)
run over the DLA EMULATOR and the fake CUDA driver (test/_fake_cudla_env.py)."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from _build_fixtures import IN_SCALE, REPO, copy_model, fake_env, write_cache, write_qdq
from _fake_cudla_env import cuda_home

from dla_infer_node.cli.doctor import STAGES

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("cuda") is None
                       or importlib.util.find_spec("cuda.bindings") is None, reason="cuda-bindings missing"),
    pytest.mark.skipif(not (shutil.which("gcc") or shutil.which("cc")), reason="no C compiler"),
    pytest.mark.skipif(cuda_home() is None, reason="CUDA headers (cuda.h) missing"),
]
HARNESS = REPO / "test" / "_fake_cudla_env.py"
# (TensorRT on the build machine, precision, what the line needs besides the model)
LINES = {"10.3": "int8", "11.4.1": "int8"}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """One loadable per line, compiled by `dla_build compile` with that line's fake trtexec on PATH."""
    out: dict[str, Path] = {}
    for version, precision in LINES.items():
        folder = tmp_path_factory.mktemp(f"trt{version}")
        model = copy_model(folder)
        extra: list[str] = []
        if version.startswith("10."):
            cache = write_cache(folder / "shapes_yolo.calib", {"images": IN_SCALE})
            extra = ["--calibration-cache", str(cache)]
        else:
            write_qdq(folder)  # what dla_build calibrate leaves next to the model
        loadable = folder / "shapes_yolo.loadable"
        p = subprocess.run([sys.executable, "-m", "dla_infer_node.dla_build.build_cli", "compile", str(model),
                            "--precision", precision, "--out", str(loadable), *extra],
                           env=fake_env(version), capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stdout + p.stderr
        out[version] = loadable
    yield out


def doctor(build_dir: Path, loadable: Path, trt: str, record: Path) -> tuple[int, str, dict[str, Any]]:
    p = subprocess.run([sys.executable, str(HARNESS), str(build_dir), "doctor", "--loadable", str(loadable),
                        "--record", str(record), "--allow-skip"], env=fake_env(trt), capture_output=True,
                       text=True, timeout=120, cwd=REPO)
    return p.returncode, p.stdout + p.stderr, yaml.safe_load(record.read_text())


@pytest.mark.parametrize("version", list(LINES))
def test_doctor_passes_and_records_both_lines(built: dict[str, Path], tmp_path: Path, version: str) -> None:
    code, out, rec = doctor(tmp_path / "emu", built[version], version, tmp_path / "rec.yaml")
    assert code == 0, out
    assert [s["stage"] for s in rec["stages"]] == list(STAGES)
    results = {s["stage"]: s["result"] for s in rec["stages"]}
    assert results["submit"] == "passed" and results["compare"] == "not run"
    line = "10.x-flags" if version.startswith("10.") else "11.x-typed"
    assert rec["artifact"]["build"]["tensorrt_line"] == line
    assert rec["platform"]["tensorrt"]["line"] == line and rec["platform"]["warnings"] == []
    assert rec["platform"]["cudla_library"].endswith("libcudla.so.1")
    assert rec["platform"]["cudla_library_origin"].startswith("DLA EMULATOR")
    assert rec["runtime"]["task_statistics"] == {"num_output_task_statistics": 0}


def test_doctor_warns_when_the_platform_tensorrt_differs(built: dict[str, Path], tmp_path: Path) -> None:
    _, out, rec = doctor(tmp_path / "emu", built["10.3"], "11.4.1", tmp_path / "rec.yaml")
    platform = next(s for s in rec["stages"] if s["stage"] == "platform")
    assert platform["status"] == "WARN" and "IncompatibleDlaSWVersion" in out
    want = "built by TensorRT 10.3.0 (10.x-flags), platform has 11.4.1 (11.x-typed)"
    assert want in rec["platform"]["warnings"][0]


def test_doctor_failure_lists_every_later_stage_as_not_run(built: dict[str, Path], tmp_path: Path) -> None:
    bad = tmp_path / "bad.loadable"
    bad.write_bytes(built["10.3"].read_bytes())
    code, _, rec = doctor(tmp_path / "emu", bad, "10.3", tmp_path / "rec.yaml")  # no sidecar for it
    assert code != 0 and rec["failed_stage"] == "artifact"
    assert [s["stage"] for s in rec["stages"]] == list(STAGES)
    after = [s for s in rec["stages"][STAGES.index("artifact") + 1:]]
    assert all(s["result"] == "not run" and "'artifact' failed first" in s["detail"] for s in after)


@pytest.mark.parametrize("version", list(LINES))
def test_node_runs_the_compiled_artifact_with_backend_cudla(built: dict[str, Path], tmp_path: Path,
                                                            ros_env: dict[str, str], version: str) -> None:
    pytest.importorskip("rclpy")
    from _node_helpers import NodeRunner, RosProbe, diag_values, image_msg
    from diagnostic_msgs.msg import DiagnosticArray
    from sensor_msgs.msg import Image
    from vision_msgs.msg import Detection2DArray

    env = dict(ros_env, PYTHONPATH=f"{REPO}:{REPO / 'test'}")
    runner = NodeRunner(tmp_path, env)
    node = runner.start({"backend": "cudla", "loadable_path": str(built[version])},
                        module="_fake_cudla_env", extra_args=(str(tmp_path / "emu"), "node"))
    probe = RosProbe("e2e_probe")
    try:
        ns = node.namespace
        pub = probe.node.create_publisher(Image, f"{ns}/image", probe.qos(depth=1))
        dets = probe.collect(Detection2DArray, f"{ns}/detections")
        diags = probe.collect(DiagnosticArray, "/diagnostics")
        probe.spin_until(lambda: pub.get_subscription_count() > 0 or node.proc.poll() is not None, 60)
        # 320x240 (230 kB): a 640x480 raw frame at best effort from another process is lost with Fast
        # DDS's default shared-memory segment, which is not what this test is about
        frame = np.full((240, 320, 3), 90, np.uint8)
        got = probe.spin_until(lambda: dets or node.proc.poll() is not None, 90,
                               every=lambda: pub.publish(image_msg(frame, "rgb8", 4242)), period=2.0)
        assert dets and dets[0].header.stamp.sec == 4242, (node.output(), diag_values(diags, node.fqn))
        assert got
    finally:
        probe.close()
        rc = node.stop()
        runner.cleanup()
    assert rc == 0, node.output()
    assert "cudla" in node.output()

"""Shared by the models/README.md guide tests: the guide's commands, a copy of the models folder to run them
in, the environment of each line (the fake trtexec of its TensorRT line on PATH, the doctor and the node over
the DLA EMULATOR + fake CUDA driver). The guide's calibrate line makes the cache and the Q/DQ ONNX the
compile lines use; the commands a dry run prints are run too, as printed, in order."""

from __future__ import annotations

import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from _build_fixtures import FAKES, REPO, fake_env

from dla_infer_node.artifact.sidecar import load_artifact
from dla_infer_node.dla_build.onnx_facts import cache_scales

GUIDE = REPO / "models" / "README.md"
HARNESS = REPO / "test" / "_fake_cudla_env.py"


def guide_commands() -> list[str]:
    text = GUIDE.read_text(encoding="utf-8")
    section = text[text.index("## From ONNX to a running DLA node"):text.index("## Retrain")]
    return [ln.strip() for block in re.findall(r"```bash\n(.*?)```", section, re.S)
            for ln in block.splitlines() if ln.strip()]


def prepare(root: Path) -> list[str]:
    """A copy of the models folder under root; the guide's command lines."""
    (root / "models").mkdir()
    for f in (REPO / "models").glob("shapes_yolo.*"):
        (root / "models" / f.name).write_bytes(f.read_bytes())
    commands = guide_commands()
    assert [c.split()[:2] for c in commands[:2]] == [["dla_build", "calibrate"], ["dla_build", "convert"]]
    assert [c.split()[0] for c in commands] == ["dla_build"] * 7 + ["dla_doctor", "dla_infer_node"]
    return commands


def version_of(cmd: str) -> str:
    """The TensorRT a guide line is for: its --trt-version, else jp7 -> 11.4.1, else 10.3 (JetPack 6)."""
    m = re.search(r"--trt-version[ =](\S+)", cmd)
    return m.group(1) if m else ("11.4.1" if "jp7" in cmd else "10.3")


def line_env(cmd: str, ros_env: dict[str, str]) -> dict[str, str]:
    """The fake trtexec of the TensorRT the command is for on PATH (none exists for 11.2: 11.4.1's)."""
    version = version_of(cmd)
    fake = fake_env(version if (FAKES / f"trt-{version}").is_dir() else "11.4.1")
    env = dict(ros_env, PATH=fake["PATH"], FAKE_TRTEXEC_PYTHON=fake["FAKE_TRTEXEC_PYTHON"])
    env["PYTHONPATH"] = f"{REPO}:{REPO / 'test'}"
    return env


def run_line(argv: list[str], root: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """One command as a user types it: dla_build / dla_doctor through this checkout, trtexec from PATH."""
    if argv[0] == "dla_build":
        head = [sys.executable, "-m", "dla_infer_node.dla_build.build_cli"]
    elif argv[0] == "dla_doctor":
        head = [sys.executable, str(HARNESS), str(root / "emu"), "doctor"]
    else:
        head = [argv[0]]
    return subprocess.run(head + argv[1:], cwd=root, env=env, capture_output=True, text=True, timeout=300)


def check_sidecar(root: Path, out: Path, version: str) -> dict:
    """The sidecar loads as the node loads it, says its line, and its file paths resolve from its folder."""
    art = load_artifact(root / f"{out}.yaml")
    side = yaml.safe_load((root / f"{out}.yaml").read_text())
    assert side["build"]["tensorrt_line"] == ("11.x-typed" if version == "11.4.1" else "10.x-flags")
    folder = (root / out).parent
    recorded = [side["source_model"]["path"], side["build"]["built_from"]["path"],
                side["build"]["precision_source"]["path"]]
    for path in filter(None, recorded):
        assert not Path(path).is_absolute() and (folder / path).is_file(), path
    assert art.loadable_path == root / out
    return side


def run_printed(stdout: str, root: Path, env: dict[str, str]) -> list[list[str]]:
    """Every command a dry run printed, run as printed, in order, from the same folder."""
    printed = [shlex.split(ln) for ln in stdout.splitlines()
               if ln.startswith(("mkdir ", "dla_build ", "trtexec "))]
    for argv in printed:
        p = run_line(argv, root, env)
        assert p.returncode == 0, f"{shlex.join(argv)}\n{p.stdout}{p.stderr}"
    return printed


def run_build_and_doctor(root: Path, commands: list[str], ros_env: dict[str, str]) -> None:
    """Every dla_build line and the doctor line, each checked against what the guide says it does."""
    for line in commands[:-1]:
        cmd, _, comment = line.partition("#")
        argv = shlex.split(cmd)
        version = version_of(cmd)
        env = line_env(cmd, ros_env)
        p = run_line(argv, root, env)
        want = int(m.group(1)) if (m := re.search(r"exit (\d+)", comment)) else 0
        assert p.returncode == want, f"{line}\n{p.stdout}{p.stderr}"
        if argv[1] == "calibrate":
            assert "input images: int8 scale" in p.stdout and "100/100" in p.stderr
            cache = (root / "models" / "shapes_yolo.calib").read_text()
            assert cache.splitlines()[0] == "TRT-100300-EntropyCalibration2"  # what TensorRT 10.3 reads
            assert (root / "models" / "shapes_yolo.qdq.onnx").is_file()
        elif argv[1] == "convert":
            assert p.stdout.count("max |fp16 - fp32|") == 3
            assert (root / "models" / "shapes_yolo.fp16.onnx").is_file()
        elif "--dry-run" in argv:
            out = Path(argv[argv.index("--out") + 1])
            assert not (root / out).exists()  # nothing built yet
            printed = run_printed(p.stdout, root, env)
            assert [a[:2] for a in printed] == [["mkdir", "-p"], ["dla_build", "convert"],
                                                ["trtexec", f"--onnx={out.parent}/shapes_yolo.fp16.onnx"],
                                                ["dla_build", "sidecar"]]
            check_sidecar(root, out, version)
        elif argv[0] == "dla_build" and want == 0:
            out = Path(argv[argv.index("--out") + 1])
            side = check_sidecar(root, out, version)
            if "--calibration-cache" in argv:  # the scales we computed reach the loadable's input
                cache = Path(argv[argv.index("--calibration-cache") + 1])
                assert side["tensors"]["inputs"][0]["scale"] == pytest.approx(
                    cache_scales(root / cache)["images"], rel=1e-6)
            if "fp16" in argv:
                assert side["build"]["built_from"]["path"] == "shapes_yolo.fp16.onnx"  # beside the loadable
        elif want == 2:
            assert "builds no DLA loadable" in p.stderr and len(p.stderr.strip().splitlines()) == 1
        else:  # the doctor
            rec = yaml.safe_load((root / "build" / "jp6" / "deployment.yaml").read_text())
            assert rec["result"] == "pass" and rec["platform"]["tensorrt"]["line"] == "10.x-flags"


def run_node(argv: list[str], emu: Path, env: dict[str, str], cwd: Path) -> None:
    """The launch line: the node starts with backend cudla on the compiled artifact, then stops cleanly."""
    log = cwd / "node.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen([sys.executable, str(HARNESS), str(emu), "node", *argv[1:]], cwd=cwd, env=env,
                                stdout=fh, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and proc.poll() is None and "ready:" not in log.read_text():
            time.sleep(0.2)
        assert "ready: backend=cudla" in log.read_text(), log.read_text()
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        rc = proc.wait(30)
    assert rc == 0, log.read_text()

"""Shared by the models/README.md guide tests: the guide's commands, a copy of the models folder to run them
in, the environment of each line (the fake trtexec of its TensorRT line on PATH, the doctor and the node over
the DLA EMULATOR + fake CUDA driver). The guide's calibrate line makes the cache and the Q/DQ ONNX the
compile lines use."""

from __future__ import annotations

import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml
from _build_fixtures import REPO, fake_env

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
    assert [c.split()[0] for c in commands] == ["dla_build"] * 6 + ["dla_doctor", "dla_infer_node"]
    return commands


def line_env(cmd: str, ros_env: dict[str, str]) -> dict[str, str]:
    """The fake trtexec of the TensorRT line the command is for (jp7: 11.x, else 10.x) on PATH."""
    fake = fake_env("11.4.1" if "jp7" in cmd else "10.3")
    env = dict(ros_env, PATH=fake["PATH"], FAKE_TRTEXEC_PYTHON=fake["FAKE_TRTEXEC_PYTHON"])
    env["PYTHONPATH"] = f"{REPO}:{REPO / 'test'}"
    return env


def run_build_and_doctor(root: Path, commands: list[str], ros_env: dict[str, str]) -> None:
    """Every dla_build line and the doctor line, each checked against what the guide says it does."""
    for line in commands[:-1]:
        cmd, _, comment = line.partition("#")
        argv = shlex.split(cmd)
        version = "11.4.1" if "jp7" in cmd else "10.3"
        head = ([sys.executable, "-m", "dla_infer_node.dla_build.build_cli"] if argv[0] == "dla_build"
                else [sys.executable, str(HARNESS), str(root / "emu"), "doctor"])
        p = subprocess.run(head + argv[1:], cwd=root, env=line_env(cmd, ros_env), capture_output=True,
                           text=True, timeout=120)
        want = int(m.group(1)) if (m := re.search(r"exit (\d+)", comment)) else 0
        assert p.returncode == want, f"{line}\n{p.stdout}{p.stderr}"
        if argv[1] == "calibrate":
            assert "input images: int8 scale" in p.stdout and "100/100" in p.stderr
            assert (root / "models" / "shapes_yolo.calib").is_file()
            assert (root / "models" / "shapes_yolo.qdq.onnx").is_file()
        elif argv[1] == "convert":
            assert p.stdout.count("max |fp16 - fp32|") == 3
            assert (root / "models" / "shapes_yolo.fp16.onnx").is_file()
        elif "--dry-run" in argv:
            assert "trtexec --onnx=models/shapes_yolo.onnx" in p.stdout and "dla_build sidecar" in p.stdout
            assert not (root / "build" / "shapes_yolo_fp16.loadable").exists()
        elif argv[0] == "dla_build" and want == 0:
            out = Path(argv[argv.index("--out") + 1])
            side = yaml.safe_load((root / f"{out}.yaml").read_text())
            assert side["build"]["tensorrt_line"] == ("11.x-typed" if version == "11.4.1" else "10.x-flags")
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

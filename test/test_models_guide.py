"""Every command of models/README.md's guide (compile, doctor, launch), run as written in a copy of the
models folder, with the fake trtexec of the line the command is for on PATH, and the doctor and the node
over the DLA EMULATOR + fake CUDA driver. The calibrate/convert outputs are written by _build_fixtures
until those steps land."""

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
from _build_fixtures import IN_SCALE, REPO, fake_env, write_cache, write_qdq

GUIDE = REPO / "models" / "README.md"
HARNESS = REPO / "test" / "_fake_cudla_env.py"


def guide_commands() -> list[str]:
    text = GUIDE.read_text(encoding="utf-8")
    section = text[text.index("## From ONNX to a running DLA node"):text.index("## Retrain")]
    return [ln.strip() for block in re.findall(r"```bash\n(.*?)```", section, re.S)
            for ln in block.splitlines() if ln.strip()]


def test_guide_commands_do_what_the_text_says(tmp_path: Path, ros_env: dict[str, str]) -> None:
    pytest.importorskip("cuda.bindings.cudla")
    (tmp_path / "models").mkdir()
    for f in (REPO / "models").glob("shapes_yolo.*"):
        (tmp_path / "models" / f.name).write_bytes(f.read_bytes())
    write_cache(tmp_path / "models" / "shapes_yolo.calib", {"images": IN_SCALE})
    write_qdq(tmp_path / "models")
    commands = guide_commands()
    assert [c.split()[0] for c in commands] == ["dla_build"] * 4 + ["dla_doctor", "dla_infer_node"]
    emu = tmp_path / "emu"
    for line in commands:
        cmd, _, comment = line.partition("#")
        argv = shlex.split(cmd)
        version = "11.4.1" if "jp7" in cmd else "10.3"
        fake = fake_env(version)
        env = dict(ros_env, PATH=fake["PATH"], FAKE_TRTEXEC_PYTHON=fake["FAKE_TRTEXEC_PYTHON"])
        env["PYTHONPATH"] = f"{REPO}:{REPO / 'test'}"
        if argv[0] == "dla_infer_node":
            run_node(argv, emu, env, tmp_path)
            continue
        head = ([sys.executable, "-m", "dla_infer_node.artifact.build_cli"] if argv[0] == "dla_build"
                else [sys.executable, str(HARNESS), str(emu), "doctor"])
        p = subprocess.run(head + argv[1:], cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=120)
        want = int(m.group(1)) if (m := re.search(r"exit (\d+)", comment)) else 0
        assert p.returncode == want, f"{line}\n{p.stdout}{p.stderr}"
        if "--dry-run" in argv:
            assert "trtexec --onnx=models/shapes_yolo.onnx" in p.stdout and "dla_build sidecar" in p.stdout
            assert not (tmp_path / "build" / "shapes_yolo_fp16.loadable").exists()
        elif argv[0] == "dla_build" and want == 0:
            out = Path(argv[argv.index("--out") + 1])
            side = yaml.safe_load((tmp_path / f"{out}.yaml").read_text())
            assert side["build"]["tensorrt_line"] == ("11.x-typed" if version == "11.4.1" else "10.x-flags")
        elif want == 2:
            assert "builds no DLA loadable" in p.stderr and len(p.stderr.strip().splitlines()) == 1
        else:  # the doctor
            rec = yaml.safe_load((tmp_path / "build" / "jp6" / "deployment.yaml").read_text())
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

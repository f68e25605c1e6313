"""README.md, "Running the node": the `.venv/bin/dla_infer_node ...` command runs as written.

The command is read from the README itself (so the text and the test cannot drift apart); `.venv` is the
venv this test runs in (`.venv`, or `.venv-jazzy` under `make test-jazzy`), whose console script it starts
from the checkout root. It must come up (its `ready:` line, with the remapped input topic), carry the
parameter the command sets, and stop with exit code 0 on SIGINT (Ctrl-C).
"""

from __future__ import annotations

import itertools
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _node_helpers import REPO, RosProbe, readme_command

pytest.importorskip("rclpy", reason="rclpy not importable: run the node tests in the project .venv")


def wait_for(log: Path, proc: subprocess.Popen[bytes], needle: str, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace")
        if needle in text:
            return text
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    raise AssertionError(f"no {needle!r} within {timeout} s (exit {proc.poll()}); output:\n"
                         f"{log.read_text(errors='replace')}")


def test_the_venv_command_starts_the_node_and_sigint_stops_it(tmp_path: Path,
                                                              ros_env: dict[str, str]) -> None:
    cmd = readme_command("Running the node")
    assert cmd[0] == ".venv/bin/dla_infer_node"
    script = Path(sys.prefix) / "bin" / "dla_infer_node"
    if not script.exists():
        pytest.skip(f"{script} missing: not running in a venv that scripts/setup_env.sh made")
    remaps = dict(a.split(":=", 1) for prev, a in itertools.pairwise(cmd) if prev == "-r")
    params = dict(a.split(":=", 1) for prev, a in itertools.pairwise(cmd) if prev == "-p")
    assert remaps == {"image": "/camera/image_raw"} and params == {"confidence_threshold": "0.4"}

    log = tmp_path / "node.log"
    with open(log, "wb") as fh:  # a file, not a pipe: the node can never block on a full pipe
        proc = subprocess.Popen([str(script), *cmd[1:]], stdout=fh, stderr=subprocess.STDOUT, cwd=REPO,
                                env=ros_env)
    probe = None
    try:
        text = wait_for(log, proc, "ready:", timeout=90)
        ready = next(ln for ln in text.splitlines() if "ready:" in ln)
        assert "input=/camera/image_raw" in ready, ready
        assert "backend=onnxruntime" in ready and " preprocess=cpu " in ready, ready

        from rcl_interfaces.srv import GetParameters

        probe = RosProbe("readme_run")
        reply = probe.call(GetParameters, "/dla_infer_node/get_parameters",
                           GetParameters.Request(names=["confidence_threshold"]))
        assert reply.values[0].double_value == pytest.approx(0.4)

        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 0, log.read_text(errors="replace")
        assert "stopped:" in log.read_text(errors="replace")
    finally:
        if probe is not None:
            probe.close()
        if proc.poll() is None:  # only the process this test started, by its own handle
            proc.kill()
            proc.wait(10)

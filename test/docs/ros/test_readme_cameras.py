"""README.md, "Several cameras": the `.venv/bin/dla_infer_node` command with two cameras runs as written.

The command is read from the README itself. The node must come up naming both cameras with their topics
(its `ready:` line, as the README quotes it), subscribe each camera's topic and publish each camera's
detections under its name, and stop with exit code 0 on SIGINT.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
from _node_helpers import REPO, RosProbe, readme_command

pytest.importorskip("rclpy", reason="rclpy not importable: run the node tests in the project .venv")


def test_the_two_camera_command_serves_both_cameras(tmp_path: Path, ros_env: dict[str, str]) -> None:
    cmd = readme_command("Several cameras")
    script = Path(sys.prefix) / "bin" / "dla_infer_node"
    if not script.exists():
        pytest.skip(f"{script} missing: not running in a venv that scripts/setup_env.sh made")
    log = tmp_path / "node.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen([str(script), *cmd[1:]], stdout=fh, stderr=subprocess.STDOUT, cwd=REPO,
                                env=ros_env)
    probe = RosProbe("readme_cameras")
    try:
        def started() -> bool:
            return "ready:" in log.read_text(errors="replace") or proc.poll() is not None

        assert probe.spin_until(started, 90), log.read_text(errors="replace")
        ready = next(ln for ln in log.read_text(errors="replace").splitlines() if "ready:" in ln)
        assert "cores=[0] cameras: front=/front/image_raw (core 0," in ready, ready
        assert "rear=/rear/image_raw (core 0," in ready, ready
        for camera in ("front", "rear"):
            assert probe.spin_until(lambda c=camera: probe.node.count_publishers(f"/{c}/detections") == 1
                                    and probe.node.count_subscribers(f"/{c}/image_raw") == 1, 30), camera
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 0, log.read_text(errors="replace")
    finally:
        probe.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)

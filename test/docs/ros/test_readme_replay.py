"""The README's "Replaying bags" commands, run as written (``.venv/bin/python`` -> this interpreter), and the
node's hint when its input has the other image type.

The recipe must detect: the node (compressed input), both captures, then the replay; the JSON summary
has detections of the sample bag's frames and the MCAP holds exactly the 20 arrays asked for.
"""

from __future__ import annotations

import json
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

rclpy = pytest.importorskip("rclpy", reason="rclpy is not importable (run the tests in the project .venv)")

from _node_helpers import NodeRunner, RosProbe, diag_values  # noqa: E402

REPO = Path(__file__).resolve().parents[3]


def _section_commands(title: str) -> list[str]:
    """Every command in the bash blocks of a README section, continuation lines joined."""
    text = (REPO / "README.md").read_text()
    section = text.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]
    commands: list[str] = []
    for block in re.findall(r"```bash\n(.*?)```", section, re.S):
        commands += [c.strip() for c in block.replace("\\\n", " ").splitlines() if c.strip()]
    return commands


def _argv(command: str) -> tuple[list[str], bool]:
    background = command.endswith("&")
    argv = shlex.split(command.rstrip("&").strip())
    assert argv[0] == ".venv/bin/python", command
    return [sys.executable, *argv[1:]], background


def test_the_replay_recipe_detects(tmp_path: Path, ros_env: dict[str, str]) -> None:
    commands = _section_commands("Replaying bags")
    assert [c.split()[2] for c in commands] == ["dla_infer_node.ros.node", "dla_infer_node.bags.replay",
                                              "dla_infer_node.bags.capture", "dla_infer_node.bags.capture"]
    node_cmd, replay_cmd, *capture_cmds = commands
    procs: list[subprocess.Popen[bytes]] = []
    log = tmp_path / "node.log"
    try:
        argv, background = _argv(node_cmd)
        assert background
        with open(log, "wb") as fh:
            procs.append(subprocess.Popen(argv, cwd=tmp_path, env=ros_env, stdout=fh,
                                          stderr=subprocess.STDOUT))
        deadline = time.monotonic() + 120
        while "ready:" not in log.read_text() and time.monotonic() < deadline and procs[0].poll() is None:
            time.sleep(0.2)
        assert "input=/image/compressed" in log.read_text(), log.read_text()
        captures = []
        for command in capture_cmds:  # "start them before the replay"
            argv, background = _argv(command)
            assert background
            captures.append(subprocess.Popen(argv, cwd=tmp_path, env=ros_env, stderr=subprocess.PIPE))
        procs += captures
        time.sleep(3.0)  # the captures' subscriptions are discovered
        argv, _ = _argv(replay_cmd)
        replay = subprocess.run([*argv, "--no-progress"], cwd=REPO, env=ros_env, capture_output=True,
                                text=True, timeout=180)
        assert replay.returncode == 0, replay.stderr
        errors = [c.communicate(timeout=120)[1].decode() for c in captures]
        assert [c.returncode for c in captures] == [0, 0], errors
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
                p.wait(30)
    assert procs[0].returncode == 0, log.read_text()
    summary = json.loads((tmp_path / "out" / "detections.json").read_text())
    assert summary["frames"] > 0 and summary["detections"] > 0, summary
    assert summary["frame_ids"] == ["camera"]
    from dla_infer_node.bags.bag_io import BagReader

    assert BagReader(tmp_path / "out" / "detections.mcap").topics["/detections"].message_count == 20


@pytest.mark.parametrize("transport", ["raw", "compressed"])
def test_the_node_hints_at_the_other_image_type(transport: str, node_runner: NodeRunner) -> None:
    from diagnostic_msgs.msg import DiagnosticArray
    from sensor_msgs.msg import CompressedImage, Image

    node = node_runner.start({"input_transport": transport, "diagnostics_period": 0.5})
    other, msg_type = ("image/compressed", CompressedImage) if transport == "raw" else ("image", Image)
    probe = RosProbe("hint_probe")
    try:
        probe.node.create_publisher(msg_type, f"{node.namespace}/{other}", 1)  # the camera, on the other type
        diags = probe.collect(DiagnosticArray, "/diagnostics")
        hint = f"but {node.namespace}/{other} ({msg_type.__module__.split('.')[0]}/msg/{msg_type.__name__})"

        def warned() -> bool:
            return any(st.name.startswith(node.fqn + ":") and st.level in (1, b"\x01") and hint in st.message
                       for arr in diags for st in arr.status)

        assert probe.spin_until(warned, 60), node.output()
        assert probe.spin_until(lambda: hint in node.output(), 10), node.output()
        assert f"set input_transport:={'compressed' if transport == 'raw' else 'raw'}" in node.output()
        assert diag_values(diags, node.fqn)  # the counters are still reported alongside the hint
    finally:
        probe.close()
    assert node.stop() == 0
    assert node.output().count(hint) == 1  # logged once, not every check

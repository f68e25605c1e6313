"""The README's "Replaying bags" commands, run as written (``.venv/bin/python`` -> this interpreter), and the
node's hint when its input has the other image type.

The recipes run as written, by bash in a scratch folder: the capture recipe (node, both captures, the
replay waiting for all three readers) must give both captures their 10 arrays with detections of the sample
bag's frames; the raw-image recipe must bring every frame of a VGA bag to the node, and the same lines without
the profile must not (what the text says).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

rclpy = pytest.importorskip("rclpy", reason="rclpy is not importable (run the tests in the project .venv)")

import numpy as np  # noqa: E402
from _node_helpers import NodeRunner, RosProbe, as_sourced_ros, diag_values  # noqa: E402
from rclpy.serialization import serialize_message  # noqa: E402
from sensor_msgs.msg import Image  # noqa: E402

from dla_infer_node.bags.bag_io import BagReader  # noqa: E402
from dla_infer_node.bags.bag_meta import QosProfile  # noqa: E402
from dla_infer_node.bags.bag_writer import BagWriter  # noqa: E402

REPO = Path(__file__).resolve().parents[3]


def _section_scripts(title: str) -> list[str]:
    """The bash blocks of a README section, as written."""
    text = (REPO / "README.md").read_text()
    section = text.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```bash\n(.*?)```", section, re.S)


def _run_as_written(script: str, folder: Path, env: dict[str, str], timeout: float = 300) -> str:
    """Run a README block with bash in ``folder``, which stands for the checkout: ``.venv`` is this
    interpreter's environment, ``samples`` and ``config`` the repository's; returns its output. Whatever it
    left running is stopped."""
    for name, target in ((".venv", Path(sys.prefix)), ("samples", REPO / "samples"),
                         ("config", REPO / "config")):
        if not (folder / name).exists():
            (folder / name).symlink_to(target)
    proc = subprocess.Popen(["bash", "-c", script], cwd=folder, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        out = ""
    finally:
        with contextlib.suppress(ProcessLookupError):  # its own process group: only what the script started
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)
    (folder / "script.log").write_text(out)
    assert proc.returncode == 0, f"exit {proc.returncode}:\n{out}"
    return out


def test_the_replay_and_capture_recipe_as_written(tmp_path: Path, ros_env: dict[str, str]) -> None:
    script = _section_scripts("Replaying bags")[0]
    assert "--wait-for /detections=2" in script and "wait $JSON $MCAP" in script
    out = _run_as_written(script, tmp_path, ros_env)
    assert "input=/image/compressed" in out, out
    summary = json.loads((tmp_path / "out" / "detections.json").read_text())
    assert summary["frames"] == 10 and summary["detections"] > 0, (summary, out)
    assert summary["frame_ids"] == ["camera"]
    assert BagReader(tmp_path / "out" / "detections.mcap").topics["/detections"].message_count == 10
    assert "stopped: worker joined" in out, out  # kill: an orderly stop


def _raw_bag(path: Path, frames: int) -> None:
    """A camera's recording: VGA rgb8 at 10 Hz on /camera/image_raw, offered best effort, keep last 5."""
    pixels = np.random.default_rng(1).integers(0, 256, 480 * 640 * 3, dtype=np.uint8).tobytes()
    with BagWriter(path) as bag:
        bag.add_topic("/camera/image_raw", "sensor_msgs/msg/Image",
                      qos=[QosProfile(depth=5, reliability="best_effort")])
        for i in range(frames):
            msg = Image(height=480, width=640, encoding="rgb8", step=640 * 3, data=pixels)
            msg.header.frame_id, msg.header.stamp.sec = "camera", 1 + i
            bag.write("/camera/image_raw", serialize_message(msg), log_time_ns=(1_000 + i * 100) * 1_000_000)


def _frames_in(out: str) -> int:
    found = re.findall(r"stopped: .*\(frames in (\d+),", out)
    assert len(found) == 1, out
    return int(found[0])


def test_a_raw_image_bag_arrives_whole_only_with_the_profile(tmp_path: Path, ros_env: dict[str, str]) -> None:
    script = _section_scripts("Replaying bags")[1]
    assert "my_raw_bag" in script and "_DEFAULT_PROFILES_FILE=" in script
    _raw_bag(tmp_path / "my_raw_bag", 20)
    env = as_sourced_ros({k: v for k, v in ros_env.items() if not k.endswith("_DEFAULT_PROFILES_FILE")})
    assert _frames_in(_run_as_written(script, tmp_path, env)) == 20
    # and what the text says happens without it: the same lines less the profile lose frames
    without = "\n".join(line for line in script.splitlines() if "DDS_VAR" not in line)
    assert _frames_in(_run_as_written(without, tmp_path, env)) < 20


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

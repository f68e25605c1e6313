"""Input liveness over real DDS: the node as its own process with the default QoS (best effort), frames
from this test's process. Small frames arrive and /diagnostics stays OK; a publisher that goes quiet turns
it WARN (stall); VGA rgb8 frames over the default Fast DDS settings are lost on the way (measured:
0 of 20 arriving) and /diagnostics shows WARN with the loss ratio and the remedy within a few seconds.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _node_helpers import NodeProcess, NodeRunner, RosProbe, image_msg, write_oracle_model

pytest.importorskip("rclpy", reason="rclpy not importable: run the node tests in the project .venv")
pytest.importorskip("vision_msgs.msg", reason="vision_msgs not importable: run `make venv`")

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from sensor_msgs.msg import Image

OK, WARN = (int.from_bytes(v, "little") if isinstance(v, bytes) else int(v)
            for v in (DiagnosticStatus.OK, DiagnosticStatus.WARN))


def latest_status(arrays: list[Any], fqn: str) -> tuple[int, str, dict[str, str]] | None:
    for arr in reversed(arrays):
        for st in arr.status:
            if st.name.startswith(fqn + ":"):
                return int.from_bytes(st.level, "little") if isinstance(st.level, bytes) else int(st.level), \
                    st.message, {kv.key: kv.value for kv in st.values}
    return None


@pytest.fixture(scope="module")
def node(module_tmp: Path, ros_env: dict[str, str]) -> Iterator[NodeProcess]:
    model, meta = write_oracle_model(module_tmp / "oracle")
    runner = NodeRunner(module_tmp, ros_env)
    # the shipped defaults (best effort, depth 1, loss threshold 5 %, 5 periods); only the model is tiny
    proc = runner.start({"model_path": str(model), "metadata_path": str(meta), "debug_image": False})
    try:
        yield proc
    finally:
        rc = proc.stop()
        runner.cleanup()
    assert rc == 0, proc.output()


def test_stall_then_loss_show_in_diagnostics(node: NodeProcess) -> None:
    probe = RosProbe("input_loss_probe")
    diags: list[Any] = probe.collect(DiagnosticArray, "/diagnostics")
    try:
        best_effort = probe.qos(reliable=False, depth=1)
        small = probe.node.create_publisher(Image, f"{node.namespace}/image", best_effort)
        assert probe.spin_until(lambda: small.get_subscription_count() > 0 or node.proc.poll() is not None,
                                90)
        assert node.proc.poll() is None, node.output()
        frame = image_msg(np.zeros((128, 128, 3), np.uint8), "rgb8", sec=1)
        probe.spin_until(lambda: False, 3.0, every=lambda: small.publish(frame), period=0.1)

        def status_after_frames() -> Any:
            s = latest_status(diags, node.fqn)
            return s if s and int(s[2].get("frames_in", 0)) > 0 else None

        # small frames at 10 Hz: all arrive, one matched publisher delivering, nothing lost
        level, message, values = probe.spin_until(
            lambda: (s := status_after_frames()) and s[2]["publishers_delivering"] == "1" and s,
            10.0, every=lambda: small.publish(frame), period=0.1) or (None, "", {})
        assert level == OK, (message, values, node.output())
        assert values["publishers"] == "1" and values["frames_lost"] == "0"
        assert values["loss_counting"].startswith("sequence numbers per publisher")

        # the publisher stays matched but sends nothing: WARN after 5 x 0.1 s (next diagnostics period)
        stalled = probe.spin_until(lambda: (s := latest_status(diags, node.fqn)) and "sent no frame" in s[1]
                                   and s, 10.0)
        assert stalled and stalled[0] == WARN, (stalled, node.output())
        assert "1 of 1 matched publisher(s)" in stalled[1] and stalled[2]["publishers_delivering"] == "0"
        probe.node.destroy_publisher(small)

        # VGA rgb8, best effort, 20 Hz: the default transport loses them; the node says so, with the remedy
        big = probe.node.create_publisher(Image, f"{node.namespace}/image", best_effort)
        vga = image_msg(np.full((480, 640, 3), 90, np.uint8), "rgb8", sec=2)
        lossy = probe.spin_until(lambda: (s := latest_status(diags, node.fqn)) and "input loss" in s[1] and s,
                                 20.0, every=lambda: big.publish(vga), period=0.05)
        assert lossy, f"no loss reported; last status {latest_status(diags, node.fqn)}"
        level, message, values = lossy
        assert level == WARN
        assert float(values["loss_ratio"]) > 0.05 and int(values["frames_lost"]) > 0
        assert "config/fastdds_large_images.xml" in message and "FASTDDS_DEFAULT_PROFILES_FILE" in message
    finally:
        probe.close()

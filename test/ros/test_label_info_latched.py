"""``~/label_info`` is latched: a subscriber that joins after it was published, in another process, with
transient local durability still receives it (and a volatile one in that process does not: it was late)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

rclpy = pytest.importorskip("rclpy", reason="rclpy is not importable (run the tests in the project .venv)")

from _node_helpers import ORACLE_CLASSES, NodeRunner, RosProbe, write_oracle_model  # noqa: E402

HERE = Path(__file__).resolve().parents[1]  # test/, where the helper scripts live


def test_a_late_subscriber_in_another_process_gets_label_info(tmp_path: Path, node_runner: NodeRunner,
                                                               ros_env: dict[str, str]) -> None:
    model, meta = write_oracle_model(tmp_path / "oracle")
    node = node_runner.start({"model_path": str(model), "metadata_path": str(meta),
                              "confidence_threshold": 0.4})
    topic = f"{node.namespace}/label_info"
    probe = RosProbe("label_watch")
    try:  # the node is up and its label_info publisher is on the graph: it has published already
        assert probe.spin_until(lambda: "ready:" in node.output(), 60), node.output()
        assert probe.spin_until(lambda: probe.node.count_publishers(topic) == 1, 30)
    finally:
        probe.close()
    time.sleep(1.0)
    late = subprocess.run([sys.executable, str(HERE / "_late_label_subscriber.py"), topic], env=ros_env,
                          capture_output=True, text=True, timeout=120)
    assert late.returncode == 0, late.stderr
    got = json.loads(late.stdout.strip().splitlines()[-1])
    assert got["transient_local"] == [{"classes": list(ORACLE_CLASSES), "threshold": pytest.approx(0.4)}]
    assert got["volatile"] == []  # published before this process subscribed: it really was late
    assert node.stop() == 0, node.output()


def test_label_info_is_published_again_when_the_threshold_changes_live(tmp_path: Path, node_runner: NodeRunner
                                                                       ) -> None:
    from vision_msgs.msg import LabelInfo

    model, meta = write_oracle_model(tmp_path / "oracle")
    node = node_runner.start({"model_path": str(model), "metadata_path": str(meta),
                              "confidence_threshold": 0.4})
    probe = RosProbe("label_change_watch")
    try:
        got = probe.collect(LabelInfo, f"{node.namespace}/label_info", probe.qos(transient_local=True))
        assert probe.spin_until(lambda: got, 60), node.output()
        assert got[-1].threshold == pytest.approx(0.4)
        assert [r.successful for r in probe.set_parameters(node.fqn, {"confidence_threshold": 0.7})] == [True]
        assert probe.spin_until(lambda: got[-1].threshold == pytest.approx(0.7), 20), \
            f"label_info not republished: {[m.threshold for m in got]}"
        assert [c.class_name for c in got[-1].class_map] == list(ORACLE_CLASSES)
    finally:
        probe.close()
    assert node.stop() == 0, node.output()

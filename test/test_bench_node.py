"""The node benchmark runs end to end over real DDS (four processes) and writes what it prints.

A short single round at 5 Hz: no timing is asserted (timing belongs to the benchmark itself), only that
every frame went through the real node and every reported section is there and consistent.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path


def test_one_short_round_writes_a_complete_result(tmp_path: Path, ros_env: dict[str, str]) -> None:
    out = tmp_path / "node.json"
    proc = subprocess.run(
        [sys.executable, "-m", "dla_infer_node.bench_node", "--rounds", "1", "--duration", "3",
         "--warmup", "1", "--out", str(out)], env=ros_env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(out.read_text())
    frames = result["frames"]
    assert frames["published"] >= 10
    # reliable depth 1 at 5 Hz: every frame reaches the bare subscriber and the node answers each one
    assert frames["bare_received"] == frames["node_detections"] == frames["both"] == frames["published"]
    assert result["throughput_ratio"] == 1.0
    assert result["node_counters_last_round"]["backend"] == "zero_cost"
    assert result["node_counters_last_round"]["frames_bad_input"] == "0"
    added = result["added_ms_per_frame"]
    assert len(added["p50_per_round"]) == 1 and math.isfinite(added["p50"])
    by_order = result["added_ms_by_transport_order"]
    assert by_order["node_first"]["frames"] + by_order["bare_first"]["frames"] == frames["both"]
    assert set(result["pass"]) == {"throughput", "added_latency"}
    assert "added per frame p50" in proc.stdout and str(out) in proc.stdout

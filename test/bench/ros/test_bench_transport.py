"""The transport benchmark: its README table is the one the committed JSON makes, and a small run works.

The small run (VGA, bare subscriber, best effort, 10 frames, default and profile; the stock cells too where
`ip netns` works) checks what the benchmark is for, not its timing: with the profile every frame crosses,
every cell stayed in the DDS domain this test's runner gave it, and the network namespace held only loopback.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from _node_helpers import REPO

from dla_infer_node.bench.transport_table import markdown_table

RESULT = REPO / "bench" / "results" / "transport.json"


def test_readme_transport_table_is_the_generated_one() -> None:
    # regenerate with: python -m dla_infer_node.bench.transport_table bench/results/transport.json
    doc = json.loads(RESULT.read_text())
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert markdown_table(doc) in readme, "README.md's transport table is out of date"
    assert not doc["quick"], "the committed result must be a full run"


def test_table_lists_every_cell() -> None:
    doc = json.loads(RESULT.read_text())
    table = markdown_table(doc)
    for cell in doc["cells"]:
        if "error" not in cell:
            assert f"{cell['received']}/{cell['published']}" in table


def test_small_run_profile_delivers_every_frame(tmp_path: Path, ros_env: dict[str, str]) -> None:
    out = tmp_path / "transport.json"
    env = {k: v for k, v in ros_env.items()
           if k not in ("FASTDDS_DEFAULT_PROFILES_FILE", "FASTRTPS_DEFAULT_PROFILES_FILE")}
    proc = subprocess.run([sys.executable, "-m", "dla_infer_node.bench.transport", "--quick",
                           "--frames", "10", "--sizes", "VGA", "--receivers", "bare", "--out", str(out)],
                          env=env, cwd=REPO, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(out.read_text())
    cells = {(c["setup"], c["profile"]): c for c in doc["cells"]}
    assert {c.get("domain") for c in doc["cells"]} == {int(env["ROS_DOMAIN_ID"])}, doc["cells"]
    profiled = cells[("localhost", "profile")]
    assert profiled["published"] == 10 and profiled["received"] == 10, profiled
    assert cells[("localhost", "default")]["published"] == 10
    ns = doc["stock_netns"]
    if ns["available"]:
        assert ns["links"] == ["lo"], ns  # nothing but loopback inside the namespace
        assert cells[("stock_netns", "profile")]["received"] == 10, cells[("stock_netns", "profile")]
        leftover = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert "dla_bench_" not in leftover, "the benchmark left its namespace behind"
    else:
        assert ns["why_not"] and ("stock_netns", "default") not in cells
    assert markdown_table(doc).count("| VGA ") == 1  # only what was measured: VGA, best effort, bare

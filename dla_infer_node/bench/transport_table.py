"""The README's transport table, made from ``bench/results/transport.json`` (``bench.transport``).

``python -m dla_infer_node.bench.transport_table [FILE]`` prints it; a test checks that README.md holds
exactly what the committed JSON gives.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from dla_infer_node.bench.transport_roles import SIZES

_COLUMNS = (("localhost", "default"), ("localhost", "profile"), ("stock_netns", "default"),
            ("stock_netns", "profile"))
_HEADINGS = ("Fast DDS defaults, discovery on localhost", "profile in both processes",
             "stock (no ROS_* variables), loopback-only netns", "stock + profile, netns")


def _cell(result: dict[str, Any] | None) -> str:
    if result is None:
        return "–"
    if "error" in result:
        return "failed"
    lat = result["latency_ms"]
    text = f"{result['received']}/{result['published']}"
    if lat["p50"] is not None:
        text += f" · {lat['p50']:.1f} / {lat['p95']:.1f} ms"
    return text


def markdown_table(doc: dict[str, Any]) -> str:
    """One row per frame size, reliability and receiver; cells 'received/published · p50 / p95 ms'."""
    index = {(c["setup"], c["size"], c["reliability"], c["profile"], c["receiver"]): c for c in doc["cells"]}
    lines = ["| rgb8 frame | reliability | receiver | " + " | ".join(_HEADINGS) + " |",
             "| --- | --- | --- | " + " | ".join("---" for _ in _HEADINGS) + " |"]
    measured = {key for c in doc["cells"] for key in (c["size"], c["reliability"], c["receiver"])}
    for size, (width, height) in SIZES.items():
        for rel in ("best_effort", "reliable"):
            for receiver in ("bare", "node"):
                if not {size, rel, receiver} <= measured:
                    continue
                cells = [_cell(index.get((setup, size, rel, prof, receiver))) for setup, prof in _COLUMNS]
                label = "bare rclpy subscriber" if receiver == "bare" else "the node (`frames_in`)"
                lines.append(f"| {size} {width}×{height} ({width * height * 3 / 1e6:.1f} MB) | "
                             f"{rel.replace('_', ' ')} | {label} | " + " | ".join(cells) + " |")
    ns = doc["stock_netns"]
    note = "" if ns["available"] else f" Network namespace unavailable: {ns['why_not']}."
    lines.append("")
    lines.append(f"{doc['frames_per_cell']} frames per cell at {doc['rate_hz']:g} Hz, publisher "
                 f"{doc['publisher_qos']}, receiver {doc['receiver_qos']}; latency p50 / p95 from publish to "
                 f"the receiver's callback.{note}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    path = Path(argv[0]) if argv else Path("bench/results/transport.json")
    print(markdown_table(json.loads(path.read_text())))
    return 0


if __name__ == "__main__":
    sys.exit(main())

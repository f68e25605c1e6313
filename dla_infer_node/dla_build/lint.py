"""Check an ONNX graph against TensorRT's documented DLA layer support, before going to the Jetson.

Prints one row per network input, the opset and every node: name, op, verdict, reason. Verdicts:
``dla`` (runs on the DLA), ``folded`` (a build-time constant or a pass-through: no layer),
``gpu-fallback`` (the DLA cannot run it: needs ``--allowGPUFallback``, so no standalone loadable),
``forbids-standalone`` (a hard violation such as a dynamic dimension: no DLA build accepts it as is).
Exit status 0 only when a ``--buildDLAStandalone`` build can succeed, 1 when it cannot (the offending
nodes are named), 2 on bad input. The rules and their sources: ``dla_infer_node/dla_build/dla_rules.py``.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from dla_infer_node.core.errors import ParameterError
from dla_infer_node.dla_build.lint_graph import BLOCKING, lint

EXIT_OK, EXIT_CANNOT = 0, 1
_COLUMNS = ("name", "op", "verdict", "reason")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", metavar="MODEL.onnx", help="the ONNX graph to check")
    parser.add_argument("--batch", type=int, default=None, metavar="N",
                        help="the batch the loadable is built for (pins a dynamic batch; allows N > 1)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON (for machines)")


def format_table(report: dict[str, Any]) -> str:
    rows = [tuple(str(r[c]) for c in _COLUMNS) for r in report["rows"]]
    widths = [min(max(len(c), *(len(r[i]) for r in rows)), 48) for i, c in enumerate(_COLUMNS[:3])]
    lines = ["  ".join(c.upper().ljust(w) for c, w in zip(_COLUMNS, widths, strict=False)) + "  REASON"]
    for row in rows:
        lines.append("  ".join(v.ljust(w) for v, w in zip(row[:3], widths, strict=False)) + "  " + row[3])
    return "\n".join([*lines, summary(report)])


def summary(report: dict[str, Any]) -> str:
    c = report["counts"]
    head = (f"{sum(c.values())} nodes: {c['dla']} on DLA, {c['folded']} folded, {c['gpu-fallback']} need GPU "
            f"fallback, {c['forbids-standalone']} forbid standalone")
    if report["standalone_ok"]:
        return f"{head}. --buildDLAStandalone: can build"
    names = report["offending"]
    shown = ", ".join(names[:12]) + (f", ... ({len(names) - 12} more)" if len(names) > 12 else "")
    return f"{head}. --buildDLAStandalone: cannot build; offending: {shown}"


def run(args: argparse.Namespace) -> int:
    if args.batch is not None and args.batch < 1:
        raise ParameterError("--batch", args.batch, "an integer >= 1")
    report = lint(args.model, args.batch)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(format_table(report))
    blocking = [r for r in report["rows"] if r["verdict"] in BLOCKING]
    return EXIT_OK if not blocking else EXIT_CANNOT

"""The result file of a benchmark (``write``: JSON, and a line saying where), and the command of an
accuracy benchmark (``run``): ``--out FILE`` and ``--table`` (the README's markdown table, made from that
file, so the README and the measurement cannot drift apart)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any


def run(
    argv: list[str] | None,
    name: str,
    doc: str | None,
    options: Callable[[argparse.ArgumentParser], None],
    measure: Callable[[argparse.Namespace], dict[str, Any]],
    table: Callable[[argparse.Namespace, dict[str, Any]], str],
) -> int:
    """The command of accuracy benchmark ``bench.<name>``: its ``options``, then ``--out`` (default
    ``bench/results/<name>.json``) and ``--table``; measures and writes the file, or with ``--table`` prints
    the README table of the existing file and stops."""
    parser = argparse.ArgumentParser(prog=f"bench.{name}", description=(doc or "").splitlines()[0])
    options(parser)
    default_out = f"bench/results/{name}.json"
    parser.add_argument("--out", type=Path, default=Path(default_out),
                        help=f"result JSON (default {default_out})")
    parser.add_argument("--table", action="store_true",
                        help="print the README table of --out's JSON and stop")
    args = parser.parse_args(argv)
    if args.table:
        print(table(args, json.loads(Path(args.out).read_text(encoding="utf-8"))))
        return 0
    write(args.out, measure(args))
    return 0


def write(path: Path | str, doc: dict[str, Any]) -> None:
    """Write a benchmark's result file (JSON) and say where."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {path}")

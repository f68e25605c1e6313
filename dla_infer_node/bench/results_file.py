"""The result file of an accuracy benchmark: ``--out FILE`` (JSON) and ``--table`` (the README's markdown
table, made from that file, so the README and the measurement cannot drift apart)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any


def add_arguments(parser: argparse.ArgumentParser, default_out: str) -> None:
    parser.add_argument("--out", type=Path, default=Path(default_out),
                        help=f"result JSON (default {default_out})")
    parser.add_argument("--table", action="store_true",
                        help="print the README table of --out's JSON and stop")


def print_table(args: argparse.Namespace, table: Callable[[dict[str, Any]], str]) -> bool:
    """With ``--table``: print the table of the existing result file and say so."""
    if args.table:
        print(table(json.loads(Path(args.out).read_text(encoding="utf-8"))))
    return bool(args.table)


def write(path: Path, doc: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")

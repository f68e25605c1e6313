"""YAML files read with one-line errors: file, line, column and the problem, never PyYAML's 8-line report.

PyYAML's exception text spans several lines (context, snippet, caret); a node's startup error must be one
line, so only the mark and the problem are kept.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def yaml_problem(exc: Exception) -> str:
    """``line L, column C: problem`` (1-based) for a PyYAML error; its first line for anything else."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or getattr(exc, "context", None) or str(exc)
    text = " ".join(str(problem).split())
    if mark is None:
        return text
    return f"line {mark.line + 1}, column {mark.column + 1}: {text}"


def read_yaml(path: Path) -> Any:
    """Parse ``path``; raises ``ValueError`` with a one-line reason (I/O, UTF-8 or syntax)."""
    import yaml  # local: keeps the import graph of the package light

    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read: {exc}") from exc
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValueError(f"YAML syntax error at {yaml_problem(exc)}") from exc

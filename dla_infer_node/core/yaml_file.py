"""The one way the package reads YAML (metadata, sidecars, parameter files, bag metadata): safe, bounded, and
with one-line errors (file, line, column and the problem, never PyYAML's 8-line report).

Bounded because a few hundred bytes of YAML can describe far more than they hold: anchors and aliases
(``&a`` / ``*a``) reuse a node, so nine lists of nine aliases each expand to 9**9 strings, and every
consumer that walks or prints the value pays for the expansion. The parsed node graph is measured with each
alias counted as often as it is used, before any Python object is built; past :data:`MAX_YAML_NODES` the
file is refused, as is a node that contains itself. Nesting deeper than the parser's recursion allows is
refused in one line too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

# Nodes a file may expand to, aliases counted at every use; far above any metadata, sidecar, parameter or
# bag metadata file (a bag split into 10,000 files is ~100,000 nodes), far below what takes seconds to walk.
MAX_YAML_NODES = 1_000_000


def yaml_problem(exc: Exception) -> str:
    """``line L, column C: problem`` (1-based) for a PyYAML error; its first line for anything else."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or getattr(exc, "context", None) or str(exc)
    text = " ".join(str(problem).split())
    if mark is None:
        return text
    return f"line {mark.line + 1}, column {mark.column + 1}: {text}"


def _children(node: Any) -> list[Any]:
    """The nodes a composed PyYAML node holds (its ``id`` is "scalar", "sequence" or "mapping")."""
    if node.id == "sequence":
        return list(node.value)
    if node.id == "mapping":
        return [n for pair in node.value for n in pair]
    return []


def expanded_size(root: Any, limit: int = MAX_YAML_NODES) -> int:
    """Nodes under ``root`` (a composed PyYAML node) with shared (aliased) nodes counted at every use.

    Iterative, memoised per node, so it costs the node graph's size however large the expansion; stops
    counting past ``limit`` (returns a number above it). ``ValueError`` for a node that contains itself.
    """
    size: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            open_nodes.discard(key)
            size[key] = min(limit + 1, 1 + sum(size[id(c)] for c in _children(node)))
            continue
        if key in size:
            continue
        if key in open_nodes:
            raise ValueError(f"line {node.start_mark.line + 1}: an alias refers to a node that contains it")
        open_nodes.add(key)
        stack.append((node, True))
        for child in _children(node):
            if id(child) in open_nodes:
                raise ValueError(f"line {child.start_mark.line + 1}: an alias refers to a node that "
                                 f"contains it")
            if id(child) not in size:
                stack.append((child, False))
    return size[id(root)]


def parse_yaml(text: str, limit: int = MAX_YAML_NODES) -> Any:
    """The value of one YAML document (safe tags only); ``ValueError`` with a one-line reason for a syntax
    error, nesting too deep to parse, a self-containing alias or more than ``limit`` expanded nodes."""
    import yaml  # local: keeps the import graph of the package light

    # the pure-Python parser: too deep a nesting ends in RecursionError, never in a crash of the C one
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        n = expanded_size(node, limit)
        if n > limit:
            raise ValueError(f"expands to more than {limit:,} values once its aliases (*name) are replaced "
                             f"by what they refer to; refused")
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise ValueError(f"YAML syntax error at {yaml_problem(exc)}") from exc
    except RecursionError:
        raise ValueError("nested too deeply to parse (lists or mappings inside each other hundreds of levels "
                         "deep)") from None
    finally:
        loader.dispose()


def read_yaml(path: Path, limit: int = MAX_YAML_NODES) -> Any:
    """Parse ``path`` (see :func:`parse_yaml`); ``ValueError`` with a one-line reason (I/O, UTF-8, syntax,
    nesting, expansion)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read: {exc}") from exc
    return parse_yaml(text, limit)

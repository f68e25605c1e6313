"""The one YAML reader: what it refuses (nesting past the parser's recursion, alias expansion past the cap,
a node containing itself) in one line, and that ordinary anchors, aliases and merge keys still read."""

from __future__ import annotations

import time

import pytest

from dla_infer_node.core.yaml_file import parse_yaml


def test_anchors_aliases_and_merge_keys_still_read() -> None:
    doc = parse_yaml("base: &b {x: 1, y: 2}\nd:\n  <<: *b\n  z: 3\nl: [*b, *b]\n")
    assert doc == {"base": {"x": 1, "y": 2}, "d": {"x": 1, "y": 2, "z": 3}, "l": [{"x": 1, "y": 2}] * 2}


def _doubling(levels: int, merge: bool) -> str:
    """Each level refers to the previous one twice: 2**levels values once expanded."""
    lines = ["l0: &l0 {k: v}" if merge else "l0: &l0 [v, v]"]
    for i in range(1, levels + 1):
        lines.append(f"l{i}: &l{i} {{<<: [*l{i - 1}, *l{i - 1}], k{i}: v}}" if merge
                     else f"l{i}: &l{i} [*l{i - 1}, *l{i - 1}]")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("merge", [False, True], ids=["lists", "merge_keys"])
def test_alias_expansion_is_capped(merge: bool) -> None:
    assert parse_yaml(_doubling(10, merge), limit=100_000) is not None  # ~2**11 values: fine
    start = time.perf_counter()
    with pytest.raises(ValueError, match="expands to more than 100,000 values") as info:
        parse_yaml(_doubling(60, merge), limit=100_000)  # 2**61 values if expanded
    assert "\n" not in str(info.value)
    assert time.perf_counter() - start < 5  # refused from the node graph, before anything is built


def test_a_node_that_contains_itself_is_refused() -> None:
    with pytest.raises(ValueError, match="line 1: an alias refers to a node that contains it"):
        parse_yaml("&a [1, *a]")


def test_nesting_past_the_recursion_limit_is_one_line() -> None:
    with pytest.raises(ValueError, match="nested too deeply") as info:
        parse_yaml("input: " + "[" * 10_000 + "]" * 10_000)
    assert "\n" not in str(info.value)
    assert parse_yaml("[" * 50 + "]" * 50) is not None  # ordinary depths read


def test_syntax_errors_keep_line_and_column() -> None:
    with pytest.raises(ValueError, match="YAML syntax error at line 3, column 1: expected "):
        parse_yaml("a: 1\nb: [1, 2\n")

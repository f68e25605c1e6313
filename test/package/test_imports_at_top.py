"""The package's own imports sit at module top. An import of a ``dla_infer_node`` module inside a function
needs a reason written beside it: a comment on its line, or on the comment lines directly above it (one
comment may cover a group of imports right under it). Reasons that hold: the module loads rclpy or the ROS
message packages where the caller must run without them, an accelerator library, or an import error the
caller turns into its own. Accelerator and third-party libraries themselves are not counted here
(ARCHITECTURE.md asks for those to be lazy). No module is allowed an unreasoned one."""

from __future__ import annotations

from pathlib import Path

from _imports import PKG_NAME, imports_of, package_modules


def _has_reason(lines: list[str], line: int) -> bool:
    """A comment on the import's line, or on the lines directly above it (a group of imports shares one)."""
    if "#" in lines[line - 1]:
        return True
    i = line - 2
    while i >= 0:
        text = lines[i].strip()
        if text.startswith("#"):
            return True
        if not text.startswith(("import ", "from ")):
            return False
        i -= 1
    return False


def unreasoned_lazy_imports(path: Path) -> list[int]:
    """Lines of the in-function imports of the package's own modules that carry no reason comment."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found = sorted({i.line for i in imports_of(path)
                    if not i.module_level and i.name.split(".")[0] == PKG_NAME})
    return [n for n in found if not _has_reason(lines, n)]


def test_the_counter_sees_lazy_imports_and_their_reasons(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from dla_infer_node.core import errors\n"          # module top: fine
        "def a():\n    from dla_infer_node.core import synth\n"  # no reason: counted
        "def b():\n    import numpy\n"                         # not the package's own: not counted
        "def c():\n    # loads rclpy: the caller runs without ROS\n"
        "    from dla_infer_node.ros import node\n    from dla_infer_node.ros import qos\n"
        "def d():\n    from dla_infer_node.ros import node  # loads rclpy\n"
        "def e():\n    x = 1  # a comment elsewhere\n\n    from dla_infer_node.core import nms\n")
    assert unreasoned_lazy_imports(probe) == [3, 15]


def test_own_imports_sit_at_module_top_or_say_why_not() -> None:
    over = []
    for name, path in package_modules().items():
        lines = unreasoned_lazy_imports(path)
        if lines:
            rel = path.relative_to(path.parents[len(name.split(".")) - 1]).as_posix()
            over.append(f"{rel}: lines {lines}")
    assert over == [], ("imports of the package's own modules inside functions without a reason comment; "
                        "move them to module top or write why:\n" + "\n".join(over))

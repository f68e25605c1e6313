"""Static import facts about Python files, for the suite check (no core test imports ROS) and package.xml's.

Nothing here imports the code it reads: a file is parsed with ``ast``, so the facts hold on an interpreter
that lacks rclpy (the Python 3.10 core run) and for lazy imports inside functions alike.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PKG_NAME = "dla_infer_node"
PKG = REPO / PKG_NAME


@dataclass(frozen=True)
class Import:
    line: int
    name: str          # absolute dotted name (relative imports resolved)
    module_level: bool  # False: inside a function or class body (a lazy import)


def _package_of(path: Path) -> str:
    """Dotted package a file's relative imports resolve against ('' outside dla_infer_node)."""
    try:
        rel = path.resolve().relative_to(REPO)
    except ValueError:
        return ""
    parts = rel.with_suffix("").parts
    return ".".join(parts[:-1]) if parts and parts[0] == PKG_NAME else ""


def _resolve(node: ast.ImportFrom, package: str) -> str:
    if not node.level:
        return node.module or ""
    base = package.split(".")[: max(0, len(package.split(".")) - node.level + 1)]
    return ".".join([*base, node.module] if node.module else base)


@cache
def imports_of(path: Path) -> tuple[Import, ...]:
    """Every import statement of a file; ``from pkg import mod`` also yields ``pkg.mod`` (it may be one)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = _package_of(path)
    out: list[Import] = []

    def visit(node: ast.AST, module_level: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                out.extend(Import(child.lineno, a.name, module_level) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                name = _resolve(child, package)
                out.append(Import(child.lineno, name, module_level))
                out.extend(Import(child.lineno, f"{name}.{a.name}", module_level) for a in child.names
                           if a.name != "*")
            inner = isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda))
            visit(child, module_level and not inner)

    visit(tree, True)
    return tuple(out)


def importorskip_names(path: Path) -> set[str]:
    """Modules a file asks ``pytest.importorskip`` for: imports that would silently skip where missing."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name == "importorskip" and isinstance(node.args[0].value, str):
                out.add(node.args[0].value)
    return out


def package_modules() -> dict[str, Path]:
    """Dotted name -> file for every module of the package (``__init__`` as the package itself)."""
    out = {}
    for path in sorted(PKG.rglob("*.py")):
        parts = path.relative_to(REPO).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out

"""The package's rooms depend one way: core <- artifact <- backends <- {ros, bags, cli, bench}; bags needs
only core; the build tool dla_build reads core, artifact and bags (calibration frames from a recording).

Checked two ways: statically (every import statement, including the lazy ones inside functions, of every
module in a room) and at run time (importing every module of core, artifact and backends in a fresh
interpreter leaves rclpy and every CUDA module out of ``sys.modules``). Within the rooms, modules depend one
way too: no import circles, whether the imports sit at module level or inside functions. ARCHITECTURE.md
names every module.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from _imports import REPO, imports_of, package_modules

PKG = Path(__file__).resolve().parents[2] / "dla_infer_node"
ROOMS = ("core", "artifact", "dla_build", "backends", "ros", "bags", "cli", "bench")
# what each room may import from the package (itself always)
ALLOWED = {
    "core": set(),
    "artifact": {"core"},
    "dla_build": {"core", "artifact", "bags"},  # calibration reads frames from a recording (bags.bag_io)
    "backends": {"core", "artifact"},
    "ros": {"core", "artifact", "backends"},
    "bags": {"core"},
    "cli": {"core", "artifact", "backends", "ros", "bags"},
    "bench": {"core", "artifact", "dla_build", "backends", "ros", "bags", "cli"},
}
ROS_MODULES = ("rclpy", "rcl_interfaces", "sensor_msgs", "std_msgs", "vision_msgs", "diagnostic_msgs",
               "builtin_interfaces", "lifecycle_msgs", "launch", "launch_ros")
CUDA_MODULES = ("cuda", "cupy", "pycuda", "tensorrt")
# rooms that may never import these at all, not even lazily
FORBIDDEN = {"core": ROS_MODULES + CUDA_MODULES + ("onnxruntime",),
             "artifact": ROS_MODULES + CUDA_MODULES, "dla_build": ROS_MODULES + CUDA_MODULES,
             "backends": ROS_MODULES}


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """Every absolute module name an import statement in ``path`` names (relative imports resolved)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = ".".join(path.relative_to(PKG.parent).with_suffix("").parts[:-1])
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                name = ".".join([*base, node.module] if node.module else base)
            else:
                name = node.module or ""
            out.append((node.lineno, name))
            # `from dla_infer_node import ros` names a room through the alias
            if name == "dla_infer_node":
                out += [(node.lineno, f"dla_infer_node.{a.name}") for a in node.names]
    return out


def modules_of(room: str) -> list[Path]:
    return sorted((PKG / room).glob("*.py"))


def test_every_module_lives_in_a_room() -> None:
    loose = sorted(p.name for p in PKG.glob("*.py") if p.name != "__init__.py")
    assert loose == [], f"modules outside the rooms {ROOMS}: {loose}"
    rooms = sorted(p.name for p in PKG.iterdir() if p.is_dir() and p.name != "__pycache__")
    assert rooms == sorted(ROOMS)


@pytest.mark.parametrize("room", ROOMS)
def test_room_imports_only_downstream(room: str) -> None:
    bad = []
    for path in modules_of(room):
        for line, name in imported_modules(path):
            parts = name.split(".")
            inside = parts[0] == "dla_infer_node" and len(parts) > 1 and parts[1] in ROOMS
            if inside and parts[1] != room and parts[1] not in ALLOWED[room]:
                bad.append(f"{path.relative_to(PKG.parent)}:{line} imports {name}")
            if parts[0] in FORBIDDEN.get(room, ()):
                bad.append(f"{path.relative_to(PKG.parent)}:{line} imports {name}")
    assert bad == [], "layering broken:\n" + "\n".join(bad)


def test_the_checker_sees_lazy_and_relative_imports(tmp_path: Path) -> None:
    # the static check must not be vacuous: a lazy import inside a function and a relative import count
    room = PKG / "core"
    probe = room / "_layering_probe.py"
    probe.write_text("def f():\n    import rclpy\n    from ..ros import node\n")
    try:
        names = [n for _, n in imported_modules(probe)]
    finally:
        probe.unlink()
    assert names == ["rclpy", "dla_infer_node.ros"]


def test_core_artifact_backends_import_without_ros_or_cuda() -> None:
    rooms = ("core", "artifact", "dla_build", "backends")
    mods = [f"dla_infer_node.{r}.{p.stem}" for r in rooms for p in modules_of(r) if p.stem != "__init__"]
    code = ("import importlib, sys\n"
            f"for m in {mods!r}: importlib.import_module(m)\n"
            f"bad = sorted(k for k in sys.modules if k.split('.')[0] in {ROS_MODULES + CUDA_MODULES!r})\n"
            "print(repr(bad))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout + out.stderr
    assert len(mods) > 20


def import_circles(modules: dict[str, Path]) -> set[frozenset[str]]:
    """Each set of modules that import each other, directly or around a ring, lazily or not."""
    graph = {m: {i.name for i in imports_of(path) if i.name in modules and i.name != m}
             for m, path in modules.items()}

    def reachable(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for name in graph[todo.pop()] - seen:
                seen.add(name)
                todo.append(name)
        return seen

    reach = {m: reachable(m) for m in graph}
    return {frozenset({m} | {n for n in reach[m] if m in reach[n]}) for m in graph if m in reach[m]}


def test_the_circle_finder_sees_rings_and_imports_inside_functions(tmp_path: Path) -> None:
    sources = {"a": "import b\n", "b": "def f():\n    from c import x\n", "c": "from a import y\n",
               "d": "import a\n", "e": "import d\n"}
    for name, text in sources.items():
        (tmp_path / f"{name}.py").write_text(text)
    modules = {name: tmp_path / f"{name}.py" for name in sources}
    assert import_circles(modules) == {frozenset("abc")}


def test_no_import_circles() -> None:
    circles = sorted(sorted(c) for c in import_circles(package_modules()))
    assert circles == [], f"import circles (imports inside functions count): {circles}"


def test_architecture_names_every_module() -> None:
    """Named: ``room/module.py``, ``room.module``, or `module` in its room's row of the folders table."""
    text = (REPO / "ARCHITECTURE.md").read_text(encoding="utf-8")
    rows = {line.split("`")[1]: line for line in text.splitlines() if line.startswith("| `dla_infer_node/")}
    missing = []
    for name in package_modules():
        parts = name.split(".")
        if len(parts) < 3:  # the package and its rooms (the table's folders)
            continue
        room, stem = parts[1], parts[-1]
        row = rows.get(f"dla_infer_node/{room}/", "")
        if f"{room}/{stem}.py" not in text and f"{room}.{stem}" not in text and f"`{stem}`" not in row:
            missing.append(name)
    assert missing == [], f"{len(missing)} modules not in ARCHITECTURE.md: {missing}"


def test_build_cli_dispatches_by_a_table_of_functions() -> None:
    """Readers and tools can follow every subcommand to its function: no importlib on module-name strings."""
    from dla_infer_node.dla_build import build_cli

    source = (PKG / "dla_build" / "build_cli.py").read_text()
    assert "importlib" not in source
    assert list(build_cli.SUBCOMMANDS) == ["lint", "trim", "calibrate", "convert", "compile", "sidecar"]
    for name, step in build_cli.SUBCOMMANDS.items():
        assert callable(step.run) and callable(step.add_arguments), name
        assert step.run.__module__.startswith("dla_infer_node.dla_build."), name

"""The package's rooms depend one way: core <- artifact <- backends <- {ros, bags, cli, bench}; bags needs
only core, and artifact reads it (calibration frames from a recording).

Checked two ways: statically (every import statement, including the lazy ones inside functions, of every
module in a room) and at run time (importing every module of core, artifact and backends in a fresh
interpreter leaves rclpy and every CUDA module out of ``sys.modules``).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "dla_infer_node"
ROOMS = ("core", "artifact", "backends", "ros", "bags", "cli", "bench")
# what each room may import from the package (itself always)
ALLOWED = {
    "core": set(),
    "artifact": {"core", "bags"},  # calibration reads frames from a recording (bags.bag_io)
    "backends": {"core", "artifact"},
    "ros": {"core", "artifact", "backends"},
    "bags": {"core"},
    "cli": {"core", "artifact", "backends", "ros", "bags"},
    "bench": {"core", "artifact", "backends", "ros", "bags", "cli"},
}
ROS_MODULES = ("rclpy", "rcl_interfaces", "sensor_msgs", "std_msgs", "vision_msgs", "diagnostic_msgs",
               "builtin_interfaces", "lifecycle_msgs", "launch", "launch_ros")
CUDA_MODULES = ("cuda", "cupy", "pycuda", "tensorrt")
# rooms that may never import these at all, not even lazily
FORBIDDEN = {"core": ROS_MODULES + CUDA_MODULES + ("onnxruntime",),
             "artifact": ROS_MODULES + CUDA_MODULES, "backends": ROS_MODULES}


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
    rooms = ("core", "artifact", "backends")
    mods = [f"dla_infer_node.{r}.{p.stem}" for r in rooms for p in modules_of(r) if p.stem != "__init__"]
    code = ("import importlib, sys\n"
            f"for m in {mods!r}: importlib.import_module(m)\n"
            f"bad = sorted(k for k in sys.modules if k.split('.')[0] in {ROS_MODULES + CUDA_MODULES!r})\n"
            "print(repr(bad))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout + out.stderr
    assert len(mods) > 20

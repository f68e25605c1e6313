"""Which test files are "node" tests (they need rclpy, the ROS messages or launch) and which are "core".

The split is read from the files themselves, never imported (an interpreter without rclpy must be able to
sort them): a test file is a node test when it, or a test helper it imports (``test/_*.py``), does any of
  - import a ROS package (``rclpy``, a message package, ``launch``...), at module level or lazily;
  - import a module of dla_infer_node that imports one, lazily included (``bags.replay`` imports rclpy
    inside ``main``), or name such a module in a string (``python -m dla_infer_node.bags.replay``);
  - ask ``pytest.importorskip`` for a ROS package (that would skip silently where ROS is missing);
  - carry ``pytest.mark.node`` (the explicit way, for what the rules above cannot see).
Everything else is core: it must pass on Python 3.10 without any ROS wheel (`make test-py310`).
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

from _imports import importorskip_names, imports_of, package_modules, string_constants

TEST_DIR = Path(__file__).resolve().parent
ROS_PACKAGES = frozenset({
    "rclpy", "rcl_interfaces", "rosidl_runtime_py", "rosbag2_py", "builtin_interfaces", "std_msgs",
    "sensor_msgs", "geometry_msgs", "diagnostic_msgs", "lifecycle_msgs", "vision_msgs", "launch",
    "launch_ros", "launch_testing", "launch_testing_ros",
})  # not ament_index_python: core.resources tries it and falls back without ROS


@cache
def _ros_modules_of_package() -> frozenset[str]:
    """Modules of dla_infer_node that import a ROS package, directly or through each other, lazily too."""
    modules = package_modules()
    needs: dict[str, bool] = {}

    def needs_ros(name: str) -> bool:
        if name not in needs:
            needs[name] = False  # cycles: assume no until shown otherwise
            needs[name] = any(
                imp.name.split(".")[0] in ROS_PACKAGES
                or (imp.name in modules and imp.name != name and needs_ros(imp.name))
                for imp in imports_of(modules[name]))
        return needs[name]

    return frozenset(name for name in modules if needs_ros(name))


def _names_ros(name: str) -> bool:
    return name.split(".")[0] in ROS_PACKAGES or name in _ros_modules_of_package()


@cache
def is_node_test_file(path: Path) -> bool:
    path = path.resolve()
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    if any(isinstance(n, ast.Attribute) and n.attr == "node" and isinstance(n.value, ast.Attribute)
           and n.value.attr == "mark" for n in ast.walk(tree)):  # pytest.mark.node
        return True
    for imp in imports_of(path):
        if _names_ros(imp.name):
            return True
        helper = TEST_DIR / f"{imp.name}.py"
        if imp.name.startswith("_") and helper.is_file() and helper != path and is_node_test_file(helper):
            return True
    if any(_names_ros(name) for name in importorskip_names(path)):
        return True
    return any(s in _ros_modules_of_package() for s in string_constants(path))

"""package.xml declares what the installed package imports (a `rosdep check` without rosdep).

Every third-party module that a module of dla_infer_node or a launch file imports (lazy imports inside
functions included) must be either
  - declared in package.xml as an <exec_depend> with its rosdep key (ROSDEP_KEYS below), so that
    `rosdep install --from-paths src` on a robot installs it; or
  - a pip-only dependency (no rosdep key exists for it: PIP_ONLY), and then README.md's "On a robot"
    section shows the `pip install` that brings it.
The other way round, every <exec_depend> must be needed by some import (or be a launch-time dependency).
"""

from __future__ import annotations

import re
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from pathlib import Path

import pytest
from _imports import PKG_NAME, REPO, imports_of, package_modules

# import name -> rosdep key. Keys checked in ros/rosdistro's rosdep/*.yaml (python3-onnxruntime-pip is a pip
# key: rosdep runs pip for it); ROS packages are their own keys.
ROSDEP_KEYS = {
    "rclpy": "rclpy",
    "rcl_interfaces": "rcl_interfaces",
    "sensor_msgs": "sensor_msgs",
    "std_msgs": "std_msgs",
    "vision_msgs": "vision_msgs",
    "diagnostic_msgs": "diagnostic_msgs",
    "ament_index_python": "ament_index_python",
    "launch": "launch",
    "launch_ros": "launch_ros",
    "numpy": "python3-numpy",
    "cv2": "python3-opencv",
    "yaml": "python3-yaml",
    "onnxruntime": "python3-onnxruntime-pip",
}
# import name -> pip distribution, for imports with no rosdep key. mcap: rosdep has only mcap-ros2-support (a
# pip key for a package we do not use, which pulls mcap unpinned); cuda-bindings: JetPack's CUDA matches a
# specific range; onnx: only the developer tool `dla_build` imports it (`evaluate` computes COCO mAP itself).
PIP_ONLY = {
    "cuda": "cuda-bindings",
    "mcap": "mcap",
    "onnx": "onnx",
}


def installed_python_files() -> list[Path]:
    """The package's modules and the launch files colcon installs beside them."""
    return [*package_modules().values(), *sorted((REPO / "launch").glob("*.py"))]


def third_party_imports(files: Iterable[Path]) -> dict[str, list[str]]:
    """Top-level import name -> 'file:line' of each place that imports it (stdlib and ourselves left out)."""
    out: dict[str, list[str]] = {}
    seen: set[tuple[str, str]] = set()
    for path in files:
        for imp in imports_of(path):
            top = imp.name.split(".")[0]
            if not top or top in sys.stdlib_module_names or top in (PKG_NAME, "__future__"):
                continue
            where = f"{path.relative_to(REPO) if path.is_relative_to(REPO) else path}:{imp.line}"
            if (top, where) not in seen:  # `from a.b import c` yields a.b and a.b.c on one line
                seen.add((top, where))
                out.setdefault(top, []).append(where)
    return out


def exec_depends(package_xml: str) -> set[str]:
    return {e.text.strip() for e in ET.fromstring(package_xml).iter("exec_depend") if e.text}


def robot_section(readme: str) -> str:
    match = re.search(r"^## On a robot\n(.*?)(?=^## )", readme, flags=re.S | re.M)
    assert match, "README.md has no '## On a robot' section"
    return match.group(1)


def pip_installed_in(section: str) -> set[str]:
    """Distributions named by the `pip install` commands of a README section (version specifiers dropped)."""
    names = set()
    for line in section.splitlines():
        cmd = re.search(r"\bpip3? install (.*)", line)
        if not cmd:
            continue
        for word in cmd.group(1).split("`")[0].split():  # inline code ends at its backtick
            word = word.strip("'\"")
            if word.startswith("#"):
                break
            if word.startswith("-") or "/" in word:  # options, requirement files, URLs
                continue
            names.add(re.split(r"[<>=!~\[; ]", word, maxsplit=1)[0].lower())
    return names


def problems(files: Iterable[Path], package_xml: str, readme: str) -> list[str]:
    declared = exec_depends(package_xml)
    pip_documented = pip_installed_in(robot_section(readme))
    found = third_party_imports(files)
    out = []
    for name, places in sorted(found.items()):
        if name in ROSDEP_KEYS:
            if ROSDEP_KEYS[name] not in declared:
                out.append(f"{name} (imported at {', '.join(places)}) needs <exec_depend>{ROSDEP_KEYS[name]}"
                           "</exec_depend> in package.xml")
        elif name in PIP_ONLY:
            if PIP_ONLY[name].lower() not in pip_documented:
                out.append(f"{name} (imported at {', '.join(places)}) has no rosdep key: README.md's "
                           f"'On a robot' section must show `pip install {PIP_ONLY[name]}`")
        else:
            out.append(f"{name} (imported at {', '.join(places)}) is not declared: add its rosdep key to "
                       "package.xml and ROSDEP_KEYS in test/package/test_package_deps.py, or, where rosdep "
                       "has none, to PIP_ONLY and to the pip step in README.md's 'On a robot' section "
                       "(on Python 3.10 a 3.11+ stdlib module such as tomllib also lands here)")
    needed = {ROSDEP_KEYS[name] for name in found if name in ROSDEP_KEYS}
    out += [f"<exec_depend>{key}</exec_depend> in package.xml: nothing imports it" for key in
            sorted(declared - needed)]
    return out


def test_package_xml_declares_every_third_party_import() -> None:
    found = problems(installed_python_files(), (REPO / "package.xml").read_text(),
                     (REPO / "README.md").read_text())
    assert found == [], "\n".join(found)


def test_the_scan_covers_the_package_and_the_launch_files() -> None:
    files = installed_python_files()
    assert (REPO / "dla_infer_node" / "ros" / "node.py") in files
    assert any(p.name.endswith(".launch.py") for p in files)
    names = third_party_imports(files)
    # lazy imports count: onnxruntime and cuda are imported only inside functions of the backends
    assert {"rclpy", "numpy", "onnxruntime", "cuda", "mcap", "launch_ros"} <= set(names)


def test_every_pip_only_dependency_has_no_rosdep_twin_in_the_mapping() -> None:
    assert not set(PIP_ONLY) & set(ROSDEP_KEYS)
    assert {"cuda-bindings", "mcap"} <= {d.lower() for d in PIP_ONLY.values()}


@pytest.mark.parametrize(
    ("probe_source", "expected"),
    [
        ("import numpy\n\ndef f():\n    import torch\n", "torch (imported at"),          # lazy, undeclared
        ("from scipy.optimize import linear_sum_assignment\n", "scipy (imported at"),  # from-import
    ],
    ids=["lazy-import", "from-import"],
)
def test_a_new_undeclared_import_fails_the_check(tmp_path: Path, probe_source: str, expected: str) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(probe_source)
    found = problems([*installed_python_files(), probe], (REPO / "package.xml").read_text(),
                     (REPO / "README.md").read_text())
    assert len(found) == 1 and found[0].startswith(expected), found


def test_a_dropped_declaration_or_pip_step_fails_the_check() -> None:
    files = installed_python_files()
    xml = (REPO / "package.xml").read_text()
    readme = (REPO / "README.md").read_text()
    no_yaml = xml.replace("<exec_depend>python3-yaml</exec_depend>", "")
    assert no_yaml != xml
    assert any("python3-yaml" in p for p in problems(files, no_yaml, readme))
    no_pip = readme.replace("cuda-bindings", "cuda-something-else")
    assert any("pip install cuda-bindings" in p for p in problems(files, xml, no_pip))
    extra = xml.replace("</package>", "  <exec_depend>python3-scipy</exec_depend>\n</package>")
    assert problems(files, extra, readme) == ["<exec_depend>python3-scipy</exec_depend> in package.xml: "
                                              "nothing imports it"]

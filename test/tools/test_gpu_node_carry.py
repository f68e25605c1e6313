"""README's "The node on a GPU machine": its first line, `make gpu-node-carry`, runs here as written and
leaves what the device tool carries to a GPU machine without ROS: CPython 3.12 wheels of the ROS 2 runtime
and vision_msgs built for Python 3.12, small enough to travel with the tracked tree (64 MiB). Its second
line, `make test-gpu-node`, needs the GPU machine (run there; result in emulator/README.md): here the test
only checks that the target exists. Downloads wheels from PyPI on its first run (a development step, not
something the node does at run time)."""

from __future__ import annotations

import subprocess
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CARRY_LIMIT = 64 * 2**20


def readme_lines() -> list[str]:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    block = text.split("### The node on a GPU machine", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    return [line.split("#", 1)[0].strip() for line in block.strip().splitlines()]


def tracked_bytes() -> int:
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    return sum((REPO / f).stat().st_size for f in files.decode().split("\0") if f and (REPO / f).is_file())


def test_carry_is_built_complete_and_fits() -> None:
    here, there = readme_lines()
    assert there == "make test-gpu-node" and "\ntest-gpu-node:" in (REPO / "Makefile").read_text()
    proc = subprocess.run(here, shell=True, cwd=REPO, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    wheels = sorted((REPO / ".devcarry" / "whl312").glob("*.whl"))
    names = {w.name.split("-")[0].lower().replace("_", "-") for w in wheels}
    assert {"ros-rclpy", "ros-rmw-fastrtps-cpp", "ros-sensor-msgs", "mcap", "pyyaml"} <= names, names
    for w in wheels:  # compiled wheels are for CPython 3.12 on x86-64 Linux, where the GPU machine is
        tag = w.stem.split("-")[-3:]
        assert tag[0] in ("cp312", "py3", "py2.py3", "py312"), w.name
        assert tag[2] == "any" or "x86_64" in tag[2], w.name
    with zipfile.ZipFile(next(w for w in wheels if w.name.lower().startswith("ros_rclpy"))) as z:
        assert any(".cpython-312-" in n for n in z.namelist())
    iface = REPO / "install" / "interfaces-py312"
    site = iface / "lib" / "python3.12" / "site-packages" / "vision_msgs"
    assert (site / "msg" / "_detection2_d_array.py").is_file(), "vision_msgs' Python side for 3.12"
    assert list(site.glob("vision_msgs_s__rosidl_typesupport_*.so")), "its compiled type support"
    carried = sum(p.stat().st_size for d in (REPO / ".devcarry" / "whl312", iface)
                  for p in d.rglob("*") if p.is_file())
    assert carried + tracked_bytes() < CARRY_LIMIT, (carried, tracked_bytes())

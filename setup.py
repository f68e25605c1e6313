"""ament_python build description for dla_infer_node (used by colcon on a robot and by pip in .venv)."""

import os
from glob import glob

from setuptools import find_packages, setup

PACKAGE = "dla_infer_node"


def files(pattern: str) -> list[str]:
    # Directories that do not exist yet simply contribute nothing; sub-directories are skipped.
    return sorted(p for p in glob(pattern) if os.path.isfile(p))


setup(
    name=PACKAGE,
    version="0.1.0",
    packages=find_packages(include=[PACKAGE, f"{PACKAGE}.*"]),
    data_files=[
        ("share/ament_index/resource_index/packages", [f"resource/{PACKAGE}"]),
        (f"share/{PACKAGE}", ["package.xml"]),
        (f"share/{PACKAGE}/launch", files("launch/*.py")),
        (f"share/{PACKAGE}/config", files("config/*.yaml") + files("config/*.xml")),
        (f"share/{PACKAGE}/models", files("models/*")),
    ],
    install_requires=["setuptools"],
    zip_safe=False,
    maintainer="dla_infer_node developers",
    maintainer_email="dla-infer-node@example.com",
    description="YOLO-style detection on NVIDIA DLA (cuDLA hybrid) or ONNX Runtime CPU, as a ROS 2 node.",
    license="Apache-2.0",
    entry_points={
        "console_scripts": [
            f"dla_infer_node = {PACKAGE}.ros.node:main",
            f"dla_infer_lifecycle = {PACKAGE}.ros.lifecycle_node:main",
            f"replay = {PACKAGE}.bags.replay:main",
            f"capture = {PACKAGE}.bags.capture:main",
            f"detect = {PACKAGE}.cli.detect:main",
            f"dla_doctor = {PACKAGE}.cli.doctor:main",
            f"evaluate = {PACKAGE}.cli.evaluate:main",
            f"demo = {PACKAGE}.cli.demo:main",
            f"dla_build = {PACKAGE}.dla_build.build_cli:main",
        ],
    },
)

"""Where the shipped model lives: the source tree's ``models/`` or, after ``colcon build``, the share dir."""

from __future__ import annotations

import sys
from pathlib import Path

from dla_infer_node.core.errors import ModelError

PACKAGE = "dla_infer_node"
DEFAULT_METADATA = "shapes_yolo.meta.yaml"


def model_dirs() -> list[Path]:
    """Candidate ``models/`` folders, most specific first.

    1. the source/editable checkout (``<repo>/models`` next to the package folder);
    2. the ament index (colcon install: ``<prefix>/share/dla_infer_node/models``) - imported lazily, as
       ament_index_python exists only in a ROS environment;
    3. ``<sys.prefix>/share/dla_infer_node/models`` (a plain pip install of the data files).
    """
    dirs = [Path(__file__).resolve().parents[2] / "models"]
    try:
        from ament_index_python.packages import get_package_share_directory

        dirs.append(Path(get_package_share_directory(PACKAGE)) / "models")
    except Exception:  # no ROS, or the package is not installed in the index: fall through quietly
        pass
    dirs.append(Path(sys.prefix) / "share" / PACKAGE / "models")
    return dirs


def find_model_file(name: str) -> Path:
    """The first existing ``models/<name>``; a :class:`ModelError` listing where it looked otherwise."""
    tried = [d / name for d in model_dirs()]
    for p in tried:
        if p.is_file():
            return p
    raise ModelError(f"shipped model file {name!r} not found", call="find_model_file",
                     params={"tried": [str(p) for p in tried]}, stage="model",
                     hint="train/export it (models/README.md) or pass an explicit path")


def default_model_metadata() -> Path:
    """The shipped model's metadata YAML (``models/shapes_yolo.meta.yaml``)."""
    return find_model_file(DEFAULT_METADATA)


def metadata_for_model(model_path: str | Path) -> Path:
    """``foo.onnx`` -> ``foo.meta.yaml`` next to it (the naming convention of ``models/``)."""
    p = Path(model_path)
    stem = p.name[: -len(".onnx")] if p.name.endswith(".onnx") else p.stem
    return p.with_name(stem + ".meta.yaml")

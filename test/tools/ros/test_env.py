"""The development environment: vision_msgs (the project's 4.x copy or the distribution's) is importable
everywhere, with the exact 4.x field names and types (they decide the type hash other nodes check)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[3]
# .venv (Kilted), .venv-jazzy (`make test-jazzy`): any venv that scripts/setup_env.sh made in this checkout
_PREFIX = Path(sys.prefix).resolve()
IN_PROJECT_VENV = _PREFIX.parent == REPO.resolve() and _PREFIX.name.startswith(".venv")

# vision_msgs 4.x definitions, as rosidl reports them through get_fields_and_field_types().
EXPECTED: dict[str, dict[str, str]] = {
    "Detection2DArray": {"header": "std_msgs/Header", "detections": "sequence<vision_msgs/Detection2D>"},
    "Detection2D": {
        "header": "std_msgs/Header",
        "results": "sequence<vision_msgs/ObjectHypothesisWithPose>",
        "bbox": "vision_msgs/BoundingBox2D",
        "id": "string",
    },
    "BoundingBox2D": {"center": "vision_msgs/Pose2D", "size_x": "double", "size_y": "double"},
    "Pose2D": {"position": "vision_msgs/Point2D", "theta": "double"},
    "Point2D": {"x": "double", "y": "double"},
    "ObjectHypothesisWithPose": {
        "hypothesis": "vision_msgs/ObjectHypothesis",
        "pose": "geometry_msgs/PoseWithCovariance",
    },
    "ObjectHypothesis": {"class_id": "string", "score": "double"},
    "LabelInfo": {
        "header": "std_msgs/Header",
        "class_map": "sequence<vision_msgs/VisionClass>",
        "threshold": "float",
    },
    "VisionClass": {"class_id": "uint16", "class_name": "string"},
    "VisionInfo": {
        "header": "std_msgs/Header",
        "method": "string",
        "database_location": "string",
        "database_version": "int32",
    },
}


def _vision_msgs() -> Any:
    try:
        import vision_msgs.msg as msgs
    except ImportError as exc:
        if IN_PROJECT_VENV:
            pytest.fail(f"vision_msgs not importable in the project venv (run `make venv`): {exc}")
        pytest.skip(f"not running in the project .venv and vision_msgs is not importable: {exc}")
    return msgs


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fields_match_vision_msgs_4x(name: str) -> None:
    msgs = _vision_msgs()
    cls = getattr(msgs, name)
    assert cls.get_fields_and_field_types() == EXPECTED[name]


def test_4x_nesting_center_position() -> None:
    # 3.x had geometry_msgs/Pose2D (center.x); 4.x nests a Point2D (center.position.x).
    msgs = _vision_msgs()
    box = msgs.BoundingBox2D()
    box.center.position.x = 12.5
    box.center.theta = 0.25
    assert box.center.position.x == 12.5


def test_serialization_round_trip() -> None:
    msgs = _vision_msgs()
    from rclpy.serialization import deserialize_message, serialize_message

    arr = msgs.Detection2DArray()
    arr.header.frame_id = "camera"
    det = msgs.Detection2D()
    det.bbox.center.position.x = 100.0
    det.bbox.size_x = 20.0
    hyp = msgs.ObjectHypothesisWithPose()
    hyp.hypothesis.class_id = "circle"
    hyp.hypothesis.score = 0.75
    det.results.append(hyp)
    arr.detections.append(det)
    back = deserialize_message(serialize_message(arr), msgs.Detection2DArray)
    assert back == arr


def _child_env(**extra: str) -> dict[str, str]:
    # A deliberately bare environment: what a test or tool gets when it starts sys.executable itself.
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/tmp")}
    env.update(extra)
    return env


@pytest.mark.parametrize(
    "extra",
    [
        {},
        # Marked as already bootstrapped by the ROS wheels but without our library directory.
        {"_ROS_WHEELS_BOOTSTRAP_COMPLETE": "1"},
    ],
    ids=["bare", "stale-bootstrap-mark"],
)
def test_child_process_imports_vision_msgs(extra: dict[str, str]) -> None:
    _vision_msgs()
    code = (
        "from vision_msgs.msg import Detection2DArray, LabelInfo\n"
        "from rclpy.serialization import serialize_message\n"
        "print(len(serialize_message(Detection2DArray())))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], env=_child_env(**extra), capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout.strip()) > 0


def test_package_importable_from_any_directory(tmp_path: Path) -> None:
    if not IN_PROJECT_VENV:
        pytest.skip("checks the editable install of the project .venv")
    proc = subprocess.run(
        [sys.executable, "-c", "import dla_infer_node, os; print(os.path.dirname(dla_infer_node.__file__))"],
        cwd=tmp_path,
        env=_child_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert Path(proc.stdout.strip()).resolve() == (REPO / "dla_infer_node").resolve()

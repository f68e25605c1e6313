"""The lifecycle node whose backend factory raises a plain ``RuntimeError`` (as a native library may):
``python -m _crash_lifecycle_node --ros-args ...``. Used to show that a configure failure outside the
project's own error family is logged in one line and leaves the node unconfigured."""

from __future__ import annotations

import sys
from typing import NoReturn

from dla_infer_node.ros import lifecycle_node, parts


def _failing_open_backend(*_args: object, **_kwargs: object) -> NoReturn:
    raise RuntimeError("backend library crashed (injected by the test)")


if __name__ == "__main__":
    parts.open_backend = _failing_open_backend  # type: ignore[assignment]
    sys.exit(lifecycle_node.main())

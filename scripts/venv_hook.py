"""Start-up hook that makes the locally built interface packages visible to every venv process.

scripts/setup_env.sh copies this file into the venv's site-packages as ``_dla_infer_node_env.py`` and
writes ``dla_infer_node_env.pth`` next to it, which calls ``activate(prefix)`` while ``site`` runs.

Why a .pth hook and not an activation script: tests start children with ``sys.executable``, console
scripts run without ``source``, and IDEs run ``.venv/bin/python`` directly; all of them process .pth
files. The ROS wheels ship ``ros_wheels_bootstrapper.pth``, which re-executes the interpreter once with
LD_LIBRARY_PATH extended (the dynamic loader reads it only at process start) and marks the child with
``_ROS_WHEELS_BOOTSTRAP_COMPLETE``. .pth files run in sorted order and "dla_..." sorts before "ros_...",
so this hook edits the environment first and the bootstrapper's re-exec carries our library directory
along. If a process arrives already marked but without our directory (a caller that rebuilt the
environment by hand), the mark is dropped so the bootstrapper re-executes once more.
"""

from __future__ import annotations

import os
import sys

GUARD = "_ROS_WHEELS_BOOTSTRAP_COMPLETE"
DISABLE = "DLA_INFER_NODE_NO_ENV_HOOK"


def _prepend(var: str, value: str) -> bool:
    parts = [p for p in os.environ.get(var, "").split(os.pathsep) if p]
    if value in parts:
        return False
    os.environ[var] = os.pathsep.join([value, *parts])
    return True


def _append(var: str, value: str) -> None:
    parts = [p for p in os.environ.get(var, "").split(os.pathsep) if p]
    if value not in parts:
        os.environ[var] = os.pathsep.join([*parts, value])


def activate(prefix: str) -> None:
    """Expose an ament install prefix (libraries, Python packages, ament index) to this process."""
    if os.environ.get(DISABLE) or not os.path.isdir(prefix):
        return
    site = os.path.join(prefix, "lib", f"python{sys.version_info[0]}.{sys.version_info[1]}", "site-packages")
    if os.path.isdir(site) and site not in sys.path:
        sys.path.append(site)
    if _prepend("LD_LIBRARY_PATH", os.path.join(prefix, "lib")):
        os.environ.pop(GUARD, None)
    # ament_index lookups (e.g. get_package_share_directory) see both this prefix and the wheels' own.
    _prepend("AMENT_PREFIX_PATH", prefix)
    _append("AMENT_PREFIX_PATH", sys.prefix)

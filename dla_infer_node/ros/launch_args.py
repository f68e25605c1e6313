"""Launch arguments checked before anything starts: ROS names, and what a node's exit code means.

Used by ``launch/*.launch.py`` (plain Python, no rclpy): a topic or namespace that rcl would reject as a
remap rule or node namespace (and kill the node with a parse error) is either normalised (surrounding
spaces, trailing slashes) or refused with one line naming the launch argument; so is a parameters file or
DDS profile that is not there.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

from dla_infer_node.core.errors import DlaInferError

EXIT_BAD_PARAMETER = 2  # dla_infer_node.ros.node.main: an invalid parameter
EXIT_FAULT = 1          # a backend that cannot start, or a fatal accelerator fault
# Fast DDS 3 (Kilted and later) reads FASTDDS_DEFAULT_PROFILES_FILE, and also the older
# FASTRTPS_DEFAULT_PROFILES_FILE but then every process logs a deprecation warning; Fast DDS 2 (Humble, Jazzy)
# reads only the older name (measured with the Jazzy wheels: the profile is ignored under the new one). So a
# profile is handed to a process under the one name its ROS 2 reads.
DDS_PROFILE_ENV = "FASTDDS_DEFAULT_PROFILES_FILE"
DDS_PROFILE_ENV_FASTDDS2 = "FASTRTPS_DEFAULT_PROFILES_FILE"
DDS_PROFILE_ENVS = (DDS_PROFILE_ENV, DDS_PROFILE_ENV_FASTDDS2)
SHIPPED_DDS_PROFILES = {"large_images": "fastdds_large_images.xml"}
# distributions on Fast DDS 2 or older (ROS 2 names its distributions in alphabetical order)
_FASTDDS2_DISTROS = frozenset({"ardent", "bouncy", "crystal", "dashing", "eloquent", "foxy", "galactic",
                               "humble", "iron", "jazzy"})
_RCLPY_KILTED = 9  # rclpy's major version on Kilted, the first release on Fast DDS 3

_TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def rclpy_major() -> int | None:
    """Major version of the rclpy that would be imported (3 Humble, 7 Jazzy, 9 Kilted); imports nothing."""
    for dist in ("ros-rclpy", "rclpy"):  # the PyPI wheels; a sourced ROS install's egg-info
        try:
            return int(metadata.version(dist).split(".")[0])
        except (metadata.PackageNotFoundError, ValueError):
            continue
    return None


def profile_env_names(environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The profile variable the ROS 2 of this environment reads: by ROS_DISTRO where a sourced install set
    it, else by the installed rclpy's version; both names only where neither tells."""
    distro = (os.environ if environ is None else environ).get("ROS_DISTRO", "").strip().lower()
    if distro:
        return (DDS_PROFILE_ENV_FASTDDS2,) if distro in _FASTDDS2_DISTROS else (DDS_PROFILE_ENV,)
    major = rclpy_major()
    if major is None:
        return DDS_PROFILE_ENVS
    return (DDS_PROFILE_ENV,) if major >= _RCLPY_KILTED else (DDS_PROFILE_ENV_FASTDDS2,)


def profile_env(path: str, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment that loads the Fast DDS profile ``path`` in a process of this ROS 2 (see
    :func:`profile_env_names`)."""
    return dict.fromkeys(profile_env_names(environ), path)


class LaunchArgumentError(DlaInferError):
    """A launch argument cannot be used; one line naming it, its value and what is allowed."""

    stage = "launch"

    def __init__(self, name: str, value: str, allowed: str) -> None:
        self.name = name
        super().__init__(f"launch argument {name}:={value!r} is invalid: {allowed}")


def _tokens_ok(body: str) -> bool:
    return all(_TOKEN.fullmatch(token) for token in body.split("/"))


def image_topic(value: str, name: str = "image_topic") -> str:
    """A topic name rcl accepts as a remap target: spaces and trailing slashes dropped, else refused."""
    topic = value.strip().rstrip("/")
    allowed = ("a ROS topic name: '/'-separated tokens of letters, digits and '_', each not starting "
               "with a digit, optionally starting with '/' or '~/', no empty token ('//')")
    if not topic:
        raise LaunchArgumentError(name, value, "a non-empty topic name; " + allowed)
    body = topic[2:] if topic.startswith("~/") else topic[1:] if topic.startswith("/") else topic
    if not _tokens_ok(body):
        raise LaunchArgumentError(name, value, allowed)
    return topic


def namespace(value: str, name: str = "namespace") -> str:
    """A node namespace: '' for none, else '/'-separated tokens (leading '/' optional, trailing dropped)."""
    ns = value.strip().strip("/")
    if ns and not _tokens_ok(ns):
        raise LaunchArgumentError(name, value, "empty (no namespace) or '/'-separated tokens of letters, "
                                  "digits and '_', each not starting with a digit")
    return "/" + ns if ns else ""


def cameras(value: str, name: str = "cameras") -> dict[str, Any]:
    """The node parameters of a camera list ``name[:topic],name[:topic],...``: ``cameras`` and each given
    ``<name>.topic`` ({} for ''). A camera without a topic keeps the params file's (or '<name>/image')."""
    out: dict[str, Any] = {}
    names: list[str] = []
    for entry in (e.strip() for e in value.split(",")):
        if not entry:
            continue
        camera, _, topic = entry.partition(":")
        camera = camera.strip()
        if not _TOKEN.fullmatch(camera) or camera.startswith("_") or camera in names:
            raise LaunchArgumentError(name, value, "comma-separated name[:topic] entries, each name "
                                      "distinct, of letters, digits and '_' starting with a letter")
        names.append(camera)
        if topic.strip():
            out[f"{camera}.topic"] = image_topic(topic, f"{name} ({camera})")
    if names:
        out[name] = names
    return out


def params_file(value: str, name: str = "params_file") -> str:
    """The parameters file: it must exist (launch_ros would only warn, and the node would run on its
    defaults)."""
    path = Path(value.strip())
    if not value.strip() or not path.is_file():
        raise LaunchArgumentError(name, value, "the path of an existing ROS 2 parameters YAML file "
                                  f"({path} is not a file)")
    return str(path)


def dds_profile(value: str, config_dir: str, name: str = "dds_profile") -> str:
    """The Fast DDS profile file for ``value``: '' for none, a shipped profile's name, or an existing file."""
    value = value.strip()
    if not value:
        return ""
    path = Path(config_dir) / SHIPPED_DDS_PROFILES[value] if value in SHIPPED_DDS_PROFILES else Path(value)
    if not path.is_file():
        raise LaunchArgumentError(name, value, "empty, " + ", ".join(repr(k) for k in SHIPPED_DDS_PROFILES)
                                  + f" or the path of an existing Fast DDS XML file ({path} is not a file)")
    return str(path.resolve())


def exit_reason(node_name: str, returncode: int | None) -> str | None:
    """Why a node's exit must end the launch with a failure, or None for a clean stop."""
    if returncode in (0, None):
        return None
    if returncode == EXIT_BAD_PARAMETER:
        what = "an invalid parameter (its last log line names it)"
    elif returncode == EXIT_FAULT:
        what = "a backend that could not start or an accelerator fault"
    elif returncode < 0:
        what = f"signal {-returncode}"
    else:
        what = "an unexpected error"
    return f"{node_name} exited with code {returncode}: {what}"

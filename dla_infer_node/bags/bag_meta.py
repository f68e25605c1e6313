"""rosbag2 conventions that are not MCAP itself (ROS-free): QoS profile text, message definitions,
and the bag metadata (``metadata.yaml`` and the MCAP ``rosbag2`` metadata record).

Facts followed (rosbag2 storage_mcap / rosbag2_storage):
- a channel's metadata holds ``offered_qos_profiles``: a YAML list of profiles; bag metadata versions < 9
  write the policies as integers of the rmw enums, version 9 as their names ("reliable", ...);
- a schema's data is the full ``.msg`` text (encoding ``ros2msg``): the type's own definition, then for every
  nested type, depth first in sorted order, a line of 80 ``=``, ``MSG: pkg/Type`` and that type's text;
- ``metadata.yaml`` is ``{rosbag2_bagfile_information: {...}}`` with durations in nanoseconds.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from dla_infer_node.core.yaml_file import parse_yaml

METADATA_VERSION = 8  # integer QoS enums: readable by Humble through Kilted

# rmw enum values <-> names (rmw/types.h); index 3/4 are UNKNOWN/BEST_AVAILABLE and friends.
_HISTORY = {0: "system_default", 1: "keep_last", 2: "keep_all", 3: "unknown"}
_RELIABILITY = {0: "system_default", 1: "reliable", 2: "best_effort", 3: "unknown", 4: "best_available"}
_DURABILITY = {0: "system_default", 1: "transient_local", 2: "volatile", 3: "unknown", 4: "best_available"}
_LIVELINESS = {
    0: "system_default",
    1: "automatic",
    2: "manual_by_node",
    3: "manual_by_topic",
    4: "unknown",
    5: "best_available",
}
_PRIMITIVES = frozenset(
    [
        "bool",
        "byte",
        "char",
        "float32",
        "float64",
        "int8",
        "uint8",
        "int16",
        "uint16",
        "int32",
        "uint32",
        "int64",
        "uint64",
        "string",
        "wstring",
    ]
)
_DELIMITER = "=" * 80 + "\n"
_FIELD_TYPE = re.compile(r"^\s*([A-Za-z0-9_/]+)(?:\[[^\]]*\])?(?:<=\d+)?\s+\S", re.MULTILINE)
_TYPE_NAME = re.compile(r"^([A-Za-z0-9_]+)/(?:msg/)?([A-Za-z0-9_]+)$")


@dataclass(frozen=True)
class QosProfile:
    """The parts of an offered QoS profile that matter for replaying a topic."""

    history: str = "keep_last"
    depth: int = 10
    reliability: str = "reliable"
    durability: str = "volatile"
    liveliness: str = "automatic"


def _policy(value: Any, table: dict[int, str], default: str) -> str:
    if isinstance(value, bool):  # yaml "true"/"false" never names a policy
        return default
    if isinstance(value, int):
        return table.get(value, "unknown")
    if isinstance(value, str) and value:
        return value.strip().lower()
    return default


def parse_offered_qos(text: str | None) -> list[QosProfile]:
    """Parse an ``offered_qos_profiles`` string (integer or named policies); unparsable text gives []."""
    if not text:
        return []
    try:
        data = parse_yaml(text)
    except ValueError:
        return []
    if not isinstance(data, list):
        return []
    out: list[QosProfile] = []
    for item in data:
        if not isinstance(item, dict):
            continue
        depth = item.get("depth", 10)
        out.append(
            QosProfile(
                history=_policy(item.get("history"), _HISTORY, "keep_last"),
                depth=int(depth) if isinstance(depth, int) and not isinstance(depth, bool) else 10,
                reliability=_policy(item.get("reliability"), _RELIABILITY, "reliable"),
                durability=_policy(item.get("durability"), _DURABILITY, "volatile"),
                liveliness=_policy(item.get("liveliness"), _LIVELINESS, "automatic"),
            )
        )
    return out


def dump_offered_qos(profiles: Sequence[QosProfile], version: int = METADATA_VERSION) -> str:
    """Serialise profiles the way rosbag2 stores them (durations 0 = unspecified)."""

    def enc(name: str, table: dict[int, str]) -> int | str:
        if version >= 9:
            return name
        for k, v in table.items():
            if v == name:
                return k
        raise ValueError(f"unknown QoS policy value {name!r}; allowed {sorted(table.values())}")

    zero = {"sec": 0, "nsec": 0}
    items = [
        {
            "history": enc(p.history, _HISTORY),
            "depth": p.depth,
            "reliability": enc(p.reliability, _RELIABILITY),
            "durability": enc(p.durability, _DURABILITY),
            "deadline": dict(zero),
            "lifespan": dict(zero),
            "liveliness": enc(p.liveliness, _LIVELINESS),
            "liveliness_lease_duration": dict(zero),
            "avoid_ros_namespace_conventions": False,
        }
        for p in profiles
    ]
    return yaml.safe_dump(items, sort_keys=False, default_flow_style=False).rstrip("\n")


def msg_dependencies(text: str, package: str) -> set[str]:
    """Nested message types (``pkg/Type``) named by the fields of one ``.msg`` text."""
    deps: set[str] = set()
    for line in text.splitlines():
        line = line.split("#", 1)[0]
        m = _FIELD_TYPE.match(line)
        if not m:
            continue
        base = m.group(1)
        if base in _PRIMITIVES:
            continue
        if base == "Header":  # legacy shorthand
            deps.add("std_msgs/Header")
        elif "/" in base:
            deps.add(base)
        else:
            deps.add(f"{package}/{base}")
    return deps


def _share_dirs() -> list[Path]:
    return [Path(p) / "share" for p in os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep) if p]


def _find_msg_file(type_name: str, share_dirs: Iterable[Path]) -> str | None:
    m = _TYPE_NAME.match(type_name)
    if not m:
        return None
    for share in share_dirs:
        f = share / m.group(1) / "msg" / f"{m.group(2)}.msg"
        if f.is_file():
            return f.read_text()
    return None


def message_definition(type_name: str, share_dirs: Sequence[Path] | None = None) -> str:
    """Full ``ros2msg`` definition text of ``pkg/msg/Type`` from the ``.msg`` files of an ament prefix
    (AMENT_PREFIX_PATH by default). Returns "" when the type's own file is not found (as rosbag2 does for
    definitions it cannot resolve)."""
    dirs = list(share_dirs) if share_dirs is not None else _share_dirs()
    seen: set[str] = set()

    def expand(name: str, depth: int) -> str:
        if depth > 50:
            raise ValueError(f"message definition of {type_name} nests deeper than 50 levels")
        text = _find_msg_file(name, dirs)
        if text is None:
            raise FileNotFoundError(name)
        package = name.split("/", 1)[0]
        out = text
        for dep in sorted(msg_dependencies(text, package)):
            if dep not in seen:
                seen.add(dep)
                out += "\n" + _DELIMITER + f"MSG: {dep}\n" + expand(dep, depth + 1)
        return out

    try:
        return expand(type_name, 0)
    except FileNotFoundError:
        return ""


def type_description_hash(type_name: str, share_dirs: Sequence[Path] | None = None) -> str:
    """The RIHS01 type hash of ``pkg/msg/Type`` from the ``.json`` type description rosidl installs next
    to the ``.msg`` file (what ``ros2 bag record`` stores as ``topic_type_hash``); "" when not found."""
    m = _TYPE_NAME.match(type_name)
    if not m:
        return ""
    for share in share_dirs if share_dirs is not None else _share_dirs():
        f = share / m.group(1) / "msg" / f"{m.group(2)}.json"
        if not f.is_file():
            continue
        try:
            hashes = json.loads(f.read_text()).get("type_hashes", [])
        except (OSError, ValueError, AttributeError):
            return ""
        full = f"{m.group(1)}/msg/{m.group(2)}"
        for entry in hashes:
            if isinstance(entry, dict) and entry.get("type_name") == full:
                return str(entry.get("hash_string", ""))
        return ""
    return ""


@dataclass
class TopicRecord:
    """One topic of a bag being written, with what metadata.yaml reports about it."""

    name: str
    type: str
    offered_qos_profiles: str
    type_description_hash: str = ""
    serialization_format: str = "cdr"
    message_count: int = 0


def bag_metadata(
    *,
    files: Sequence[tuple[str, int, int, int]],  # (relative path, start ns, end ns, message count)
    topics: Sequence[TopicRecord],
    ros_distro: str,
) -> dict[str, Any]:
    """The ``rosbag2_bagfile_information`` mapping for metadata.yaml and the MCAP metadata record."""
    starts = [f[1] for f in files if f[3] > 0]
    ends = [f[2] for f in files if f[3] > 0]
    start = min(starts) if starts else 0
    end = max(ends) if ends else 0
    return {
        "version": METADATA_VERSION,
        "storage_identifier": "mcap",
        "duration": {"nanoseconds": end - start},
        "starting_time": {"nanoseconds_since_epoch": start},
        "message_count": sum(f[3] for f in files),
        "topics_with_message_count": [
            {
                "topic_metadata": {
                    "name": t.name,
                    "type": t.type,
                    "serialization_format": t.serialization_format,
                    "offered_qos_profiles": t.offered_qos_profiles,
                    "type_description_hash": t.type_description_hash,
                },
                "message_count": t.message_count,
            }
            for t in topics
        ],
        "compression_format": "",
        "compression_mode": "",
        "relative_file_paths": [f[0] for f in files],
        "files": [
            {
                "path": f[0],
                "starting_time": {"nanoseconds_since_epoch": f[1] if f[3] else 0},
                "duration": {"nanoseconds": (f[2] - f[1]) if f[3] else 0},
                "message_count": f[3],
            }
            for f in files
        ],
        "custom_data": None,
        "ros_distro": ros_distro,
    }


def dump_metadata_yaml(info: dict[str, Any]) -> str:
    return yaml.safe_dump({"rosbag2_bagfile_information": info}, sort_keys=False, default_flow_style=False)

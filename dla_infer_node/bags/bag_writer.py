"""Write rosbag2 MCAP bags without ROS (only the ``mcap`` library), as ``ros2 bag record -s mcap`` does.

Messages are written as given: serialized CDR bytes with their 4-byte encapsulation header. Reading lives in
``bag_io``; both follow the conventions ``bag_meta`` describes (metadata record, schemas, offered QoS).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

import yaml

from dla_infer_node.bags.bag_io import MESSAGE_ENCODING, BagError
from dla_infer_node.bags.bag_meta import (
    QosProfile,
    TopicRecord,
    bag_metadata,
    dump_metadata_yaml,
    dump_offered_qos,
    message_definition,
)
from dla_infer_node.bags.bag_meta import type_description_hash as type_hash_of

_COMPRESSION = ("zstd", "lz4", "none")


class BagWriter:
    """Write a bag in rosbag2's MCAP conventions.

    ``path`` ending in ``.mcap``: one MCAP file. Otherwise a bag directory like ``ros2 bag record -s mcap``
    makes: ``<dir>/<dir name>_0.mcap`` plus ``metadata.yaml``. Either way the MCAP carries the ``ros2``
    profile, ``ros2msg`` schemas with full definitions, ``cdr`` channels with ``offered_qos_profiles``, and
    the ``rosbag2`` metadata record.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        compression: str = "zstd",
        ros_distro: str | None = None,
        overwrite: bool = False,
    ) -> None:
        from mcap.writer import CompressionType, Writer

        if compression not in _COMPRESSION:
            raise BagError(
                f"compression must be one of {_COMPRESSION}",
                call="BagWriter",
                params={"compression": compression},
            )
        p = Path(path)
        self.directory: Path | None
        if p.suffix == ".mcap":
            self.directory, self.file = None, p
            if p.exists() and not overwrite:
                raise BagError("file exists", call="BagWriter", params={"path": str(p)})
            p.parent.mkdir(parents=True, exist_ok=True)
        else:
            if p.exists() and (not overwrite or not p.is_dir()):
                raise BagError("bag directory exists", call="BagWriter", params={"path": str(p)})
            p.mkdir(parents=True, exist_ok=True)
            for old in (*p.glob("*.mcap"), p / "metadata.yaml"):
                old.unlink(missing_ok=True)
            self.directory, self.file = p, p / f"{p.name}_0.mcap"
        self.ros_distro = ros_distro if ros_distro is not None else os.environ.get("ROS_DISTRO", "")
        self._stream = self.file.open("wb")
        kind = {"zstd": CompressionType.ZSTD, "lz4": CompressionType.LZ4, "none": CompressionType.NONE}
        self._writer = Writer(self._stream, compression=kind[compression])
        self._writer.start(profile="ros2", library="dla_infer_node.bags.bag_writer")
        self._schemas: dict[str, int] = {}
        self._channels: dict[str, tuple[int, TopicRecord]] = {}
        self._first: int | None = None
        self._last: int | None = None
        self._count = 0
        self._closed = False

    def add_topic(
        self,
        name: str,
        type_name: str,
        *,
        definition: str | None = None,
        qos: Sequence[QosProfile] = (QosProfile(),),
        type_description_hash: str | None = None,
    ) -> None:
        """Declare a topic. ``definition`` and ``type_description_hash`` default to what the .msg and .json
        files of the type on AMENT_PREFIX_PATH say ("" where they are not found)."""
        if type_description_hash is None:
            type_description_hash = type_hash_of(type_name)
        if name in self._channels:
            raise BagError("topic declared twice", call="add_topic", params={"topic": name})
        if type_name not in self._schemas:
            text = definition if definition is not None else message_definition(type_name)
            self._schemas[type_name] = self._writer.register_schema(
                name=type_name, encoding="ros2msg", data=text.encode()
            )
        record = TopicRecord(name, type_name, dump_offered_qos(qos), type_description_hash)
        channel = self._writer.register_channel(
            topic=name,
            message_encoding=MESSAGE_ENCODING,
            schema_id=self._schemas[type_name],
            metadata={
                "offered_qos_profiles": record.offered_qos_profiles,
                "topic_type_hash": type_description_hash,
            },
        )
        self._channels[name] = (channel, record)

    def write(self, topic: str, data: bytes, log_time_ns: int, publish_time_ns: int | None = None) -> None:
        """Append one serialized message; rosbag2 writes sequence 0 and log time = receive time."""
        if topic not in self._channels:
            raise BagError(
                "write to an undeclared topic (call add_topic first)", call="write", params={"topic": topic}
            )
        channel, record = self._channels[topic]
        self._writer.add_message(
            channel_id=channel,
            log_time=int(log_time_ns),
            data=bytes(data),
            publish_time=int(log_time_ns if publish_time_ns is None else publish_time_ns),
            sequence=0,
        )
        record.message_count += 1
        self._count += 1
        self._first = log_time_ns if self._first is None else min(self._first, log_time_ns)
        self._last = log_time_ns if self._last is None else max(self._last, log_time_ns)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        rel = self.file.name
        info = bag_metadata(
            files=[(rel, self._first or 0, self._last or 0, self._count)],
            topics=[r for _, r in self._channels.values()],
            ros_distro=self.ros_distro,
        )
        try:
            # The record holds the bare BagMetadata mapping; metadata.yaml wraps it in a top-level key.
            serialized = yaml.safe_dump(info, sort_keys=False, default_flow_style=False)
            self._writer.add_metadata("rosbag2", {"serialized_metadata": serialized})
            self._writer.finish()
        finally:
            self._stream.close()
        if self.directory is not None:
            (self.directory / "metadata.yaml").write_text(dump_metadata_yaml(info))

    def __enter__(self) -> BagWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

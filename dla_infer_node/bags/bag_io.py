"""Read and write rosbag2 MCAP bags without ROS (only the ``mcap`` library).

A bag is either one ``.mcap`` file or a rosbag2 bag directory (``metadata.yaml`` naming its files; a
directory without metadata.yaml is read as its ``*.mcap`` files in name order). Messages are kept as the
recorded serialized CDR bytes: nothing is decoded here. rclpy publishing lives in ``replay.py``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import yaml

from dla_infer_node.bags.bag_meta import (
    QosProfile,
    TopicRecord,
    bag_metadata,
    dump_metadata_yaml,
    dump_offered_qos,
    message_definition,
)
from dla_infer_node.bags.bag_meta import type_description_hash as type_hash_of
from dla_infer_node.core.errors import InputError

SCHEMA_ENCODINGS = ("ros2msg", "ros2idl")
MESSAGE_ENCODING = "cdr"


class BagError(InputError):
    """A bag cannot be read or written (missing files, not MCAP, not rosbag2 conventions)."""

    stage = "bag_io"


@dataclass(frozen=True)
class TopicInfo:
    name: str
    type: str  # e.g. "sensor_msgs/msg/Image"
    serialization_format: str
    offered_qos_profiles: str
    type_description_hash: str
    message_count: int


@dataclass(frozen=True)
class BagMessage:
    topic: str
    type: str
    data: bytes  # the recorded serialized message (CDR, with its 4-byte encapsulation header)
    log_time_ns: int  # receive time at recording: what replay timing follows, as in rosbag2
    publish_time_ns: int


def resolve_bag(path: str | os.PathLike[str]) -> tuple[list[Path], dict[str, Any] | None]:
    """The MCAP files of a bag (in order) and its parsed metadata.yaml, if any."""
    p = Path(path)
    call = "resolve_bag"
    if p.is_file():
        if p.name == "metadata.yaml":
            p = p.parent
        else:
            return [p], None
    if not p.is_dir():
        raise BagError("no such bag file or directory", call=call, params={"path": str(path)})
    meta_file = p / "metadata.yaml"
    if meta_file.is_file():
        try:
            doc = yaml.safe_load(meta_file.read_text())
            info = doc["rosbag2_bagfile_information"]
            rel = list(info["relative_file_paths"])
        except (yaml.YAMLError, KeyError, TypeError) as exc:
            raise BagError(
                f"metadata.yaml is not rosbag2 bag metadata: {exc!r}",
                call=call,
                params={"path": str(meta_file)},
            ) from exc
        storage = info.get("storage_identifier", "mcap")
        if storage != "mcap":
            raise BagError(
                f"storage '{storage}' is not supported, only mcap",
                call=call,
                params={"path": str(meta_file)},
                hint="convert with `ros2 bag convert` to MCAP storage",
            )
        if info.get("compression_mode"):
            raise BagError(
                f"file/message compression '{info.get('compression_format')}' is not supported",
                call=call,
                params={"path": str(meta_file)},
                hint="record with MCAP chunk compression (the default) instead",
            )
        files = [p / r for r in rel]
        missing = [str(f) for f in files if not f.is_file()]
        if missing:
            raise BagError(
                "files listed in metadata.yaml are missing", call=call, params={"missing": missing}
            )
        return files, info
    files = sorted(p.glob("*.mcap"))
    if not files:
        raise BagError(
            "directory has neither metadata.yaml nor *.mcap files", call=call, params={"path": str(p)}
        )
    return files, None


class BagReader:
    """Topics and messages of a rosbag2 MCAP bag; ``messages()`` yields in log-time order."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.files, self.metadata = resolve_bag(path)
        self.topics: dict[str, TopicInfo] = {}
        self.start_time_ns: int | None = None
        self.end_time_ns: int | None = None
        self.message_count = 0
        for f in self.files:
            self._scan(f)

    def _open(self, f: Path) -> tuple[IO[bytes], Any]:
        from mcap.exceptions import McapError
        from mcap.reader import make_reader

        stream = f.open("rb")
        try:
            return stream, make_reader(stream)
        except (McapError, ValueError, OSError) as exc:
            stream.close()
            raise BagError(f"not a readable MCAP file: {exc}", call="open", params={"file": str(f)}) from exc

    def _scan(self, f: Path) -> None:
        from mcap.exceptions import McapError

        stream, reader = self._open(f)
        try:
            summary = reader.get_summary()
            if summary is None:
                # A recording that was cut off has no summary: learn channels from the messages.
                self._scan_without_summary(f, reader)
                return
            counts = summary.statistics.channel_message_counts if summary.statistics else {}
            for ch in summary.channels.values():
                schema = summary.schemas.get(ch.schema_id)
                self._add_topic(f, ch, schema, counts.get(ch.id, 0))
            st = summary.statistics
            if st is not None and st.message_count:
                self._add_times(st.message_start_time, st.message_end_time, 0)
                self.message_count += st.message_count
        except McapError as exc:
            raise BagError(f"corrupt MCAP file: {exc}", call="get_summary", params={"file": str(f)}) from exc
        finally:
            stream.close()

    def _scan_without_summary(self, f: Path, reader: Any) -> None:
        for schema, ch, msg in reader.iter_messages(log_time_order=False):
            if ch.topic not in self.topics:
                self._add_topic(f, ch, schema, 0)
            t = self.topics[ch.topic]
            self.topics[ch.topic] = replace(t, message_count=t.message_count + 1)
            self._add_times(msg.log_time, msg.log_time, 1)

    def _add_times(self, start: int, end: int, count: int) -> None:
        self.start_time_ns = start if self.start_time_ns is None else min(self.start_time_ns, start)
        self.end_time_ns = end if self.end_time_ns is None else max(self.end_time_ns, end)
        self.message_count += count

    def _add_topic(self, f: Path, ch: Any, schema: Any, count: int) -> None:
        params = {"file": str(f), "topic": ch.topic}
        if schema is None:
            raise BagError(
                "channel has no schema, so its ROS type is unknown", call="read_channel", params=params
            )
        if schema.encoding not in SCHEMA_ENCODINGS:
            raise BagError(
                f"schema encoding '{schema.encoding}' is not a ROS 2 one {SCHEMA_ENCODINGS}",
                call="read_channel",
                params=params,
            )
        if ch.message_encoding != MESSAGE_ENCODING:
            raise BagError(
                f"message encoding '{ch.message_encoding}' is not '{MESSAGE_ENCODING}'",
                call="read_channel",
                params=params,
            )
        old = self.topics.get(ch.topic)
        if old is not None and old.type != schema.name:
            raise BagError(
                f"topic has two types: {old.type} and {schema.name}", call="read_channel", params=params
            )
        self.topics[ch.topic] = TopicInfo(
            name=ch.topic,
            type=schema.name,
            serialization_format=ch.message_encoding,
            offered_qos_profiles=ch.metadata.get("offered_qos_profiles", ""),
            type_description_hash=ch.metadata.get("topic_type_hash", ""),
            message_count=count + (old.message_count if old else 0),
        )

    @property
    def duration_ns(self) -> int:
        if self.start_time_ns is None or self.end_time_ns is None:
            return 0
        return self.end_time_ns - self.start_time_ns

    def messages(self, topics: Iterable[str] | None = None) -> Iterator[BagMessage]:
        """Messages of the chosen topics (all by default), file after file, each in log-time order."""
        from mcap.exceptions import McapError

        wanted = None if topics is None else set(topics)
        for f in self.files:
            stream, reader = self._open(f)
            try:
                for schema, ch, msg in reader.iter_messages(
                    topics=None if wanted is None else sorted(wanted), log_time_order=True
                ):
                    yield BagMessage(
                        topic=ch.topic,
                        type=schema.name if schema is not None else "",
                        data=bytes(msg.data),
                        log_time_ns=msg.log_time,
                        publish_time_ns=msg.publish_time,
                    )
            except McapError as exc:
                raise BagError(
                    f"corrupt MCAP data: {exc}", call="iter_messages", params={"file": str(f)}
                ) from exc
            finally:
                stream.close()


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
        self._writer.start(profile="ros2", library="dla_infer_node.bags.bag_io")
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

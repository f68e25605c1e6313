"""Read rosbag2 MCAP bags without ROS (only the ``mcap`` library).

A bag is either one ``.mcap`` file or a rosbag2 bag directory (``metadata.yaml`` naming its files; a
directory without metadata.yaml is read as its ``*.mcap`` files in name order). Messages are kept as the
recorded serialized CDR bytes: nothing is decoded here. Writing lives in ``bag_writer``, rclpy
publishing in ``replayer``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any

from dla_infer_node.core.errors import InputError
from dla_infer_node.core.yaml_file import read_yaml

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
            doc = read_yaml(meta_file)
            info = doc["rosbag2_bagfile_information"]
            rel = list(info["relative_file_paths"])
        except (ValueError, KeyError, TypeError) as exc:
            why = str(exc) if isinstance(exc, ValueError) else repr(exc)  # read_yaml's reason is one line
            raise BagError(
                f"metadata.yaml is not rosbag2 bag metadata: {why}",
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

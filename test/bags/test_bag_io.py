"""ROS-free checks of the rosbag2 MCAP reader/writer (no rclpy needed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from mcap.reader import make_reader
from mcap.writer import Writer

from dla_infer_node.bags.bag_io import BagError, BagReader, resolve_bag
from dla_infer_node.bags.bag_meta import (
    QosProfile,
    dump_offered_qos,
    message_definition,
    msg_dependencies,
    parse_offered_qos,
    type_description_hash,
)
from dla_infer_node.bags.bag_writer import BagWriter

IMG = "sensor_msgs/msg/CompressedImage"
BEST_EFFORT = QosProfile(history="keep_last", depth=1, reliability="best_effort", durability="volatile")


def _payload(i: int) -> bytes:
    # Looks like CDR (little-endian encapsulation header) but the writer must not care.
    return b"\x00\x01\x00\x00" + bytes([i % 256]) * (10 + i)


def _write_sample(path: Path) -> BagWriter:
    with BagWriter(path, ros_distro="jazzy") as w:
        w.add_topic("/camera/image/compressed", IMG, definition="uint8[] data\n")
        w.add_topic("/other", "std_msgs/msg/String", definition="string data\n", qos=[BEST_EFFORT])
        for i in range(5):
            w.write("/camera/image/compressed", _payload(i), log_time_ns=1_000_000_000 + i * 100_000_000)
        w.write("/other", b"\x00\x01\x00\x00abc", log_time_ns=1_050_000_000, publish_time_ns=1_040_000_000)
    return w


def test_directory_bag_round_trip(tmp_path: Path) -> None:
    bag = tmp_path / "my_bag"
    _write_sample(bag)
    assert sorted(p.name for p in bag.iterdir()) == ["metadata.yaml", "my_bag_0.mcap"]

    r = BagReader(bag)
    assert r.message_count == 6
    assert r.start_time_ns == 1_000_000_000
    assert r.duration_ns == 400_000_000
    assert set(r.topics) == {"/camera/image/compressed", "/other"}
    img = r.topics["/camera/image/compressed"]
    assert (img.type, img.serialization_format, img.message_count) == (IMG, "cdr", 5)
    assert parse_offered_qos(r.topics["/other"].offered_qos_profiles) == [BEST_EFFORT]

    msgs = list(r.messages())
    assert [m.log_time_ns for m in msgs] == sorted(m.log_time_ns for m in msgs)
    cam = [m for m in msgs if m.topic == "/camera/image/compressed"]
    assert [m.data for m in cam] == [_payload(i) for i in range(5)]
    other = [m for m in msgs if m.topic == "/other"]
    assert other[0].publish_time_ns == 1_040_000_000 and other[0].type == "std_msgs/msg/String"
    assert [m.topic for m in r.messages(topics=["/other"])] == ["/other"]


def test_metadata_yaml_follows_rosbag2(tmp_path: Path) -> None:
    bag = tmp_path / "b"
    _write_sample(bag)
    info = yaml.safe_load((bag / "metadata.yaml").read_text())["rosbag2_bagfile_information"]
    assert info["storage_identifier"] == "mcap"
    assert info["relative_file_paths"] == ["b_0.mcap"]
    assert info["message_count"] == 6
    assert info["duration"] == {"nanoseconds": 400_000_000}
    assert info["starting_time"] == {"nanoseconds_since_epoch": 1_000_000_000}
    assert info["ros_distro"] == "jazzy"
    topics = {t["topic_metadata"]["name"]: t for t in info["topics_with_message_count"]}
    assert topics["/camera/image/compressed"]["message_count"] == 5
    assert topics["/other"]["topic_metadata"]["serialization_format"] == "cdr"
    assert info["files"][0]["path"] == "b_0.mcap" and info["files"][0]["message_count"] == 6


def test_mcap_records_follow_rosbag2(tmp_path: Path) -> None:
    bag = tmp_path / "b"
    _write_sample(bag)
    with (bag / "b_0.mcap").open("rb") as f:
        reader = make_reader(f)
        assert reader.get_header().profile == "ros2"
        summary = reader.get_summary()
        assert summary is not None
        schemas = {s.name: s for s in summary.schemas.values()}
        assert schemas[IMG].encoding == "ros2msg" and schemas[IMG].data == b"uint8[] data\n"
        for ch in summary.channels.values():
            assert ch.message_encoding == "cdr"
            assert parse_offered_qos(ch.metadata["offered_qos_profiles"])
            assert "topic_type_hash" in ch.metadata
        records = {m.name: m.metadata for m in reader.iter_metadata()}
    meta = yaml.safe_load(records["rosbag2"]["serialized_metadata"])
    assert meta["message_count"] == 6 and meta["storage_identifier"] == "mcap"


def test_single_file_and_directory_without_metadata(tmp_path: Path) -> None:
    f = tmp_path / "plain.mcap"
    _write_sample(f)
    assert not (tmp_path / "metadata.yaml").exists()
    assert BagReader(f).message_count == 6
    d = tmp_path / "loose"
    d.mkdir()
    f.rename(d / "x.mcap")
    files, meta = resolve_bag(d)
    assert [p.name for p in files] == ["x.mcap"] and meta is None
    assert len(list(BagReader(d).messages())) == 6
    # metadata.yaml itself may be given as the path
    bag = tmp_path / "withmeta"
    _write_sample(bag)
    assert BagReader(bag / "metadata.yaml").message_count == 6


def test_split_bag_reads_all_files_in_order(tmp_path: Path) -> None:
    a, b = tmp_path / "a.mcap", tmp_path / "b.mcap"
    for path, base in ((a, 0), (b, 10)):
        with BagWriter(path) as w:
            w.add_topic("/t", IMG, definition="")
            for i in range(3):
                w.write("/t", _payload(base + i), log_time_ns=(base + i) * 1000)
    bag = tmp_path / "split"
    bag.mkdir()
    a.rename(bag / "split_0.mcap")
    b.rename(bag / "split_1.mcap")
    info = {
        "rosbag2_bagfile_information": {
            "storage_identifier": "mcap",
            "relative_file_paths": ["split_0.mcap", "split_1.mcap"],
        }
    }
    (bag / "metadata.yaml").write_text(yaml.safe_dump(info))
    r = BagReader(bag)
    assert r.topics["/t"].message_count == 6
    assert [m.log_time_ns for m in r.messages()] == [0, 1000, 2000, 10000, 11000, 12000]


@pytest.mark.parametrize(
    "setup, match",
    [
        ("missing", "no such bag"),
        ("not_mcap", "not a readable MCAP"),
        ("json_channel", "schema encoding 'jsonschema'"),
        ("sqlite", "storage 'sqlite3'"),
        ("missing_file", "missing"),
        ("bad_yaml", "not rosbag2 bag metadata"),
        ("deep_yaml", "not rosbag2 bag metadata: nested too deeply"),  # was a RecursionError traceback
        ("empty_dir", "neither metadata.yaml"),
    ],
)
def test_bad_bags_raise_bag_error(tmp_path: Path, setup: str, match: str) -> None:
    target = tmp_path / "bag"
    if setup == "not_mcap":
        target = tmp_path / "x.mcap"
        target.write_bytes(b"this is not an mcap file at all" * 4)
    elif setup == "json_channel":
        target = tmp_path / "j.mcap"
        with target.open("wb") as f:
            w = Writer(f)
            w.start(profile="", library="test")
            sid = w.register_schema(name="Thing", encoding="jsonschema", data=b"{}")
            w.register_channel(topic="/j", message_encoding="json", schema_id=sid)
            w.finish()
    elif setup in ("sqlite", "missing_file", "bad_yaml", "deep_yaml", "empty_dir"):
        target.mkdir()
        if setup == "sqlite":
            doc = {"storage_identifier": "sqlite3", "relative_file_paths": ["bag_0.db3"]}
            (target / "metadata.yaml").write_text(yaml.safe_dump({"rosbag2_bagfile_information": doc}))
        elif setup == "missing_file":
            doc = {"storage_identifier": "mcap", "relative_file_paths": ["gone_0.mcap"]}
            (target / "metadata.yaml").write_text(yaml.safe_dump({"rosbag2_bagfile_information": doc}))
        elif setup == "bad_yaml":
            (target / "metadata.yaml").write_text("just: [a, list")
        elif setup == "deep_yaml":
            (target / "metadata.yaml").write_text("a: " + "[" * 10_000 + "]" * 10_000)
    with pytest.raises(BagError, match=match) as info:
        BagReader(target)
    assert "[bag_io]" in str(info.value)


def test_writer_refuses_to_clobber_and_unknown_topics(tmp_path: Path) -> None:
    bag = tmp_path / "b"
    _write_sample(bag)
    with pytest.raises(BagError, match="exists"):
        BagWriter(bag)
    with BagWriter(bag, overwrite=True) as w, pytest.raises(BagError, match="undeclared topic"):
        w.write("/nope", b"", 0)
    assert BagReader(bag).message_count == 0


def test_qos_text_integer_and_named_forms() -> None:
    v8 = "- history: 1\n  depth: 5\n  reliability: 2\n  durability: 1\n  liveliness: 1\n"
    v9 = "- history: keep_last\n  depth: 5\n  reliability: best_effort\n  durability: transient_local\n"
    expected = QosProfile("keep_last", 5, "best_effort", "transient_local", "automatic")
    assert parse_offered_qos(v8) == [expected]
    assert parse_offered_qos(v9) == [expected]
    assert parse_offered_qos(dump_offered_qos([expected])) == [expected]
    assert parse_offered_qos(dump_offered_qos([expected], version=9)) == [expected]
    assert "reliability: 2" in dump_offered_qos([expected])
    assert parse_offered_qos("") == [] and parse_offered_qos("{not a list: 1}") == []


def test_message_definition_concatenates_like_rosbag2(tmp_path: Path) -> None:
    share = tmp_path / "share"
    for pkg, name, text in [
        ("pkg_a", "Outer", "# comment\nstd_msgs/Header header\nInner[] items\nstring<=8 short\nuint8 K=3\n"),
        ("pkg_a", "Inner", "pkg_b/Leaf leaf\nfloat64 v\n"),
        ("pkg_b", "Leaf", "int32 x\n"),
        ("std_msgs", "Header", "builtin_interfaces/Time stamp\nstring frame_id\n"),
        ("builtin_interfaces", "Time", "int32 sec\nuint32 nanosec\n"),
    ]:
        (share / pkg / "msg").mkdir(parents=True, exist_ok=True)
        (share / pkg / "msg" / f"{name}.msg").write_text(text)
    text = message_definition("pkg_a/msg/Outer", [share])
    sep = "=" * 80 + "\n"
    blocks = text.split("\n" + sep)
    assert blocks[0].startswith("# comment\n")
    headers = [b.split("\n", 1)[0] for b in blocks[1:]]
    # depth first, dependencies of one type in sorted order, each type once
    assert headers == [
        "MSG: pkg_a/Inner",
        "MSG: pkg_b/Leaf",
        "MSG: std_msgs/Header",
        "MSG: builtin_interfaces/Time",
    ]
    assert msg_dependencies("Header h\nfoo_msgs/Bar[3] b\n# x/Y z\n", "p") == {
        "std_msgs/Header",
        "foo_msgs/Bar",
    }
    assert message_definition("pkg_a/msg/Missing", [share]) == ""


def test_type_hash_from_rosidl_json(tmp_path: Path) -> None:
    msg_dir = tmp_path / "share" / "pkg_a" / "msg"
    msg_dir.mkdir(parents=True)
    doc = {
        "type_hashes": [{"type_name": "pkg_a/msg/T", "hash_string": "RIHS01_ab"}, {"type_name": "x/msg/Y"}]
    }
    (msg_dir / "T.json").write_text(json.dumps(doc))
    assert type_description_hash("pkg_a/msg/T", [tmp_path / "share"]) == "RIHS01_ab"
    assert type_description_hash("pkg_a/msg/Other", [tmp_path / "share"]) == ""
    with BagWriter(tmp_path / "h.mcap") as w:
        w.add_topic("/t", "pkg_a/msg/T", definition="", type_description_hash="RIHS01_cd")
    assert BagReader(tmp_path / "h.mcap").topics["/t"].type_description_hash == "RIHS01_cd"


def test_reads_a_bag_written_by_another_mcap_writer(tmp_path: Path) -> None:
    """A bag as rosbag2 itself lays it out (version-9 metadata with named QoS policies, LZ4 chunks, no
    rosbag2 metadata record, a library string of its own) reads the same way."""
    from mcap.writer import CompressionType

    bag = tmp_path / "recorded"
    bag.mkdir()
    qos9 = "- history: keep_last\n  depth: 7\n  reliability: best_effort\n  durability: volatile\n"
    with (bag / "recorded_0.mcap").open("wb") as f:
        w = Writer(f, compression=CompressionType.LZ4)
        w.start(profile="ros2", library="libmcap 1.4.0")
        sid = w.register_schema(name=IMG, encoding="ros2msg", data=b"std_msgs/Header header\nuint8[] data\n")
        cid = w.register_channel(
            topic="/cam/compressed",
            message_encoding="cdr",
            schema_id=sid,
            metadata={"offered_qos_profiles": qos9, "topic_type_hash": "RIHS01_00"},
        )
        for i in range(3):
            w.add_message(channel_id=cid, log_time=500 + i, data=_payload(i), publish_time=400 + i)
        w.finish()
    info = {
        "version": 9,
        "storage_identifier": "mcap",
        "relative_file_paths": ["recorded_0.mcap"],
        "compression_format": "",
        "compression_mode": "",
    }
    (bag / "metadata.yaml").write_text(yaml.safe_dump({"rosbag2_bagfile_information": info}))
    r = BagReader(bag)
    t = r.topics["/cam/compressed"]
    assert (t.type, t.message_count, t.type_description_hash) == (IMG, 3, "RIHS01_00")
    assert parse_offered_qos(t.offered_qos_profiles) == [
        QosProfile("keep_last", 7, "best_effort", "volatile")
    ]
    msgs = list(r.messages())
    assert [m.data for m in msgs] == [_payload(i) for i in range(3)]
    assert [(m.log_time_ns, m.publish_time_ns) for m in msgs] == [(500, 400), (501, 401), (502, 402)]

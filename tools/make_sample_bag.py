"""Write samples/sample_bag: a rosbag2 MCAP bag of sensor_msgs/CompressedImage JPEG frames of synthetic
scenes (dla_infer_node.core.synth), plus their ground truth as a JSON sidecar.

    .venv/bin/python tools/make_sample_bag.py [--out samples/sample_bag] [--frames 60] [--hz 10]
    .venv/bin/python tools/make_sample_bag.py --encoding yuyv --out /tmp/yuyv_bag [--rgb8-twin]

With ``--encoding`` the frames are raw sensor_msgs/Image on /camera/image_raw, as a camera publishing that
encoding would send them (YUYV, NV12, Bayer, 16-bit...: ``core.synth_frames``); ``--rgb8-twin`` writes
instead the rgb8 frames cv_bridge makes of that camera's frames (``core.color_convert``), the stream the
node must answer alike.

Deterministic: frame i is generate_scene(seed=SEED0 + i) stamped START + i / hz (only the CDR alignment
padding bytes, which the serializer leaves uninitialised, differ between runs). Messages are serialized with
rclpy.serialization, so the bag is what `ros2 bag record -s mcap` would hold for such a camera.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import cv2

from dla_infer_node.bags.bag_io import BagReader
from dla_infer_node.bags.bag_meta import QosProfile
from dla_infer_node.bags.bag_writer import BagWriter
from dla_infer_node.core.color_convert import to_rgb8
from dla_infer_node.core.image_io import image_from_fields
from dla_infer_node.core.synth import generate_scene
from dla_infer_node.core.synth_frames import fields_in

REPO = Path(__file__).resolve().parents[1]
SEED0 = 1000
START_NS = 1_764_000_000_000_000_000  # a fixed wall-clock start, so the bag is reproducible
RECEIVE_LATENCY_NS = 2_000_000  # log time = stamp + 2 ms, like a recorder on the camera's host
TOPIC = "/camera/image/compressed"
RAW_TOPIC = "/camera/image_raw"
FRAME_ID = "camera"
# What a typical camera driver offers: reliable, volatile, keep last 10.
CAMERA_QOS = QosProfile(history="keep_last", depth=10, reliability="reliable", durability="volatile")


def ground_truth_path(bag: Path) -> Path:
    return bag.parent / f"{bag.name}.ground_truth.json"


def compressed_image(msg: Any, rgb: Any, quality: int, index: int) -> Any:
    ok, jpeg = cv2.imencode(".jpg", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, quality])
    if not ok:
        raise RuntimeError(f"cv2.imencode failed for frame {index}")
    msg.format = "rgb8; jpeg compressed bgr8"  # image_transport's convention for colour JPEG
    msg.data = jpeg.tobytes()
    return msg


def raw_image(msg: Any, rgb: Any, encoding: str, rgb8_twin: bool) -> Any:
    """An Image of ``rgb`` as an ``encoding`` camera sends it, or (twin) the rgb8 cv_bridge makes of that."""
    fields = fields_in(rgb, encoding)
    if rgb8_twin:
        fields = fields_in(to_rgb8(image_from_fields(**fields), encoding), "rgb8")
    for key, value in fields.items():
        setattr(msg, key, value)
    return msg


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=REPO / "samples" / "sample_bag")
    ap.add_argument("--frames", type=int, default=60)
    ap.add_argument("--hz", type=float, default=10.0)
    ap.add_argument("--width", type=int, default=640)
    ap.add_argument("--height", type=int, default=480)
    ap.add_argument("--quality", type=int, default=80, help="JPEG quality")
    ap.add_argument("--encoding", default="", help="raw Image frames in this ROS encoding instead of JPEG")
    ap.add_argument("--rgb8-twin", action="store_true",
                    help="with --encoding: the rgb8 frames cv_bridge makes of that encoding's frames")
    ap.add_argument("--compression", choices=("zstd", "lz4", "none"), default="zstd",
                    help="MCAP chunk compression (none: readable without the zstandard package)")
    args = ap.parse_args(argv)
    if args.rgb8_twin and not args.encoding:
        ap.error("--rgb8-twin needs --encoding")

    from rclpy.serialization import serialize_message
    from sensor_msgs.msg import CompressedImage, Image

    period_ns = round(1e9 / args.hz)
    frames: list[dict[str, Any]] = []
    n_objects: list[int] = []
    topic = RAW_TOPIC if args.encoding else TOPIC
    with BagWriter(args.out, compression=args.compression, overwrite=True, ros_distro="jazzy") as bag:
        bag.add_topic(topic, f"sensor_msgs/msg/{'Image' if args.encoding else 'CompressedImage'}",
                      qos=[CAMERA_QOS])
        for i in range(args.frames):
            scene = generate_scene(SEED0 + i, width=args.width, height=args.height)
            stamp = START_NS + i * period_ns
            msg: Any = raw_image(Image(), scene.image, args.encoding, args.rgb8_twin) if args.encoding else (
                compressed_image(CompressedImage(), scene.image, args.quality, i))
            msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(stamp, 1_000_000_000)
            msg.header.frame_id = FRAME_ID
            data = serialize_message(msg)
            # Fast DDS may pad a sample to a multiple of 4 bytes in transit (CDR allows trailing padding),
            # so recordings hold such payloads; storing them aligned keeps replay -> receive byte-identical.
            data += b"\0" * (-len(data) % 4)
            bag.write(topic, data, log_time_ns=stamp + RECEIVE_LATENCY_NS, publish_time_ns=stamp)
            n_objects.append(len(scene.class_ids))
            frames.append(
                {
                    "index": i,
                    "seed": SEED0 + i,
                    "stamp": {"sec": msg.header.stamp.sec, "nanosec": msg.header.stamp.nanosec},
                    "boxes_xyxy": [[round(float(v), 3) for v in box] for box in scene.boxes],
                    "class_ids": [int(c) for c in scene.class_ids],
                    "class_names": [scene.class_names[int(c)] for c in scene.class_ids],
                }
            )
    truth = {
        "bag": args.out.name,
        "topic": topic,
        "frame_id": FRAME_ID,
        "encoding": ("rgb8" if args.rgb8_twin else args.encoding) or "jpeg",
        "width": args.width,
        "height": args.height,
        "hz": args.hz,
        "jpeg_quality": args.quality,
        "classes": list(generate_scene(SEED0).class_names),
        "frames": frames,
    }
    ground_truth_path(args.out).write_text(json.dumps(truth, indent=1) + "\n")
    size = sum(p.stat().st_size for p in args.out.iterdir())
    n_obj = sum(n_objects)
    print(
        f"wrote {args.out} ({BagReader(args.out).message_count} msgs, {size / 1e6:.2f} MB, {n_obj} objects)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Write samples/sample_bag: a rosbag2 MCAP bag of sensor_msgs/CompressedImage JPEG frames of synthetic
scenes (dla_infer_node.core.synth), plus their ground truth as a JSON sidecar.

    .venv/bin/python tools/make_sample_bag.py [--out samples/sample_bag] [--frames 60] [--hz 10]

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
from dla_infer_node.core.synth import generate_scene

REPO = Path(__file__).resolve().parents[1]
SEED0 = 1000
START_NS = 1_764_000_000_000_000_000  # a fixed wall-clock start, so the bag is reproducible
RECEIVE_LATENCY_NS = 2_000_000  # log time = stamp + 2 ms, like a recorder on the camera's host
TOPIC = "/camera/image/compressed"
FRAME_ID = "camera"
# What a typical camera driver offers: reliable, volatile, keep last 10.
CAMERA_QOS = QosProfile(history="keep_last", depth=10, reliability="reliable", durability="volatile")


def ground_truth_path(bag: Path) -> Path:
    return bag.parent / f"{bag.name}.ground_truth.json"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=REPO / "samples" / "sample_bag")
    ap.add_argument("--frames", type=int, default=60)
    ap.add_argument("--hz", type=float, default=10.0)
    ap.add_argument("--width", type=int, default=640)
    ap.add_argument("--height", type=int, default=480)
    ap.add_argument("--quality", type=int, default=80, help="JPEG quality")
    args = ap.parse_args(argv)

    from rclpy.serialization import serialize_message
    from sensor_msgs.msg import CompressedImage

    period_ns = round(1e9 / args.hz)
    frames: list[dict[str, Any]] = []
    n_objects: list[int] = []
    with BagWriter(args.out, overwrite=True, ros_distro="jazzy") as bag:
        bag.add_topic(TOPIC, "sensor_msgs/msg/CompressedImage", qos=[CAMERA_QOS])
        for i in range(args.frames):
            scene = generate_scene(SEED0 + i, width=args.width, height=args.height)
            ok, jpeg = cv2.imencode(
                ".jpg", cv2.cvtColor(scene.image, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, args.quality]
            )
            if not ok:
                raise RuntimeError(f"cv2.imencode failed for frame {i}")
            stamp = START_NS + i * period_ns
            msg = CompressedImage()
            msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(stamp, 1_000_000_000)
            msg.header.frame_id = FRAME_ID
            msg.format = "rgb8; jpeg compressed bgr8"  # image_transport's convention for colour JPEG
            msg.data = jpeg.tobytes()
            data = serialize_message(msg)
            # Fast DDS may pad a sample to a multiple of 4 bytes in transit (CDR allows trailing padding),
            # so recordings hold such payloads; storing them aligned keeps replay -> receive byte-identical.
            data += b"\0" * (-len(data) % 4)
            bag.write(TOPIC, data, log_time_ns=stamp + RECEIVE_LATENCY_NS, publish_time_ns=stamp)
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
        "topic": TOPIC,
        "frame_id": FRAME_ID,
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

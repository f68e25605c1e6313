"""``make demo``: the sample bag through the node in a real ROS 2 graph, then a report.

Processes: the node (CPU backend, compressed input), ``replay`` (the bag's recorded CDR bytes at their
recorded timing) and ``capture`` (the node's ``detections`` to ``detections.mcap``); this process also
listens, with its own rclpy context, to the image topic (receive time of each frame) and to
/diagnostics (the node's counters). DDS is kept on loopback with a domain of its own.

Latency reported = receive time of a frame's detections (capture process) minus receive time of the
same frame's image (this process), both on this host's wall clock: the end-to-end delay a downstream
subscriber sees, transport both ways included. The node's own receive->publish timing (from
/diagnostics) is shown next to it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from dla_infer_node.bags.bag_io import BagReader
from dla_infer_node.bags.capture import Recorder
from dla_infer_node.bags.replayer import import_message_type
from dla_infer_node.cli import demo_report as rep
from dla_infer_node.core.image_io import to_bgr8

REPO = Path(__file__).resolve().parents[2]
NS = "/demo"


def _env() -> dict[str, str]:
    os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    os.environ["ROS_LOCALHOST_ONLY"] = "1"
    os.environ.setdefault("ROS_DOMAIN_ID", str(1 + (os.getpid() * 5) % 200))
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    return dict(os.environ)


def _spawn(args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with open(log, "wb") as fh:
        return subprocess.Popen([sys.executable, "-m", *args], stdout=fh, stderr=subprocess.STDOUT, env=env)


def _stop(proc: subprocess.Popen[bytes], timeout: float = 30.0) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait(10)


def _wait(pred: Any, timeout: float, alive: list[subprocess.Popen[bytes]] | None = None) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        if alive and any(p.poll() is not None for p in alive):
            return bool(pred())
        time.sleep(0.1)
    return bool(pred())


def _diag(records: list[Any]) -> dict[str, str]:
    for r in reversed(records):
        for st in r.msg.status:
            if st.name.startswith(f"{NS}/dla_infer_node:"):
                return {kv.key: kv.value for kv in st.values}
    return {}


def _detections(path: Path) -> list[rep.FrameResult]:
    from rclpy.serialization import deserialize_message
    from vision_msgs.msg import Detection2DArray

    # ros_convert loads the ROS message packages: imported where the demo reads ROS messages, as above
    from dla_infer_node.ros.ros_convert import from_detection_array

    out = []
    for m in BagReader(path).messages():
        msg = deserialize_message(m.data, Detection2DArray)
        boxes, names, scores = from_detection_array(msg)
        out.append(rep.FrameResult(
            stamp_ns=msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec,
            names=names, scores=scores,
            boxes=boxes, det_receive_ns=m.log_time_ns))
    return out


def run(args: argparse.Namespace) -> int:
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    env = _env()
    reader = BagReader(args.bag)
    topic = next((t for t in reader.topics.values() if t.type.endswith(("/CompressedImage", "/Image"))), None)
    if topic is None:
        print(f"demo: no Image/CompressedImage topic in {args.bag}", file=sys.stderr)
        return 2
    compressed = topic.type.endswith("CompressedImage")
    params = ["-p", f"input_transport:={'compressed' if compressed else 'raw'}",
              "-p", "diagnostics_period:=0.5"]
    if args.model:
        params += ["-p", f"model_path:='{args.model}'"]
    node_topic = "image/compressed" if compressed else "image"
    node = _spawn(["dla_infer_node.ros.node", "--ros-args", "-r", f"__ns:={NS}", "-r",
                   f"{node_topic}:={topic.name}", *params], out / "node.log", env)
    procs = [node]
    images = diags = None
    try:
        images = Recorder(topic.name, topic.type, node_name="demo_image_probe", depth=50)
        diags = Recorder("/diagnostics", "diagnostic_msgs/msg/DiagnosticArray", node_name="demo_diag_probe")
        print(f"demo: starting the node (CPU backend) on {topic.name} ...", file=sys.stderr)
        if not _wait(lambda: _diag(diags.snapshot()), 180, procs):
            print("demo: the node did not come up; its log:\n" + (out / "node.log").read_text(),
                  file=sys.stderr)
            return 1
        capture = _spawn(["dla_infer_node.bags.capture", "--topic", f"{NS}/detections", "--out",
                          str(out / "detections.mcap"), "--duration", "3600", "--depth", "200"],
                         out / "capture.log", env)
        procs.append(capture)
        # discovery is per pair, and each side of a pair matches on its own time: the node's writer must
        # count the capture (its diagnostics say so), else the first arrays of a loaded machine are lost
        if not _wait(lambda: int(_diag(diags.snapshot()).get("detections_subscribers", 0)) >= 1, 60, procs):
            print("demo: the node never matched the capture; its log:\n" + (out / "capture.log").read_text(),
                  file=sys.stderr)
            return 1
        print(f"demo: replaying {args.bag} ({topic.message_count} frames) at rate {args.rate} ...",
              file=sys.stderr)
        replay = subprocess.run([sys.executable, "-m", "dla_infer_node.bags.replay", str(args.bag), "--rate",
                                 str(args.rate), "--wait-subscribers", "2", "--wait-timeout", "60",
                                 "--no-progress"], env=env, capture_output=True, text=True, timeout=600)
        (out / "replay.log").write_text(replay.stdout + replay.stderr)
        if replay.returncode != 0:
            print("demo: replay failed:\n" + replay.stderr, file=sys.stderr)
            return 1

        def settled() -> bool:  # every frame the node received is accounted for
            d = _diag(diags.snapshot())
            done = sum(int(d.get(k, 0)) for k in ("frames_processed", "frames_dropped", "frames_bad_input",
                                                  "frames_failed"))
            return bool(d) and done >= int(d.get("frames_in", 0)) > 0

        _wait(settled, 60, procs)
        time.sleep(1.0)  # the last detections reach the capture; one more diagnostics period
        counters = _diag(diags.snapshot())
        image_rx = {r.stamp_ns: r.receive_ns for r in images.snapshot()}
        rc_capture = _stop(capture)
        rc_node = _stop(node)
    finally:
        for rec in (images, diags):
            if rec is not None:
                rec.close()
        for p in procs:
            if p.poll() is None:
                _stop(p)
    if rc_node != 0 or rc_capture != 0:
        print(f"demo: node exited {rc_node}, capture {rc_capture}; see {out}/node.log", file=sys.stderr)
        return 1
    return report(args, out, reader, topic, _detections(out / "detections.mcap"), image_rx, counters)


def report(args: argparse.Namespace, out: Path, reader: Any, topic: Any, frames: list[rep.FrameResult],
           image_rx: dict[int, int], counters: dict[str, str]) -> int:
    from rclpy.serialization import deserialize_message

    # ros_convert loads the ROS message packages: imported where the demo reads ROS messages, as above
    from dla_infer_node.ros.ros_convert import frame_from_msg

    for fr in frames:
        fr.image_receive_ns = image_rx.get(fr.stamp_ns)
    lat = [v for v in (fr.latency_ms for fr in frames) if v is not None]
    gt_path = Path(str(args.bag).rstrip("/") + ".ground_truth.json")
    gt = rep.load_ground_truth(json.loads(gt_path.read_text())) if gt_path.is_file() else None
    classes = list(gt.classes) if gt else sorted(rep.per_class(frames))
    # whole-run rates: the node's own input_fps/output_fps are per diagnostics period, and the last
    # period (after the replay ended) reads 0
    fps_in, fps_out = rep.rate_hz(list(image_rx.values())), rep.rate_hz([f.det_receive_ns for f in frames])
    numbers = {**rep.as_numbers(counters), "input_fps": fps_in, "output_fps": fps_out}
    rows = [("frames in the bag (published by replay)", str(topic.message_count)),
            ("frames received by the node", counters.get("frames_in", "?")),
            ("frames processed (detections published)", counters.get("frames_processed", "?")),
            ("frames dropped (newer frame arrived first)", counters.get("frames_dropped", "?")),
            ("frames with unusable input", counters.get("frames_bad_input", "?")),
            ("detection arrays captured", str(len(frames))),
            ("detections, total", str(sum(len(f.names) for f in frames)))]
    rows += [(f"  {name}", str(n)) for name, n in sorted(rep.per_class(frames).items())]
    node_p50 = float(counters.get("latency_ms_p50", "nan"))
    node_p95 = float(counters.get("latency_ms_p95", "nan"))
    rows += [("latency end-to-end p50 / p95 [ms]",
              f"{rep.percentile(lat, 50):.1f} / {rep.percentile(lat, 95):.1f}"),
             ("latency in the node p50 / p95 [ms]", f"{node_p50:.1f} / {node_p95:.1f}"),
             ("rate in / out over the replay [fps]", f"{fps_in:.1f} / {fps_out:.1f}")]
    if gt is not None:
        tp, n_det, n_gt = rep.match_counts(frames, gt)
        rows.append(("ground truth found (IoU>=0.5, class)", f"{tp}/{n_gt} = {tp / max(n_gt, 1):.1%}"))
        rows.append(("detections that are correct", f"{tp}/{n_det} = {tp / max(n_det, 1):.1%}"))
    print(rep.table(rows, f"dla_infer_node demo: {args.bag} -> {topic.name} ({topic.type}), "
                          "backend onnxruntime (CPU)"))
    print("latency end-to-end = detections received (capture) - image received (demo listener), "
          "same host clock")
    by_stamp = {f.stamp_ns: f for f in frames}
    msg_type = import_message_type(topic.type)
    msgs = list(reader.messages([topic.name]))
    picks = np.linspace(0, len(msgs) - 1, num=min(args.sheet, len(msgs))).round().astype(int) if msgs else []
    tiles: list[tuple[np.ndarray, rep.FrameResult | None, str, int]] = []
    for i in sorted({int(p) for p in picks}):
        msg = deserialize_message(msgs[i].data, msg_type)
        view, encoding = frame_from_msg(msg)
        stamp = msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec
        tiles.append((to_bgr8(view, encoding), by_stamp.get(stamp), f"frame {i}", stamp))
    sheet = rep.write_png(out / "contact_sheet.png", rep.contact_sheet(tiles, classes, gt))
    hist = rep.write_png(out / "latency_histogram.png", rep.histogram(
        lat, f"end-to-end latency, image received -> detections received ({len(lat)} frames)"))
    summary = {"bag": str(args.bag), "topic": topic.name, "counters": numbers,
               "fps": {"definition": "messages per second from the first to the last one received, over "
                                     "the whole replay (images: demo listener; detections: capture)",
                       "input": fps_in, "output": fps_out},
               "detections_per_class": dict(rep.per_class(frames)), "arrays": len(frames),
               "latency_ms": {"definition": "detections receive - image receive (host wall clock)",
                              "p50": rep.percentile(lat, 50), "p95": rep.percentile(lat, 95), "samples": lat}}
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(f"demo: wrote {sheet}, {hist}, {out / 'detections.mcap'} and {out / 'summary.json'}")
    print(f"demo: output folder: {out.resolve()}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="demo", description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--bag", type=Path, default=REPO / "samples" / "sample_bag")
    ap.add_argument("--out", type=Path, default=Path("out") / "demo")
    ap.add_argument("--rate", type=float, default=1.0, help="replay speed factor")
    ap.add_argument("--model", default="", help="ONNX model (default: the shipped one)")
    ap.add_argument("--sheet", type=int, default=12, help="frames on the contact sheet")
    args = ap.parse_args(argv)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())

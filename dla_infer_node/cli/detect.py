"""See the detector work before ROS: ``python -m dla_infer_node.cli.detect IMAGE... [--json] [--out DIR]``.

With ``--json`` stdout carries exactly one JSON list per image, one line each, in argument order:
``[{"class": str, "score": float, "bbox": [x1, y1, x2, y2], "bbox_format": "xyxy_source_pixels"}, ...]``:
top-left and bottom-right corners in pixels of the image as read (not the network's letterboxed input).
Scores and coordinates are the detector's float32 values in full (the fewest digits that read back as the
same float32), so figures computed from this output equal those computed by ``evaluate``.
Annotated copies go to ``--out`` as ``<stem>_det.png``. ``--raw ENCODING:WxH`` reads raw camera frames
(any encoding the node takes: YUYV, NV12, Bayer, 16-bit...) instead of image files. Errors print one line
(``error: [stage] ...``) on stderr, exit code 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dla_infer_node.backends.factory import BackendSettings, open_backend
from dla_infer_node.core import encodings
from dla_infer_node.core.color_convert import scale_to_8bit
from dla_infer_node.core.errors import DlaInferError, InputError
from dla_infer_node.core.image_io import draw_detections, frame_from_fields, quiet_opencv_log
from dla_infer_node.core.pipeline import Detector

# what "bbox" means, stated in every --json item so a reader of the output alone cannot misread it
BBOX_FORMAT = "xyxy_source_pixels"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="detect", description=__doc__.splitlines()[0])
    p.add_argument("images", nargs="+", metavar="IMAGE",
                   help="image files (read with OpenCV as bgr8; 16-bit PNG/TIFF scaled by 255/65535), or raw "
                        "camera frames with --raw")
    p.add_argument("--raw", metavar="ENCODING:WxH", type=_raw_format, default=None,
                   help="the IMAGE files are raw frames as a camera publishes them in a sensor_msgs/Image: "
                        "ROS encoding (e.g. yuyv, nv12, bayer_rggb8, mono16) and size; rows unpadded, "
                        "16-bit values little-endian")
    p.add_argument("--json", action="store_true",
                   help="one JSON list of detections per image per line: {class, score, bbox, bbox_format}; "
                        f"bbox_format is '{BBOX_FORMAT}': bbox = [x1, y1, x2, y2], the top-left and "
                        "bottom-right corners in pixels of the source image")
    p.add_argument("--out", metavar="DIR", help="write annotated images (<stem>_det.png) here")
    p.add_argument("--model", metavar="META_YAML", default="",
                   help="model metadata YAML (default: the shipped models/shapes_yolo.meta.yaml)")
    p.add_argument("--onnx", metavar="ONNX", default="",
                   help="ONNX model (default: the one the metadata names)")
    p.add_argument("--conf", type=float, default=0.25, help="confidence threshold (default 0.25)")
    p.add_argument("--iou", type=float, default=0.45, help="NMS IoU threshold (default 0.45)")
    p.add_argument("--max-det", type=int, default=100, help="maximum detections per image (default 100)")
    p.add_argument("--threads", type=int, default=0, help="ONNX Runtime intra-op threads (0: default)")
    return p


def _raw_format(text: str) -> tuple[str, int, int]:
    """``ENCODING:WIDTHxHEIGHT`` -> (encoding, width, height); the encoding is checked when a file is read."""
    encoding, _, size = text.rpartition(":")
    w, _, h = size.partition("x")
    if not encoding or not (w.isdigit() and h.isdigit()) or int(w) < 1 or int(h) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected ENCODING:WIDTHxHEIGHT, e.g. yuyv:1280x720")
    return encoding, int(w), int(h)


def _read(cv2: Any, name: str, raw: tuple[str, int, int] | None) -> tuple[Any, str]:
    """A frame and its encoding: an image file through OpenCV, or a raw frame's bytes through the view
    the node makes of a message (so every encoding the node takes is taken here too)."""
    if not Path(name).is_file():
        raise InputError("image file not found", call="cv2.imread", params={"path": name}, stage="input")
    if raw is not None:
        encoding, w, h = raw
        enc = encodings.lookup(encoding)
        return frame_from_fields(encoding, h, w, w * enc.pixel_bytes, Path(name).read_bytes())
    image = cv2.imread(name, cv2.IMREAD_COLOR | cv2.IMREAD_ANYDEPTH)
    if image is None:
        raise InputError("cannot read image (missing, unreadable or not an image)", call="cv2.imread",
                         params={"path": name}, stage="input")
    return (scale_to_8bit(image) if image.dtype.itemsize == 2 else image), "bgr8"


def run(args: argparse.Namespace) -> int:
    import cv2

    quiet_opencv_log()

    backend, metadata = open_backend(BackendSettings(model_path=args.onnx, metadata_path=args.model,
                                                     ort_threads=args.threads))
    out_dir = Path(args.out) if args.out else None
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
    with Detector(backend, metadata, args.conf, args.iou, args.max_det) as detector:
        for name in args.images:
            image, encoding = _read(cv2, name, args.raw)
            dets = detector.detect(image, encoding)
            items = dets.to_list(detector.classes)
            if args.json:
                print(json.dumps([{**it, "bbox_format": BBOX_FORMAT} for it in items]), flush=True)
            else:
                print(f"{name}: {len(items)} detection(s)")
                for it in items:
                    x1, y1, x2, y2 = it["bbox"]
                    print(f"  {it['class']:<12} {it['score']:.3f}  [{x1:.1f}, {y1:.1f}, {x2:.1f}, {y2:.1f}]")
            if out_dir is not None:
                target = out_dir / f"{Path(name).stem}_det.png"
                if not cv2.imwrite(str(target), draw_detections(image, encoding, dets, detector.classes)):
                    raise InputError("cannot write annotated image", call="cv2.imwrite",
                                     params={"path": str(target)}, stage="output")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return run(args)
    except DlaInferError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

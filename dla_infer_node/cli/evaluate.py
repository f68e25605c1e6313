"""Measure the detector's accuracy with COCO-style mAP: on held-out synthetic scenes, or on your own data.

    evaluate [--model models/shapes_yolo.meta.yaml] [--scenes 500] [--first-seed N]
    evaluate --backend cudla --artifact MODEL.loadable.yaml [--preprocess-device gpu] [--scenes N]
    evaluate --images DIR --labels COCO.json|YOLO_TXT_DIR [--json OUT.json]     (your data: cli.eval_data)
    evaluate --bag BAG --topic T --labels COCO.json [--json OUT.json]

It runs the package pipeline exactly as the node does (backend factory -> :class:`Detector` -> boxes in
source pixels) on scenes from :func:`dla_infer_node.core.synth.generate_scene`, and prints, as its LAST line,
``mAP50=<x> mAP50_95=<y>``.

Seed ranges (kept disjoint so no evaluation scene was seen in training):
  * training (tools/train_detector.py): seeds in [0, 1_000_000)
  * evaluation (this module, default):  seeds from 10_000_000 upwards
  * end-to-end test (test/cli/test_model_accuracy.py): seeds from 20_000_000 upwards
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dla_infer_node.artifact.sidecar import load_artifact
from dla_infer_node.backends.factory import BackendSettings, open_backend
from dla_infer_node.cli import evaluate_user
from dla_infer_node.cli.coco_map import class_aps
from dla_infer_node.cli.coco_map import coco_map as package_map
from dla_infer_node.cli.eval_pipeline import Found, Truth, detect_all, evaluation_detector
from dla_infer_node.core.errors import DlaInferError, ModelError, ParameterError
from dla_infer_node.core.image_io import quiet_opencv_log
from dla_infer_node.core.settings import BACKENDS
from dla_infer_node.core.synth import generate_scene
from dla_infer_node.core.yaml_file import read_yaml

EVAL_FIRST_SEED = 10_000_000
E2E_FIRST_SEED = 20_000_000
TRAIN_SEED_LIMIT = 1_000_000


@dataclass(frozen=True)
class EvalResult:
    map50: float
    map50_95: float
    per_class_ap50_95: dict[str, float]
    scenes: int
    objects: int
    seeds: tuple[int, int]  # [first, last + 1)


def coco_map(gts: Sequence[tuple[np.ndarray, np.ndarray]],
             dets: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]],
             classes: Sequence[str]) -> tuple[float, float, dict[str, float]]:
    """COCO mAP@0.5 and mAP@0.5:0.95 (``cli.coco_map``: what pycocotools' COCOeval gives, up to 300
    detections per image). ``gts[i]`` = (boxes xyxy, class_ids) of image i; ``dets[i]`` = (boxes xyxy,
    scores, class_ids). Per class: AP50:95, 0.0 for a class without ground truth."""
    m50, m5095, table = package_map(gts, dets, len(classes))
    per_class = {name: ap[1] if ap else 0.0 for name, ap in zip(classes, class_aps(table), strict=True)}
    return m50, m5095, per_class


def collect(backend: Any, meta: Any, scenes: int, first_seed: int = EVAL_FIRST_SEED, width: int = 640,
            height: int = 480, conf_threshold: float = 0.001, iou_threshold: float = 0.6
            ) -> tuple[list[Truth], list[Found]]:
    """Ground truth and detections of an opened backend on ``scenes`` generated scenes."""
    scenes_drawn = (generate_scene(seed, width, height) for seed in range(first_seed, first_seed + scenes))
    scene_frames = ((s.image, "rgb8", s.boxes, s.class_ids) for s in scenes_drawn)
    with evaluation_detector(backend, meta, conf_threshold, iou_threshold) as detector:
        return detect_all(detector, scene_frames)


def score(gts: Sequence[tuple[np.ndarray, np.ndarray]],
          dets: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]], classes: Sequence[str],
          first_seed: int) -> EvalResult:
    m50, m5095, per_class = coco_map(gts, dets, classes)
    return EvalResult(m50, m5095, per_class, len(gts), sum(len(g[1]) for g in gts),
                      (first_seed, first_seed + len(gts)))


def backend_settings(metadata_path: str = "", onnx_path: str = "", threads: int = 0,
                     backend: str = "onnxruntime", artifact_path: str = "",
                     preprocess_device: str = "cpu") -> Any:
    """BackendSettings for evaluation; a cuDLA artifact sidecar names its loadable."""
    loadable = ""
    if backend == "cudla":
        if not artifact_path:
            raise ParameterError("artifact", "",
                                 "a DLA artifact sidecar (<model>.loadable.yaml) with --backend cudla")
        loadable = str(load_artifact(artifact_path).loadable_path)
    return BackendSettings(backend=backend, model_path=onnx_path, metadata_path=metadata_path,
                           loadable_path=loadable, artifact_path=artifact_path, ort_threads=threads,
                           preprocess_device=preprocess_device)


def evaluate(metadata_path: str = "", onnx_path: str = "", scenes: int = 500,
             first_seed: int = EVAL_FIRST_SEED, width: int = 640, height: int = 480,
             threads: int = 0, conf_threshold: float = 0.001, iou_threshold: float = 0.6,
             backend: str = "onnxruntime", artifact_path: str = "",
             preprocess_device: str = "cpu") -> EvalResult:
    """Run the pipeline (the chosen backend, as the node opens it) on ``scenes`` scenes and score it."""
    if scenes < 1:
        raise ParameterError("scenes", scenes, "an integer >= 1")
    if first_seed < TRAIN_SEED_LIMIT:
        raise ParameterError("first_seed", first_seed,
                             f">= {TRAIN_SEED_LIMIT} (seeds below are training scenes)")
    opened, meta = open_backend(backend_settings(metadata_path, onnx_path, threads, backend, artifact_path,
                                                 preprocess_device))
    gts, dets = collect(opened, meta, scenes, first_seed, width, height, conf_threshold, iou_threshold)
    return score(gts, dets, meta.classes, first_seed)


def write_accuracy(metadata_path: Path, result: EvalResult) -> None:
    """Record the measured figures in the metadata's ``accuracy`` section (other keys untouched)."""
    import yaml

    try:
        doc = read_yaml(metadata_path)
    except ValueError as exc:
        raise ModelError(f"cannot read metadata: {exc}", call="write_accuracy",
                         params={"path": str(metadata_path)}) from exc
    doc["accuracy"] = {"mAP50": round(result.map50, 4), "mAP50_95": round(result.map50_95, 4),
                       "scenes": result.scenes, "objects": result.objects,
                       "seeds": f"[{result.seeds[0]}, {result.seeds[1]})",
                       "per_class_AP50_95": {k: round(v, 4) for k, v in result.per_class_ap50_95.items()},
                       "measured_by": "python -m dla_infer_node.cli.evaluate (ONNX Runtime CPU, conf 0.001, "
                                      "NMS IoU 0.6, 640x480 scenes)"}
    metadata_path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="evaluate", description=__doc__.splitlines()[0])
    p.add_argument("--model", metavar="META_YAML", default="", help="metadata YAML (default: shipped model)")
    p.add_argument("--onnx", default="", help="ONNX file (default: the one the metadata names)")
    p.add_argument("--scenes", type=int, default=500)
    p.add_argument("--first-seed", type=int, default=EVAL_FIRST_SEED)
    p.add_argument("--threads", type=int, default=0, help="ONNX Runtime threads (0: default)")
    p.add_argument("--write-meta", action="store_true", help="store the result in the metadata YAML")
    p.add_argument("--backend", choices=BACKENDS, default="onnxruntime")
    p.add_argument("--artifact", default="",
                   help="DLA artifact sidecar (<model>.loadable.yaml), --backend cudla")
    p.add_argument("--preprocess-device", choices=("cpu", "gpu"), default="cpu", help="cudla input path")
    data = p.add_argument_group("your own data (instead of generated scenes)")
    src = data.add_mutually_exclusive_group()
    src.add_argument("--images", help="a folder of images, labelled by --labels")
    src.add_argument("--bag", help="an MCAP bag (file or rosbag2 folder), with --topic and --labels")
    data.add_argument("--topic", help="the bag's Image or CompressedImage topic")
    data.add_argument("--labels", help="COCO JSON (for a bag: file_name = <sec>.<nanosec>), or a YOLO "
                                        "txt folder for --images")
    data.add_argument("--json", metavar="FILE", help="also write the result as JSON (- for stdout)")
    args = p.parse_args(argv)
    quiet_opencv_log()
    if args.images or args.bag:
        return _main_user_data(args)
    try:
        if args.write_meta and args.backend != "onnxruntime":
            raise ParameterError("write-meta", True, "only with --backend onnxruntime (the shipped figures)")
        r = evaluate(args.model, args.onnx, args.scenes, args.first_seed, threads=args.threads,
                     backend=args.backend, artifact_path=args.artifact,
                     preprocess_device=args.preprocess_device)
    except DlaInferError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"scenes={r.scenes} objects={r.objects} seeds=[{r.seeds[0]}, {r.seeds[1]})")
    for name, ap in r.per_class_ap50_95.items():
        print(f"  AP50_95 {name:<10} {ap:.4f}")
    if args.write_meta:
        meta_path = BackendSettings(model_path=args.onnx, metadata_path=args.model).resolved_metadata_path()
        write_accuracy(Path(meta_path), r)
    print(f"mAP50={r.map50:.4f} mAP50_95={r.map50_95:.4f}")
    return 0


def _main_user_data(args: argparse.Namespace) -> int:
    try:
        if args.write_meta:
            raise ParameterError("write-meta", True, "only on generated scenes (the shipped figures)")
        settings = backend_settings(args.model, args.onnx, args.threads, args.backend, args.artifact,
                                    args.preprocess_device)
        evaluate_user.report(evaluate_user.run(args, settings), args.json)
    except DlaInferError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

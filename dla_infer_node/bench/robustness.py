"""How the detector holds up away from its training data, not a test:
``python -m dla_infer_node.bench.robustness [--scenes 100] [--model META] [--out FILE]`` or
``... --table [--before FILE]``.

Runs the package pipeline (ONNX Runtime CPU, conf 0.001, NMS IoU 0.6, as ``evaluate``) on the held-out
scenes of ``bench.heldout_scenes``, one set per condition (object size, filled/outlined, background kind,
and all mixed), and scores COCO mAP per set. Default output: bench/results/robustness.json; ``--table``
prints the markdown table models/README.md shows, from that file, and ``--before`` puts the figures of an
earlier model on the same scenes beside them (an earlier model's file can be taken from the repository's
history of bench/results/).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

from dla_infer_node.backends.factory import BackendSettings, open_backend
from dla_infer_node.bench import results_file
from dla_infer_node.bench.heldout_scenes import CONDITIONS, HELDOUT_FIRST_SEED, heldout_scene
from dla_infer_node.cli.coco_map import coco_map
from dla_infer_node.cli.eval_pipeline import detect_all, evaluation_detector


def score_condition(detector: Any, condition: str, scenes: int, classes: int) -> dict[str, Any]:
    frames = ((s.image, "rgb8", s.boxes, s.class_ids)
              for s in (heldout_scene(HELDOUT_FIRST_SEED + i, condition) for i in range(scenes)))
    gts, dets = detect_all(detector, frames)
    m50, m5095, _ = coco_map(gts, dets, classes)
    return {"scenes": scenes, "objects": int(sum(len(c) for _, c in gts)), "mAP50": round(m50, 4),
            "mAP50_95": round(m5095, 4)}


def measure(model: str, scenes: int) -> dict[str, Any]:
    backend, meta = open_backend(BackendSettings(metadata_path=model))
    rows = {}
    t0 = time.perf_counter()
    with evaluation_detector(backend, meta) as detector:
        for condition in CONDITIONS:
            rows[condition] = score_condition(detector, condition, scenes, len(meta.classes))
            row = rows[condition]
            print(f"{condition:<20} mAP50 {row['mAP50']:.4f}  mAP50:95 {row['mAP50_95']:.4f}  "
                  f"({row['objects']} objects)", flush=True)
    return {"model": meta.name, "scenes_per_condition": scenes,
            "seeds": [HELDOUT_FIRST_SEED, HELDOUT_FIRST_SEED + scenes], "results": rows,
            "seconds": round(time.perf_counter() - t0, 1),
            "measured_by": "python -m dla_infer_node.bench.robustness " + " ".join(sys.argv[1:]),
            "host": {"python": platform.python_version(), "machine": platform.machine()}}


def table(doc: dict[str, Any], before: dict[str, Any] | None = None) -> str:
    """The README table of one result file; with ``before`` (an earlier model's file on the same scenes),
    its figures side by side with this one's."""
    n = doc["scenes_per_condition"]
    if before is None:
        out = [f"| held-out set ({n} scenes each) | objects | mAP50 | mAP50:95 |", "|" + " --- |" * 4]
    else:
        if before["scenes_per_condition"] != n or before["seeds"] != doc["seeds"]:
            raise ValueError(f"--before holds other scenes ({before['seeds']}) "
                             f"than the result ({doc['seeds']})")
        out = [f"| held-out set ({n} scenes each) | objects | mAP50 before | mAP50 after | "
               "mAP50:95 before | mAP50:95 after |", "|" + " --- |" * 6]
    for condition, row in doc["results"].items():
        name = condition.replace("_", " ")
        if before is None:
            out.append(f"| {name} | {row['objects']} | {row['mAP50']:.4f} | {row['mAP50_95']:.4f} |")
        else:
            old = before["results"][condition]
            out.append(f"| {name} | {row['objects']} | {old['mAP50']:.4f} | **{row['mAP50']:.4f}** | "
                       f"{old['mAP50_95']:.4f} | **{row['mAP50_95']:.4f}** |")
    return "\n".join(out)


def _options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--scenes", type=int, default=100, help="scenes per condition (default 100)")
    p.add_argument("--model", default="", help="metadata YAML (default: the shipped model)")
    p.add_argument("--before", type=Path, default=None,
                   help="with --table: an earlier model's result file on the same scenes, shown beside")


def _table(args: argparse.Namespace, doc: dict[str, Any]) -> str:
    before = json.loads(args.before.read_text(encoding="utf-8")) if args.before else None
    return table(doc, before)


def main(argv: list[str] | None = None) -> int:
    return results_file.run(argv, "robustness", __doc__, _options,
                            lambda args: measure(args.model, args.scenes), _table)


if __name__ == "__main__":
    sys.exit(main())

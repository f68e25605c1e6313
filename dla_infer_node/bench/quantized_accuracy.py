"""What int8 and fp16 cost in accuracy, before the Jetson (not a test):
``python -m dla_infer_node.bench.quantized_accuracy [--scenes 500] [--calib-scenes 100] [--methods minmax]
[--out bench/results/quantized_accuracy.json]``.

The artifacts a user takes to TensorRT 11.4.1+ are the ONNX files ``dla_build calibrate`` (Q/DQ, int8) and
``dla_build convert`` (fp16-typed) write; ONNX Runtime CPU runs them here through the package pipeline on the
held-out evaluation scenes (``cli.evaluate``, seeds from 10,000,000; calibration uses its own seeds from
30,000,000) and scores mAP against the fp32 model. The int8 rows keep the raw-head layers in fp16, as
``calibrate`` does by default; the ``_int8_heads`` row quantizes them too (``--int8-heads``). Targets:
int8 within 2 mAP50 points of fp32, fp16 within 0.5. ``--table`` prints the markdown table
models/README.md shows (a test keeps the two equal). The emulated-DLA figures (the DLA layouts and the
int8 I/O on top) are ``bench/results/dla_emulated_accuracy.json``.
"""

from __future__ import annotations

import argparse
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from dla_infer_node.bench import results_file
from dla_infer_node.cli.evaluate import EVAL_FIRST_SEED, evaluate
from dla_infer_node.core.resources import default_model_metadata
from dla_infer_node.dla_build import calibrate, convert

TARGET_POINTS = {"fp16": 0.5, "int8": 2.0}  # mAP50 points below fp32 allowed


def _shipped_model(folder: Path) -> tuple[Path, Path]:
    """A copy of the shipped detector (ONNX, metadata, labels) in ``folder``."""
    meta = default_model_metadata()
    for f in meta.parent.glob("shapes_yolo.*"):
        if f.suffix in (".onnx", ".yaml", ".txt"):
            shutil.copy2(f, folder / f.name)
    return folder / "shapes_yolo.onnx", folder / "shapes_yolo.meta.yaml"


def _score(meta: Path, onnx: Path, scenes: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    r = evaluate(metadata_path=str(meta), onnx_path=str(onnx), scenes=scenes)
    return {"onnx": onnx.name, "mAP50": round(r.map50, 4), "mAP50_95": round(r.map50_95, 4),
            "seconds": round(time.perf_counter() - t0, 1)}


def measure(scenes: int, calib_scenes: int, methods: list[str]) -> dict[str, Any]:
    rows: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="dla_qacc_") as tmp:
        model, meta = _shipped_model(Path(tmp))
        rows["fp32"] = _score(meta, model, scenes)
        fp16 = convert.convert_fp16(model, Path(tmp) / "shapes_yolo.fp16.onnx")
        rows["fp16"] = _score(meta, fp16, scenes)
        variants: list[tuple[str, list[str]]] = [(m, []) for m in methods] + [(methods[0], ["--int8-heads"])]
        for method, extra in variants:
            parser = argparse.ArgumentParser()
            calibrate.add_arguments(parser)
            key = f"int8_{method}" + ("_int8_heads" if extra else "")
            qdq = Path(tmp) / f"{key}.qdq.onnx"
            args = parser.parse_args([str(model), "--scenes", str(calib_scenes), "--method", method, *extra,
                                      "--qdq-out", str(qdq), "--cache", str(Path(tmp) / f"{key}.calib")])
            calibrate.run(args)
            rows[key] = _score(meta, qdq, scenes)
    ref = rows["fp32"]["mAP50"]
    for key, row in rows.items():
        row["mAP50_points_below_fp32"] = round(100 * (ref - row["mAP50"]), 2)
        kind = "int8" if key.startswith("int8") else key
        if kind in TARGET_POINTS:
            row["target_points"] = TARGET_POINTS[kind]
            row["meets_target"] = row["mAP50_points_below_fp32"] <= TARGET_POINTS[kind]
    return {"what": "shipped detector: fp32 ONNX vs dla_build convert (fp16) and calibrate (Q/DQ int8), "
                    "ONNX Runtime CPU through the package pipeline",
            "eval_scenes": scenes, "eval_seeds": [EVAL_FIRST_SEED, EVAL_FIRST_SEED + scenes],
            "calibration_scenes": calib_scenes, "results": rows,
            "host": {"python": platform.python_version(), "machine": platform.machine()},
            "command": "python -m dla_infer_node.bench.quantized_accuracy " + " ".join(sys.argv[1:])}


ROW_TEXT = {"fp32": "fp32 ONNX (reference)", "fp16": "`convert` fp16-typed ONNX"}


def table(doc: dict[str, Any]) -> str:
    """The markdown table of models/README.md, from the JSON."""
    out = ["| model | mAP50 | mAP50:95 | mAP50 points below fp32 |", "| --- | --- | --- | --- |"]
    for key, row in doc["results"].items():
        text = ROW_TEXT.get(key) or "`calibrate --method {}`{} Q/DQ ONNX".format(
            key.split("_")[1], " `--int8-heads`" if key.endswith("_int8_heads") else "")
        out.append(f"| {text} | {row['mAP50']:.4f} | {row['mAP50_95']:.4f} | "
                   f"{row['mAP50_points_below_fp32']:.2f} |")
    return "\n".join(out)


def _options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--scenes", type=int, default=500, help="evaluation scenes (default 500)")
    p.add_argument("--calib-scenes", type=int, default=100, help="calibration scenes (default 100)")
    p.add_argument("--methods", default="minmax", help="comma-separated: minmax,entropy,percentile")


def _measure(args: argparse.Namespace) -> dict[str, Any]:
    doc = measure(args.scenes, args.calib_scenes, [m for m in args.methods.split(",") if m])
    for key, row in doc["results"].items():
        print(f"{key:<16} mAP50 {row['mAP50']:.4f}  mAP50:95 {row['mAP50_95']:.4f}  "
              f"({row['mAP50_points_below_fp32']:+.2f} points below fp32)")
    return doc


def main(argv: list[str] | None = None) -> int:
    return results_file.run(argv, "quantized_accuracy", __doc__, _options, _measure,
                            lambda _args, doc: table(doc))


if __name__ == "__main__":
    sys.exit(main())

"""DLA EMULATOR (test infrastructure): accuracy of the shipped model through the emulated DLA path.

    make eval-dla-emulated
    # = python -m emulator.eval_table --scenes 100 --out bench/results/dla_emulated_accuracy.json

On a GPU machine: builds the emulated ``network`` loadables (emulator/network_build.py: fp16 and int8 x
every input/output format), then runs ``dla_infer_node.cli.evaluate.evaluate(backend="cudla",
artifact_path=..., preprocess_device="gpu")`` -- the real cuda.bindings.cudla path with the GPU input
path -- on the same evaluation scenes as ONNX Runtime fp32, prints one table and writes the JSON (with
the command that made it). The emulator library must be loadable (DLA_EMULATOR_LIB; the Makefile builds it).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dla_infer_node.cli.evaluate import EVAL_FIRST_SEED, evaluate
from emulator import network_build as nb
from emulator.network_host import install, load_emulator


def _row(name: str, precision: str, r: Any, seconds: float, fp32: Any | None) -> dict[str, Any]:
    row = {"artifact": name, "precision": precision, "mAP50": round(r.map50, 4),
           "mAP50_95": round(r.map50_95, 4), "seconds": round(seconds, 1)}
    if fp32 is not None:
        row["delta_mAP50"] = round(r.map50 - fp32.map50, 4)
        row["delta_mAP50_95"] = round(r.map50_95 - fp32.map50_95, 4)
    return row


def run(out: Path, scenes: int, build_dir: Path, preprocess_device: str = "gpu",
        only: tuple[str, str] | None = None, command: str = "") -> dict[str, Any]:
    host = install(load_emulator())
    arts = nb.build_all(build_dir, only=only)
    t = time.monotonic()
    fp32 = evaluate(scenes=scenes, first_seed=EVAL_FIRST_SEED)
    rows = [_row("models/shapes_yolo.onnx (onnxruntime CPU)", "fp32", fp32, time.monotonic() - t, None)]
    for art in arts:
        t = time.monotonic()
        r = evaluate(scenes=scenes, first_seed=EVAL_FIRST_SEED, backend="cudla",
                     artifact_path=str(art.sidecar), preprocess_device=preprocess_device)
        prec = art.doc["tensors"]["inputs"][0]["dtype"]
        name = art.sidecar.name.removesuffix(".loadable.yaml")
        rows.append(_row(name, prec, r, time.monotonic() - t, fp32))
        if host.errors:
            raise SystemExit(f"eval_table: the network host failed:\n{host.errors[-1]}")
    doc = {"command": command, "scenes": scenes, "seeds": [EVAL_FIRST_SEED, EVAL_FIRST_SEED + scenes],
           "objects": fp32.objects, "preprocess_device": preprocess_device,
           "evaluation": "COCO mAP (cli.coco_map, = COCOeval), conf 0.001, NMS IoU 0.6, 640x480 scenes",
           "emulation": {"fp16": "fp32 arithmetic, weights and every activation rounded to fp16, fp16 I/O",
                         "int8": "dla_build calibrate's Q/DQ (ORT minmax, symmetric, per-channel weights, "
                                 "--int8-heads), 24 training-range calibration scenes; not TensorRT's int8 "
                                 "kernels"},
           "host": {"python": platform.python_version(), "machine": platform.machine()},
           "rows": rows}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    return doc


def table(doc: dict[str, Any]) -> str:
    lines = [f"{'artifact':<44} {'prec':<5} {'mAP50':>7} {'mAP50:95':>9} {'dmAP50':>8} {'dmAP50:95':>10}"]
    for r in doc["rows"]:
        d50, d95 = r.get("delta_mAP50"), r.get("delta_mAP50_95")
        lines.append(f"{r['artifact'][:44]:<44} {r['precision']:<5} {r['mAP50']:>7.4f} {r['mAP50_95']:>9.4f} "
                     f"{'' if d50 is None else f'{d50:+.4f}':>8} {'' if d95 is None else f'{d95:+.4f}':>10}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    ap.add_argument("--out", default="bench/results/dla_emulated_accuracy.json")
    ap.add_argument("--scenes", type=int, default=100)
    ap.add_argument("--build-dir", default="emulator/build/network")
    ap.add_argument("--preprocess-device", choices=("cpu", "gpu"), default="gpu")
    ap.add_argument("--only", nargs=2, metavar=("IN_FMT", "OUT_FMT"), help="one format pair (smoke runs)")
    a = ap.parse_args(argv)
    command = "python -m emulator.eval_table " + " ".join(sys.argv[1:] if argv is None else argv)
    doc = run(Path(a.out), a.scenes, Path(a.build_dir), a.preprocess_device,
              tuple(a.only) if a.only else None, command.strip())
    print(table(doc))
    print(f"written: {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

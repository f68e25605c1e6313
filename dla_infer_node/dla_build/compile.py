"""Compile an ONNX detector into a DLA loadable with the trtexec command of the robot's TensorRT.

    dla_build compile MODEL.onnx --precision fp16|int8 --out X.loadable [--trt-version V] [--dla-core N]
                      [--input-format F] [--output-format F] [--calibration-cache C] [--dry-run]
                      [--revision R] [--metadata META]

The command is the one of the robot's TensorRT line (:mod:`build_plan`: ``--trt-version``, else
``trtexec --version`` from PATH). trtexec runs when it is on PATH
(without ``--dry-run``) and the sidecar is written next to the loadable; otherwise the command is printed,
with the ``dla_build sidecar`` command to run after.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

from dla_infer_node.dla_build.build_plan import plan_build, sidecar_command
from dla_infer_node.dla_build.sidecar_writer import sidecar_doc, write_sidecar


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="the fp32 ONNX (or, on 11.4.1+, an fp16-typed or Q/DQ ONNX)")
    parser.add_argument("--precision", choices=("fp16", "int8"), required=True)
    parser.add_argument("--out", required=True, help="the loadable to write (X.loadable)")
    parser.add_argument("--trt-version", help="the robot's TensorRT (default: trtexec --version from PATH)")
    parser.add_argument("--dla-core", type=int, default=0, help="DLA core the loadable is built for")
    parser.add_argument("--input-format", help="trtexec spelling, e.g. int8:dla_hwc4 or fp16:chw16")
    parser.add_argument("--output-format", help="trtexec spelling, one for all outputs or one per output")
    parser.add_argument("--calibration-cache", help="TensorRT 10.x int8: the calibration cache")
    parser.add_argument("--dry-run", action="store_true", help="print the command, run nothing")
    parser.add_argument("--revision", help="model revision for the sidecar (default: git describe)")
    parser.add_argument("--metadata", help="model metadata YAML (default: <model>.meta.yaml)")


def run(args: argparse.Namespace) -> int:
    trtexec = shutil.which("trtexec")
    plan = plan_build(args, run_convert=not args.dry_run)
    for note in plan.notes:
        print(note)
    print(f"TensorRT {plan.version} ({plan.line}), {plan.precision}:")
    print(plan.command)
    if args.dry_run or trtexec is None:
        why = "dry run" if args.dry_run else "trtexec is not on PATH"
        print(f"({why}: not run; after building it, record it with)\n{sidecar_command(plan, args)}")
        return 0
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([trtexec, *plan.argv[1:]], capture_output=True, text=True)
    if proc.returncode != 0 or not out.is_file():
        lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()]
        last = next((ln for ln in reversed(lines) if "[E]" in ln or "rror" in ln), lines[-1] if lines else "")
        print(f"dla_build compile: trtexec failed (exit {proc.returncode}): {last.strip()}", file=sys.stderr)
        return 1
    sidecar = write_sidecar(sidecar_doc(plan, args, out), out)
    print(f"loadable: {out}\nsidecar: {sidecar}")
    return 0

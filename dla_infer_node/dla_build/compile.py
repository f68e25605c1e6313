"""Compile an ONNX detector into a DLA loadable with the trtexec command of the robot's TensorRT.

    dla_build compile MODEL.onnx --precision fp16|int8 --out X.loadable [--trt-version V] [--dla-core N]
                      [--input-format F] [--output-format F] [--calibration-cache C] [--dry-run]
                      [--force] [--revision R] [--metadata META]

The command is the one of the robot's TensorRT line (:mod:`build_plan`: ``--trt-version``, else
``trtexec --version`` from PATH). First the graph trtexec will read is linted: when a layer cannot run on
the DLA, a ``--buildDLAStandalone`` build cannot succeed and compile stops (exit 1) naming the layers,
unless ``--force``. trtexec runs when it is on PATH (without ``--dry-run``) and the sidecar is written next
to the loadable. Otherwise compile prints the commands to run, in order, from the folder it ran in: the
``dla_build convert`` that makes an fp16-typed ONNX when one is needed, the trtexec line, and the
``dla_build sidecar`` line that records the loadable after it is built. Each works as printed.
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from dla_infer_node.dla_build.build_plan import NOW, PRINT, BuildPlan, plan_build, sidecar_argv
from dla_infer_node.dla_build.lint import EXIT_CANNOT
from dla_infer_node.dla_build.lint_graph import lint
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
    parser.add_argument("--dry-run", action="store_true",
                        help="print the commands (convert, trtexec, sidecar) in order, run none of them")
    parser.add_argument("--force", action="store_true",
                        help="build even when dla_build lint finds layers the DLA cannot run standalone")
    parser.add_argument("--revision", help="model revision for the sidecar (default: git describe)")
    parser.add_argument("--metadata", help="model metadata YAML (default: <model>.meta.yaml)")


def lint_gate(plan: BuildPlan, force: bool) -> bool:
    """Lint the graph trtexec will build (the source model while the fp16 one is still to be made: the
    conversion changes types, not layers). False, after one line on stderr naming the layers, when a
    standalone build cannot succeed and ``force`` is not given."""
    target = plan.built_from if plan.built_from.is_file() else plan.onnx
    report = lint(target)
    if report["standalone_ok"]:
        return True
    bad = report["offending"]
    names = ", ".join(bad[:5]) + (", ..." if len(bad) > 5 else "")
    what = f"{len(bad)} layer(s) the DLA cannot run standalone ({names})"
    if not force:
        print(f"dla_build compile: {target} has {what}: a --buildDLAStandalone build cannot succeed; "
              f"see dla_build lint {target}, or pass --force to try anyway", file=sys.stderr)
        return False
    print(f"warning: {target} has {what}; building anyway (--force)", file=sys.stderr)
    return True


def run(args: argparse.Namespace) -> int:
    trtexec = shutil.which("trtexec")
    plan = plan_build(args, PRINT if args.dry_run else NOW)
    if not lint_gate(plan, args.force):
        return EXIT_CANNOT
    for note in plan.notes:
        print(note)
    if not args.dry_run and trtexec is not None:
        return build(plan, args, trtexec)
    why = "dry run" if args.dry_run else "trtexec is not on PATH"
    print(f"TensorRT {plan.version} ({plan.line}), {plan.precision} ({why}: nothing run); "
          f"the commands, in order, from this folder:")
    for argv in [*plan.before, plan.argv, sidecar_argv(plan, args)]:
        print(shlex.join(argv))
    return 0


def build(plan: BuildPlan, args: argparse.Namespace, trtexec: str) -> int:
    """Run trtexec (the one on PATH) with the plan's arguments, then write the sidecar."""
    print(f"TensorRT {plan.version} ({plan.line}), {plan.precision}:\n{plan.command}")
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

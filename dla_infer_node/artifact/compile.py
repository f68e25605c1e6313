"""Compile an ONNX detector into a DLA loadable with the trtexec command of the robot's TensorRT.

    dla_build compile MODEL.onnx --precision fp16|int8 --out X.loadable [--trt-version V] [--dla-core N]
                      [--input-format F] [--output-format F] [--calibration-cache C] [--dry-run]
                      [--revision R] [--metadata META]

The TensorRT version (``--trt-version``, else ``trtexec --version`` from PATH) picks the line
(``artifact.trt_support``):

* ``10.x-flags`` (8.5 .. 10.7, JetPack 6 ships 10.3): ``trtexec --onnx=MODEL --fp16`` or
  ``--int8 --fp16 --calib=CACHE`` (int8 needs ``--calibration-cache``; ``--fp16`` lets layers without an
  int8 kernel and fp16 io tensors exist).
* ``11.x-typed`` (11.4.1+, JetPack >= 7.2.2): no precision flag exists; the ONNX's own types decide.
  fp16: an fp16-typed MODEL is used as is; an fp32 one is first converted with
  ``dla_infer_node.artifact.convert.convert_fp16(src: Path, dst: Path) -> Path`` into
  ``<out folder>/<stem>.fp16.onnx`` (the file built from is printed). int8: MODEL must be a Q/DQ ONNX, or
  ``<stem>.qdq.onnx`` must lie next to it - the file ``dla_build calibrate`` writes (``qdq_path_for``).

Always ``--useDLACore=N --buildDLAStandalone --inputIOFormats=... --outputIOFormats=... --saveEngine=X``.
Default io formats: input ``<dtype>:dla_hwc4`` for an image of <= 4 channels (else chw16 / chw32), outputs
``fp16:chw16``; on the 11.x line an ONNX whose io is all fp16 (what convert and calibrate write) gets fp16
io, as a strongly typed network's io formats carry its tensors' types. trtexec runs when it is on PATH
(without ``--dry-run``) and the sidecar is written next to the loadable; otherwise the command is printed,
with the ``dla_build sidecar`` command to run after.
"""

from __future__ import annotations

import argparse
import importlib
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dla_infer_node.artifact import onnx_facts, trt_support
from dla_infer_node.artifact.sidecar_writer import (
    PrecisionSource,
    build_doc,
    find_metadata,
    parse_io_formats,
    write_sidecar,
)
from dla_infer_node.core.errors import ModelError

CONVERT_MODULE = "dla_infer_node.artifact.convert"  # provides convert_fp16(src, dst) -> Path
FLOAT16 = 10  # onnx.TensorProto.FLOAT16


def qdq_path_for(model: Path) -> Path:
    """Where ``dla_build calibrate`` leaves the Q/DQ ONNX of ``model``: ``<stem>.qdq.onnx`` beside it."""
    return model.with_name(f"{onnx_facts.model_stem(model)}.qdq.onnx")


def fp16_path_for(model: Path, out: Path) -> Path:
    return out.with_name(f"{onnx_facts.model_stem(model)}.fp16.onnx")


@dataclass
class BuildPlan:
    onnx: Path
    built_from: Path
    version: str
    line: str
    precision: str
    inputs: list[tuple[str, str]]
    outputs: list[tuple[str, str]]
    source: PrecisionSource
    argv: list[str]
    meta: Path
    notes: list[str] = field(default_factory=list)

    @property
    def command(self) -> str:
        return shlex.join(self.argv)


def _fail(detail: str, **params: Any) -> ModelError:
    return ModelError(detail, call="dla_build compile", params=params)


def detect_version(trtexec: str | None = None) -> str:
    """The TensorRT version of the trtexec on PATH (``trtexec --version``; the banner is read)."""
    exe = trtexec or shutil.which("trtexec")
    if exe is None:
        raise _fail("no --trt-version given and no trtexec on PATH to ask",
                    hint="give the robot's TensorRT, e.g. --trt-version 10.3 (JetPack 6) or 11.4.1")
    try:
        proc = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        raise _fail(f"cannot run {exe} --version: {exc}") from exc
    found = trt_support.parse_trtexec_version(proc.stdout + proc.stderr)
    if found is None:
        raise _fail(f"{exe} --version printed no TensorRT version", hint="give --trt-version")
    return trt_support.format_version(found)


def _default_formats(precision: str, channels: int, n_out: int) -> tuple[str, str]:
    wide = "int8:chw32" if precision == "int8" else "fp16:chw16"
    inp = f"{precision}:dla_hwc4" if channels <= 4 else wide
    return inp, ",".join(["fp16:chw16"] * n_out)


def _typed_source(args: argparse.Namespace, model: Path, out: Path, run_convert: bool,
                  notes: list[str]) -> tuple[Path, PrecisionSource]:
    """11.x line: the ONNX whose own types give the precision, converting fp32 -> fp16 when asked."""
    if args.calibration_cache:
        raise _fail("TensorRT 11.4.1+ has no --calib: int8 comes from a Q/DQ ONNX "
                    "(dla_build calibrate writes <stem>.qdq.onnx), not from a calibration cache")
    kind = onnx_facts.precision_kind(model)
    if args.precision == "int8":
        if kind == "qdq":
            return model, PrecisionSource("qdq_onnx", model)
        given = getattr(args, "qdq_onnx", None) or getattr(args, "built_from", None)
        qdq = Path(given) if given else qdq_path_for(model)
        if not qdq.is_file():
            raise _fail(f"int8 on TensorRT 11.4.1+ needs the Q/DQ ONNX {qdq} (missing): "
                        f"run dla_build calibrate {model} first", model=str(model))
        notes.append(f"building from the Q/DQ ONNX {qdq}")
        return qdq, PrecisionSource("qdq_onnx", qdq)
    if kind == "qdq":
        raise _fail(f"{model} holds Q/DQ nodes: it builds int8, not fp16", model=str(model))
    if kind == "fp16":
        return model, PrecisionSource("typed_onnx", model)
    dst = Path(getattr(args, "built_from", None) or fp16_path_for(model, out))
    if run_convert:
        try:
            convert = importlib.import_module(CONVERT_MODULE)
        except ModuleNotFoundError as exc:
            raise _fail(f"fp16 on TensorRT 11.4.1+ needs an fp16-typed ONNX and {CONVERT_MODULE} "
                        f"(dla_build convert) is not installed to make one from the fp32 {model}") from exc
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst = Path(convert.convert_fp16(model, dst))
        notes.append(f"building from the fp16-typed ONNX {dst} (converted from {model})")
    else:
        notes.append(f"would build from the fp16-typed ONNX {dst} (dla_build convert makes it from {model})")
    return dst, PrecisionSource("typed_onnx", dst)


def plan_build(args: argparse.Namespace, run_convert: bool = True) -> BuildPlan:
    """Everything about the build except running it: the command, the ONNX it reads, the formats."""
    model = Path(getattr(args, "model", None) or args.onnx)
    out = Path(getattr(args, "out", None) or args.loadable)
    if args.dla_core < 0:
        raise _fail(f"--dla-core {args.dla_core} must be >= 0 (AGX Orin: 0 or 1)")
    version = args.trt_version or detect_version()
    line = trt_support.line_for(version)  # one line naming the DLA versions when this one has none
    version = trt_support.format_version(trt_support.parse_version(version))
    ins, outs = onnx_facts.onnx_io(model)
    if len(ins) != 1 or len(ins[0].shape) != 4:
        found = [(t.name, t.shape) for t in ins]
        raise _fail(f"expected one NCHW image input, found {found}", model=str(model))
    din, dout = _default_formats(args.precision, ins[0].shape[1], len(outs))
    in_fmts = parse_io_formats(args.input_format or din, 1, "input")
    out_fmts = parse_io_formats(args.output_format or dout, len(outs), "output")
    notes: list[str] = []
    flags: list[str] = []
    if line == trt_support.LINE_FLAGS:
        built_from = model
        if args.precision == "int8":
            if not args.calibration_cache:
                raise _fail(f"int8 on TensorRT {version} needs --calibration-cache "
                            f"(the TensorRT cache dla_build calibrate writes)")
            cache = Path(args.calibration_cache)
            if not cache.is_file():
                raise _fail("calibration cache not found", cache=str(cache))
            flags = ["--int8", "--fp16", f"--calib={cache}"]
            source = PrecisionSource("calibration_cache", cache)
        else:
            if args.calibration_cache:
                raise _fail("--calibration-cache is for --precision int8")
            flags = ["--fp16"]
            source = PrecisionSource("builder_flag", None)
    else:
        built_from, source = _typed_source(args, model, out, run_convert, notes)
        typed_in, typed_out = onnx_facts.onnx_io(built_from) if built_from.is_file() else (ins, outs)
        if all(t.elem_type == FLOAT16 for t in (*typed_in, *typed_out)):
            # a strongly typed network's io formats carry its tensors' types: fp16 io, int8 inside
            din, dout = _default_formats("fp16", ins[0].shape[1], len(outs))
            in_fmts = parse_io_formats(args.input_format or din, 1, "input")
            out_fmts = parse_io_formats(args.output_format or dout, len(outs), "output")
    argv = ["trtexec", f"--onnx={built_from}", f"--useDLACore={args.dla_core}", *flags,
            "--buildDLAStandalone",
            "--inputIOFormats=" + ",".join(f"{d}:{f}" for d, f in in_fmts),
            "--outputIOFormats=" + ",".join(f"{d}:{f}" for d, f in out_fmts),
            f"--saveEngine={out}"]
    meta = find_metadata(model, getattr(args, "metadata", None))
    return BuildPlan(model, built_from, version, line, args.precision, in_fmts, out_fmts, source, argv, meta,
                     notes)


def sidecar_doc(plan: BuildPlan, args: argparse.Namespace, loadable: Path) -> dict[str, Any]:
    command = getattr(args, "trtexec_command", None) or plan.command
    return build_doc(loadable=loadable, onnx=plan.onnx, built_from=plan.built_from,
                     tensorrt_version=plan.version, precision=plan.precision, input_formats=plan.inputs,
                     output_formats=plan.outputs, command=command, source=plan.source,
                     revision=args.revision, meta_path=plan.meta, dla_core=args.dla_core)


def sidecar_command(plan: BuildPlan, args: argparse.Namespace) -> str:
    """The ``dla_build sidecar`` call that records a loadable built elsewhere with ``plan.command``."""
    argv = ["dla_build", "sidecar", str(Path(args.out)), f"--onnx={plan.onnx}",
            f"--trt-version={plan.version}",
            f"--precision={plan.precision}", "--input-format=" + ",".join(f"{d}:{f}" for d, f in plan.inputs),
            "--output-format=" + ",".join(f"{d}:{f}" for d, f in plan.outputs), f"--dla-core={args.dla_core}"]
    if plan.source.kind == "calibration_cache":
        argv.append(f"--calibration-cache={plan.source.path}")
    if plan.built_from != plan.onnx:
        argv.append(f"--built-from={plan.built_from}")
    if args.revision:
        argv.append(f"--revision={args.revision}")
    return shlex.join(argv)


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

"""A loadable's build, planned: the trtexec command of a TensorRT line, the ONNX it reads, the io formats.

The TensorRT version (``--trt-version``, else ``trtexec --version`` from PATH) picks the line
(``artifact.trt_support``):

* ``10.x-flags`` (8.5 .. 10.7, JetPack 6 ships 10.3): ``trtexec --onnx=MODEL --fp16`` or
  ``--int8 --fp16 --calib=CACHE`` (int8 needs ``--calibration-cache``; ``--fp16`` lets layers without an
  int8 kernel and fp16 io tensors exist).
* ``11.x-typed`` (11.4.1+, JetPack >= 7.2.2): no precision flag exists; the ONNX's own types decide.
  fp16: an fp16-typed MODEL is used as is; an fp32 one is first converted (``convert.convert_fp16``)
  into ``<out folder>/<stem>.fp16.onnx`` (the file built from is printed). int8: MODEL must be a Q/DQ
  ONNX, or ``<stem>.qdq.onnx`` must lie next to it - the file ``dla_build calibrate`` writes.

Always ``--useDLACore=N --buildDLAStandalone --inputIOFormats=... --outputIOFormats=... --saveEngine=X``.
Default io formats: input ``<dtype>:dla_hwc4`` for an image of <= 4 channels (else chw16 / chw32), outputs
``fp16:chw16``; on the 11.x line an ONNX whose io is all fp16 (what convert and calibrate write) gets fp16
io, as a strongly typed network's io formats carry its tensors' types. ``compile`` and ``sidecar`` share
this plan, so a sidecar written for a loadable built by hand records the same command.
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dla_infer_node.artifact import trt_support
from dla_infer_node.artifact.sidecar import TRTEXEC_FORMATS
from dla_infer_node.core.errors import ModelError
from dla_infer_node.dla_build import convert, onnx_facts
from dla_infer_node.dla_build.model_files import find_metadata, qdq_path_for
from dla_infer_node.dla_build.trt_cache import cache_for

FLOAT16 = 10  # onnx.TensorProto.FLOAT16


@dataclass(frozen=True)
class PrecisionSource:
    """Where the int8 scales / fp16 types came from: ``calibration_cache``, ``qdq_onnx``, ``typed_onnx``
    (an fp16 ONNX on the 11.x line) or ``builder_flag`` (--fp16 on the 10.x line)."""

    kind: str
    path: Path | None = None


def parse_io_formats(spec: str, count: int, side: str) -> list[tuple[str, str]]:
    """``"int8:dla_hwc4"`` or ``"fp16:chw16,fp16:chw16"`` -> [(dtype, format)] for ``count`` tensors;
    one entry is repeated for every tensor."""
    entries = [e.strip() for e in spec.split(",") if e.strip()]
    if len(entries) == 1:
        entries *= count
    if len(entries) != count:
        raise ModelError(f"{len(entries)} {side} formats for {count} {side} tensors", call="parse_io_formats",
                         params={"spec": spec})
    out = []
    for e in entries:
        dtype, _, fmt = e.partition(":")
        if dtype not in ("fp16", "int8") or fmt not in TRTEXEC_FORMATS:
            raise ModelError(f"{side} format {e!r}: expected fp16|int8 : {'|'.join(TRTEXEC_FORMATS)} "
                             f"(trtexec spelling, e.g. int8:dla_hwc4)", call="parse_io_formats",
                             params={"spec": spec})
        if (dtype, fmt) in (("int8", "chw16"), ("fp16", "chw32")):
            raise ModelError(f"{side} format {e!r}: chw16 holds fp16, chw32 holds int8",
                             call="parse_io_formats", params={"spec": spec})
        if side == "output" and fmt == "dla_hwc4":
            raise ModelError("dla_hwc4 is an input-only format", call="parse_io_formats",
                             params={"spec": spec})
        out.append((dtype, fmt))
    return out


def fp16_path_for(model: Path, out: Path) -> Path:
    """Where compile puts the fp16-typed ONNX it builds from: beside the loadable."""
    return out.with_name(f"{onnx_facts.model_stem(model)}.fp16.onnx")


def cache_path_for(out: Path) -> Path:
    """Where compile puts a calibration cache re-headed for the target TensorRT: beside the loadable."""
    return out.with_name(f"{out.stem}.calib")


# what plan_build does about inputs that do not exist yet or do not suit the target TensorRT:
NOW = "now"  # compile: make them (convert to fp16, re-head the calibration cache)
PRINT = "print"  # compile --dry-run: print the commands that make them (a cache is still re-headed)
RECORD = "record"  # sidecar: the loadable is built; every input must exist as given


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
    before: list[list[str]] = field(default_factory=list)  # commands that make trtexec's input (dry run)

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


def _typed_source(args: argparse.Namespace, model: Path, out: Path, prepare: str, notes: list[str],
                  before: list[list[str]]) -> tuple[Path, PrecisionSource]:
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
    if prepare == NOW:
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst = Path(convert.convert_fp16(model, dst))
        notes.append(f"building from the fp16-typed ONNX {dst} (converted from {model})")
    elif prepare == PRINT:
        meta = getattr(args, "metadata", None)
        before.append(["dla_build", "convert", str(model), f"--out={dst}",
                       *([f"--metadata={meta}"] if meta else [])])
        notes.append(f"builds from the fp16-typed ONNX {dst}, which the dla_build convert line makes")
    elif not dst.is_file():
        raise _fail(f"the fp16-typed ONNX {dst} the loadable was built from is missing: make it with "
                    f"dla_build convert {model} --out={dst}", built_from=str(dst))
    return dst, PrecisionSource("typed_onnx", dst)


def plan_build(args: argparse.Namespace, prepare: str = NOW) -> BuildPlan:
    """Everything about the build except running trtexec: the command, the ONNX it reads, the formats, and
    (``prepare``: NOW, PRINT or RECORD, above) what it does about inputs that do not exist yet."""
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
    before: list[list[str]] = []
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
            if prepare != RECORD:  # trtexec uses a cache only under its own header: check, else re-head
                cache, note = cache_for(cache, version, cache_path_for(out))
                if note:
                    notes.append(note)
            flags = ["--int8", "--fp16", f"--calib={cache}"]
            source = PrecisionSource("calibration_cache", cache)
        else:
            if args.calibration_cache:
                raise _fail("--calibration-cache is for --precision int8")
            flags = ["--fp16"]
            source = PrecisionSource("builder_flag", None)
    else:
        built_from, source = _typed_source(args, model, out, prepare, notes, before)
        typed_in, typed_out = onnx_facts.onnx_io(built_from) if built_from.is_file() else (ins, outs)
        if all(t.elem_type == FLOAT16 for t in (*typed_in, *typed_out)):
            # a strongly typed network's io formats carry its tensors' types: fp16 io, int8 inside
            din, dout = _default_formats("fp16", ins[0].shape[1], len(outs))
            in_fmts = parse_io_formats(args.input_format or din, 1, "input")
            out_fmts = parse_io_formats(args.output_format or dout, len(outs), "output")
    if prepare != RECORD and not out.parent.is_dir():  # trtexec writes --saveEngine into an existing folder
        before.insert(0, ["mkdir", "-p", str(out.parent)])
    argv = ["trtexec", f"--onnx={built_from}", f"--useDLACore={args.dla_core}", *flags,
            "--buildDLAStandalone",
            "--inputIOFormats=" + ",".join(f"{d}:{f}" for d, f in in_fmts),
            "--outputIOFormats=" + ",".join(f"{d}:{f}" for d, f in out_fmts),
            f"--saveEngine={out}"]
    meta = find_metadata(model, getattr(args, "metadata", None))
    return BuildPlan(model, built_from, version, line, args.precision, in_fmts, out_fmts, source, argv, meta,
                     notes, before)


def sidecar_argv(plan: BuildPlan, args: argparse.Namespace) -> list[str]:
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
    if getattr(args, "metadata", None):
        argv.append(f"--metadata={args.metadata}")
    return argv

"""TEST-ONLY stand-in for NVIDIA's trtexec, one per TensorRT line (see the wrapper scripts beside it).

It behaves like the real tool where our build step depends on it, and writes an EMULATED loadable
(emulator/make_loadable.py, 'echo' program) that only the DLA EMULATOR can load:

* every version prints the ``&&&& RUNNING TensorRT.trtexec [TensorRT v<code>]`` banner (the code is
  TensorRT's own: 100300 for 10.3.0, 8601 for 8.6.1) and, for ``--version``, a ``TensorRT version: X.Y.Z``
  line; a build whose ``--onnx`` file cannot be opened, or whose ``--saveEngine`` folder does not exist,
  fails;
* 8.6 and 10.3 (``10.x-flags``): accept ``--fp16``, ``--int8``, ``--calib=CACHE``; the DLA needs one of
  them; int8 io tensors take their scale from the cache. The cache is used only when its header is
  ``TRT-<this TensorRT's code>-EntropyCalibration2`` (trtexec's calibrator, IInt8EntropyCalibrator2);
  otherwise the real tool logs "Calibration table does not match calibrator algorithm type" and calibrates
  again with no data, and the build fails (what users of TensorRT 10.x report): so does this fake;
* 11.4.1 (``11.x-typed``): rejects ``--fp16/--int8/--calib/--best`` as unknown options, as TensorRT 11
  removed them; for the DLA the ONNX itself must be typed (fp16 tensors) or quantized (QuantizeLinear);
  int8 io tensors take their scale from the Q/DQ ONNX;
* 10.8 and 11.2: no DLA in these TensorRT versions (10.7 was the last 10.x with one, 11.4.1 the first 11.x):
  ``--useDLACore`` fails.

The ONNX checks are written here, independently of dla_infer_node.dla_build.onnx_facts, so the tests
cross-check the package's reading of a model.
"""

from __future__ import annotations

import struct
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

COMMON = {"--onnx", "--useDLACore", "--buildDLAStandalone", "--inputIOFormats", "--outputIOFormats",
          "--saveEngine", "--allowGPUFallback", "--version", "--skipInference", "--verbose",
          "--stronglyTyped"}
PRECISION = {"--fp16", "--int8", "--calib", "--best"}
FORMATS = {"dla_linear": "linear", "dla_hwc4": "hwc4", "chw16": "chw16", "chw32": "chw32"}


def fail(msg: str, argv: list[str]) -> int:
    print(f"[E] {msg}")
    print(f"&&&& FAILED TensorRT.trtexec [TensorRT v{TAG}] # trtexec {' '.join(argv)}")
    return 1


def parse(argv: list[str], known: set[str]) -> tuple[dict[str, str], str | None]:
    opts: dict[str, str] = {}
    for a in argv:
        key, _, value = a.partition("=")
        if key not in known:
            return opts, key
        opts[key] = value
    return opts, None


def cache_scales(path: str, input_name: str) -> dict[str, float] | str:
    """The cache's scales, or why TensorRT would not use them (then it calibrates without data)."""
    p = Path(path)
    if not p.is_file():
        return f"Could not open calibration cache {path}"
    lines = p.read_text().splitlines()
    header = lines[0].strip() if lines else ""
    parts = header.split("-", 2)
    want = f"TRT-{TAG}-EntropyCalibration2"
    if header != want:
        if len(parts) != 3 or parts[2] != "EntropyCalibration2":
            print("[W] [TRT] Calibration table does not match calibrator algorithm type.")
        else:
            print(f"[W] [TRT] (fake) calibration table of TensorRT v{parts[1]}, this is v{TAG}: not used.")
        print("[I] [TRT] Starting Calibration.")
        return (f"Tensor `{input_name}` is bound to nullptr (trtexec's calibrator has no data; the cache "
                f"header must read {want})")
    return {k.strip(): struct.unpack(">f", bytes.fromhex(v.strip()))[0]
            for k, _, v in (ln.rpartition(":") for ln in lines[1:]) if k}


def onnx_model(path: str) -> object:
    import onnx

    return onnx.load(path)


def qdq_scales(model: object) -> dict[str, float]:
    from onnx import numpy_helper

    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}  # type: ignore[attr-defined]
    out: dict[str, float] = {}
    for n in model.graph.node:  # type: ignore[attr-defined]
        if n.op_type == "QuantizeLinear" and n.input[1] in inits and inits[n.input[1]].size == 1:
            out[n.input[0]] = float(inits[n.input[1]].ravel()[0])
        if n.op_type == "DequantizeLinear" and n.input[1] in inits and inits[n.input[1]].size == 1:
            out[n.output[0]] = float(inits[n.input[1]].ravel()[0])
    return out


def typed_precision(model: object) -> str:
    g = model.graph  # type: ignore[attr-defined]
    if any(n.op_type == "QuantizeLinear" for n in g.node):
        return "int8"
    weights = [t.data_type for t in g.initializer if t.data_type in (1, 10)]  # FLOAT, FLOAT16
    return "fp16" if weights and all(t == 10 for t in weights) else "fp32"


def main(version: str, argv: list[str]) -> int:
    print(f"&&&& RUNNING TensorRT.trtexec [TensorRT v{TAG}] # trtexec {' '.join(argv)}")
    major = int(version.split(".")[0])
    known = COMMON | (PRECISION if major < 11 else set())
    opts, unknown = parse(argv, known)
    if unknown:
        return fail(f"Unknown option: {unknown}", argv)  # TensorRT 11 removed the precision flags
    print(f"[I] TensorRT version: {version}")
    if "--version" in opts:
        return 0
    if "--useDLACore" in opts and (10, 8, 0) <= tuple(int(x) for x in version.split(".")) < (11, 4, 1):
        return fail(f"DLA is not supported by TensorRT {version}: cannot use DLA core "
                    f"{opts['--useDLACore']}", argv)
    if "--buildDLAStandalone" in opts and "--useDLACore" not in opts:
        return fail("--buildDLAStandalone needs --useDLACore", argv)
    if not Path(opts.get("--onnx", "")).is_file():
        print(f"[E] Could not open file {opts.get('--onnx', '')}")
        return fail(f"Failed to parse onnx file {opts.get('--onnx', '')}", argv)
    model = onnx_model(opts["--onnx"])
    if major < 11:
        if "--fp16" not in opts and "--int8" not in opts:
            return fail("DLA standalone: the network must build in fp16 or int8 (give --fp16/--int8)", argv)
        first_input = model.graph.input[0].name  # type: ignore[attr-defined]
        found = cache_scales(opts["--calib"], first_input) if opts.get("--calib") else {}
        if isinstance(found, str):
            return fail(found, argv)
        scales = found
    else:
        kind = typed_precision(model)
        if kind == "fp32":
            return fail("DLA standalone: network tensors are FP32; a strongly typed DLA network needs fp16 "
                        "tensors or Q/DQ nodes", argv)
        scales = qdq_scales(model)
    return write(model, opts, scales, argv)


def write(model: object, opts: dict[str, str], scales: dict[str, float], argv: list[str]) -> int:
    from emulator.make_loadable import EmuTensor, build_loadable

    g = model.graph  # type: ignore[attr-defined]
    inits = {t.name for t in g.initializer}
    graph_in = [v for v in g.input if v.name not in inits]

    def dims(v: object) -> list[int]:
        return [int(d.dim_value) for d in v.type.tensor_type.shape.dim]  # type: ignore[attr-defined]

    def tensors(values: list[object], spec: str) -> list[EmuTensor] | str:
        entries = spec.split(",")
        entries = entries * len(values) if len(entries) == 1 else entries
        if len(entries) != len(values):
            return f"{len(entries)} io formats for {len(values)} tensors"
        out = []
        for v, e in zip(values, entries, strict=False):
            dtype, _, fmt = e.partition(":")
            name = v.name  # type: ignore[attr-defined]
            if dtype == "int8" and name not in scales:
                return f"no int8 scale for io tensor {name} (calibration cache / Q/DQ)"
            d = dims(v) + [1] * (4 - len(dims(v)))
            vec = {"chw16": 16, "chw32": 32}.get(FORMATS[fmt], 1)
            d[1] = -(-d[1] // vec) * vec
            out.append(EmuTensor(name, FORMATS[fmt], dtype, (d[0], d[1], d[2], d[3]), scales.get(name)))
        return out

    ins = tensors(graph_in, opts["--inputIOFormats"])
    outs = tensors(list(g.output), opts["--outputIOFormats"])
    if isinstance(ins, str) or isinstance(outs, str):
        return fail(str(ins if isinstance(ins, str) else outs), argv)
    engine = Path(opts["--saveEngine"])
    if not engine.parent.is_dir():  # trtexec does not make folders
        return fail(f"Cannot open engine file: {engine}", argv)
    engine.write_bytes(build_loadable("echo", ins, outs))
    print(f"[I] Engine built; saved to {opts['--saveEngine']} (EMULATED loadable, fake trtexec)")
    print(f"&&&& PASSED TensorRT.trtexec [TensorRT v{TAG}] # trtexec {' '.join(argv)}")
    return 0


if __name__ == "__main__":
    _version = sys.argv[1].split("=", 1)[1]  # --fake-version=X.Y.Z, set by the wrapper script
    _v = [int(x) for x in _version.split(".")]
    # TensorRT's version code (NV_TENSORRT_VERSION): x10000 for the major from 10 on, x1000 before
    TAG = str(_v[0] * (10000 if _v[0] >= 10 else 1000) + _v[1] * 100 + _v[2])
    sys.exit(main(_version, sys.argv[2:]))

"""``dla_doctor``: prove a cuDLA deployment one stage at a time, stop at the first failure.

    python -m dla_infer_node.cli.doctor [--loadable L] [--artifact A] [--dla-core N]
                                    [--image IMG --onnx-meta M] [--record out.yaml]

Stages: python -> platform -> runtime_library -> cuda -> dla_count -> artifact -> device -> loadable ->
tensors -> memory -> submit -> compare. Each prints PASS/WARN/FAIL/SKIP with details; the first FAIL prints
the error (stage, call, parameters, cudla.Status) and a hint, and stops. ``platform`` (doctor_platform)
records JetPack/L4T, TensorRT, CUDA, cuda-bindings, the libcudla file loaded and the DLA count, and WARNs
when this TensorRT builds no DLA loadable or differs from the one the artifact was built with. Stages
that need an artifact are skipped without ``--loadable``/``--artifact``; ``compare`` needs ``--image``
and ``--onnx-meta``. Exit code 0 only when no stage failed AND none was skipped (``--allow-skip`` makes
skips acceptable). ``--record`` writes a deployment record (YAML) with separate ``artifact``, ``runtime``
and ``platform`` sections.
"""

from __future__ import annotations

import argparse
import ctypes
import datetime as _dt
import importlib.metadata as md
import platform as _platform
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dla_infer_node.backends import cuda_runtime as cr
from dla_infer_node.backends.cudla import CudlaBackend, open_artifact
from dla_infer_node.backends.cudla_errors import cudla_call, status_name
from dla_infer_node.backends.factory import BackendSettings, open_backend
from dla_infer_node.cli import doctor_platform
from dla_infer_node.cli.doctor_platform import is_emulator, library_origin, mapped_libcudla
from dla_infer_node.core.errors import DlaInferError

STAGES = ("python", "platform", "runtime_library", "cuda", "dla_count", "artifact", "device", "loadable",
          "tensors", "memory", "submit", "compare")


# printed status -> the record's result
RESULTS = {"PASS": "passed", "WARN": "passed", "FAIL": "failed", "SKIP": "not run", "NOT RUN": "not run"}


class StageFailed(Exception):
    def __init__(self, stage: str, message: str, hint: str | None = None) -> None:
        if hint and message.endswith(f" (hint: {hint})"):  # a package error already carries its hint
            message = message[: -len(f" (hint: {hint})")]
        super().__init__(message)
        self.stage, self.message, self.hint = stage, message, hint


@dataclass
class Report:
    stages: list[dict[str, Any]] = field(default_factory=list)
    artifact: dict[str, Any] = field(default_factory=dict)
    runtime: dict[str, Any] = field(default_factory=dict)
    platform: dict[str, Any] = field(default_factory=dict)

    def add(self, stage: str, status: str, detail: str) -> None:
        self.stages.append({"stage": stage, "status": status, "result": RESULTS[status], "detail": detail})
        print(f"[{status:4}] {stage:<16} {detail}", flush=True)

    def add_not_run(self) -> None:
        """Every stage appears in the record: those after a failure as 'not run', saying why."""
        done = {s["stage"] for s in self.stages}
        first = self.failed
        for stage in STAGES:
            if stage not in done:
                why = f"stage '{first['stage']}' failed first" if first else "not reached"
                self.add(stage, "NOT RUN", why)

    @property
    def failed(self) -> dict[str, Any] | None:
        return next((s for s in self.stages if s["status"] == "FAIL"), None)


def _version(pkg: str) -> str | None:
    try:
        return md.version(pkg)
    except md.PackageNotFoundError:
        return None


def _platform_facts() -> dict[str, Any]:
    facts: dict[str, Any] = {"python": sys.version.split()[0], "machine": _platform.machine(),
                             "system": f"{_platform.system()} {_platform.release()}",
                             "host": _platform.node()}
    names = ("dla_infer_node", "numpy", "opencv-python-headless", "onnxruntime", "cuda-bindings",
             "cuda-pathfinder", "pyyaml")
    facts["packages"] = {p: _version(p) for p in names}
    return facts


def _stage_python(rep: Report) -> Any:
    bindings = _version("cuda-bindings") or _version("cuda-python")
    try:
        from cuda.bindings import cudla
    except ImportError as exc:
        raise StageFailed("python", f"cuda.bindings.cudla not importable ({exc}); cuda-bindings {bindings}",
                          "pip install 'cuda-bindings>=13.3' (cuDLA support arrived in 13.3)") from exc
    rep.add("python", "PASS", f"Python {sys.version.split()[0]}; cuda-bindings {bindings}; "
                              f"cuda.bindings.cudla importable")
    return cudla


def _stage_runtime_library(rep: Report, cudla: Any) -> None:
    try:
        version = cudla_call("runtime_library", "cudla.get_version", {}, cudla.get_version)
    except DlaInferError as exc:
        raise StageFailed("runtime_library", str(exc), exc.hint) from exc
    path, emulated = mapped_libcudla(), is_emulator()
    rep.runtime.update({"cudla_library": path, "cudla_library_origin": library_origin(path, emulated),
                        "cudla_version": int(version), "dla_emulator": emulated})
    label = " -- DLA EMULATOR (test infrastructure, not a DLA)" if emulated else ""
    rep.add("runtime_library", "PASS", f"libcudla.so.1 at {path}, cudla version {version}{label}")


def _stage_cuda(rep: Report) -> None:
    try:
        v = cr.versions()
        n = cr.device_count()
        cr.make_context_current(0)
    except DlaInferError as exc:
        raise StageFailed("cuda", str(exc), "is the NVIDIA driver loaded (nvidia-smi / tegrastats)?") from exc
    rep.runtime.update({"cuda_driver": v["driver"], "cuda_runtime": v["runtime"], "gpu_count": n})
    rep.add("cuda", "PASS", f"CUDA driver {v['driver']}, runtime {v['runtime']}, {n} GPU(s), context current")


def _stage_dla_count(rep: Report, cudla: Any, core: int) -> None:
    try:
        n = int(cudla_call("device", "cudla.device_get_count", {}, cudla.device_get_count))
    except DlaInferError as exc:
        raise StageFailed("dla_count", str(exc), exc.hint) from exc
    rep.runtime["dla_count"] = n
    if core >= n:
        raise StageFailed("dla_count", f"dla_core {core} requested but {n} DLA core(s) present",
                          "AGX Orin: cores 0 and 1; Orin Nano has no DLA")
    rep.add("dla_count", "PASS", f"{n} DLA core(s); using core {core}")


def _descriptor_table(descs: dict[str, list[dict[str, Any]]]) -> str:
    head = f"    {'side':<6} {'name':<16} {'n':>2} {'c':>5} {'h':>5} {'w':>5} {'size':>10} fmt type  strides"
    rows = [head]
    for side, lst in descs.items():
        for d in lst:
            rows.append(f"    {side[:-1]:<6} {d['name'][:16]:<16} {d['n']:>2} {d['c']:>5} {d['h']:>5} "
                        f"{d['w']:>5} {d['size']:>10} {d['data_format']:>3} {d['data_type']:>4}  "
                        f"{d['stride'][:4]}")
    return "\n".join(rows)


def _device_only(rep: Report, cudla: Any, core: int) -> None:
    """Without an artifact: create and destroy one hybrid-mode handle."""
    try:
        dev = cudla_call("device", "cudla.create_device", {"dla_core": core, "mode": "Mode.CUDA_DLA"},
                         cudla.create_device, core, int(cudla.Mode.CUDA_DLA))
        cudla_call("device", "cudla.destroy_device", {}, cudla.destroy_device, dev)
    except DlaInferError as exc:
        raise StageFailed("device", str(exc), exc.hint) from exc
    rep.add("device", "PASS", f"create_device({core}, Mode.CUDA_DLA) and destroy_device")


def _stages_with_artifact(rep: Report, args: argparse.Namespace) -> None:
    import numpy as np

    try:
        artifact = open_artifact(args.loadable or "", args.artifact or "")
    except DlaInferError as exc:
        raise StageFailed("artifact", str(exc), exc.hint) from exc
    rep.artifact.update(artifact.summary())
    rep.add("artifact", "PASS", f"{artifact.sidecar_path} valid; loadable {artifact.loadable_path}"
                                + (" (DLA EMULATOR artifact)" if artifact.emulated else ""))
    passed = {"runtime_library", "dla_count"}

    def observe(stage: str, info: dict[str, Any]) -> None:
        if stage == "descriptors":
            rep.artifact["descriptors"] = info
            print(_descriptor_table(info), flush=True)
        elif stage not in passed:
            rep.add(stage, "PASS", ", ".join(f"{k}={v}" for k, v in info.items()))

    try:
        backend = CudlaBackend(artifact, dla_core=args.dla_core, preprocess_device=args.preprocess_device,
                               observer=observe)
    except DlaInferError as exc:
        raise StageFailed(exc.stage if exc.stage in STAGES else "device", str(exc), exc.hint) from exc
    rep.runtime.update({"dla_core": args.dla_core, "runtime_mode": "hybrid",
                        "preprocess_device": args.preprocess_device})
    try:
        spec = artifact.metadata.input
        zeros = np.zeros((spec.height, spec.width, 3), np.uint8)
        try:
            backend.infer(zeros, "rgb8")
            status = backend.dla_status()
        except DlaInferError as exc:
            raise StageFailed("submit", str(exc), exc.hint) from exc
        if status != 0:
            raise StageFailed("submit",
                              f"task ran but cudla.get_last_error = {status_name(status)} ({status})")
        rep.add("submit", "PASS", "one task with a zero frame: submitted, synchronised, "
                                  "get_last_error = Success")
        doctor_platform.task_statistics(rep, backend)
        if args.image:
            _stage_compare(rep, args, backend)
        else:
            rep.add("compare", "SKIP", "no --image/--onnx-meta given")
    finally:
        backend.close()


def _stage_compare(rep: Report, args: argparse.Namespace, backend: Any) -> None:
    """The DLA's outputs on one image against the ONNX model on the CPU (onnxruntime backend)."""
    import cv2
    import numpy as np

    if not args.onnx_meta:
        raise StageFailed("compare", "--image needs --onnx-meta (the ONNX model's metadata YAML)")
    img = cv2.imread(str(args.image), cv2.IMREAD_COLOR)
    if img is None:
        raise StageFailed("compare", f"cannot read image {args.image}")
    rgb = np.ascontiguousarray(img[:, :, ::-1])
    try:
        ort, _ = open_backend(BackendSettings(backend="onnxruntime", metadata_path=str(args.onnx_meta)))
        try:
            ref = ort.infer(rgb, "rgb8").tensors
        finally:
            ort.close()
        got = backend.infer(rgb, "rgb8").tensors
    except DlaInferError as exc:
        raise StageFailed("compare", str(exc), exc.hint) from exc
    details, worst = [], 1.0
    for i, (a, b) in enumerate(zip(got, ref, strict=False)):
        if a.shape != b.shape:
            raise StageFailed("compare", f"output {i}: DLA shape {a.shape} vs ONNX {b.shape}")
        x, y = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
        cos = float(x @ y / (np.linalg.norm(x) * np.linalg.norm(y) + 1e-12))
        worst = min(worst, cos)
        details.append(f"out{i}: cosine {cos:.5f}, max|diff| {float(np.abs(x - y).max()):.4g}")
    rep.runtime["compare"] = {"image": str(args.image), "outputs": details, "min_cosine": worst}
    if worst < args.min_cosine:
        raise StageFailed("compare", "; ".join(details) + f" (min cosine {worst:.4f} < {args.min_cosine})",
                          "int8 scales or io formats in the sidecar may not match the loadable")
    rep.add("compare", "PASS", "; ".join(details))


def run(args: argparse.Namespace) -> tuple[int, Report]:
    rep = Report()
    rep.platform.update(_platform_facts())
    if args.cudla_library:  # loaded first, the binding then uses this copy (cuda.pathfinder: already loaded)
        ctypes.CDLL(str(Path(args.cudla_library).resolve()), mode=ctypes.RTLD_GLOBAL)
    try:
        cudla = _stage_python(rep)
        doctor_platform.stage(rep, cudla, args)
        _stage_runtime_library(rep, cudla)
        _stage_cuda(rep)
        _stage_dla_count(rep, cudla, args.dla_core)
        if args.loadable or args.artifact:
            _stages_with_artifact(rep, args)
        else:
            _device_only(rep, cudla, args.dla_core)
            for s in ("artifact", "loadable", "tensors", "memory", "submit", "compare"):
                rep.add(s, "SKIP", "no --loadable/--artifact given")
    except StageFailed as fail:
        rep.add(fail.stage, "FAIL", fail.message)
        if fail.hint:
            print(f"       hint: {fail.hint}", flush=True)
        rep.stages[-1]["hint"] = fail.hint
    rep.add_not_run()
    skipped = [s["stage"] for s in rep.stages if s["status"] == "SKIP"]
    ok = rep.failed is None and (not skipped or args.allow_skip)
    return (0 if ok else 1), rep


def write_record(rep: Report, path: str | Path, code: int) -> None:
    import yaml

    doc = {"record_version": 1, "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
           "result": "pass" if code == 0 else "fail",
           "failed_stage": (rep.failed or {}).get("stage"), "stages": rep.stages,
           "artifact": rep.artifact, "runtime": rep.runtime, "platform": rep.platform}
    Path(path).write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="dla_doctor", description=__doc__.split("\n\n")[0])
    ap.add_argument("--loadable", help="DLA loadable (trtexec --buildDLAStandalone)")
    ap.add_argument("--artifact", help="sidecar YAML (default: <loadable>.yaml)")
    ap.add_argument("--dla-core", type=int, default=0)
    ap.add_argument("--preprocess-device", choices=("cpu", "gpu"), default="cpu")
    ap.add_argument("--image", help="compare DLA outputs on this image with the ONNX model on the CPU")
    ap.add_argument("--onnx-meta", help="metadata YAML of the ONNX model for --image")
    ap.add_argument("--min-cosine", type=float, default=0.99)
    ap.add_argument("--record", help="write the deployment record (YAML) here")
    ap.add_argument("--allow-skip", action="store_true", help="exit 0 even when stages were skipped")
    ap.add_argument("--cudla-library",
                    help="load this libcudla.so.1 (e.g. the DLA EMULATOR) before the binding")
    args = ap.parse_args(argv)
    code, rep = run(args)
    if args.record:
        write_record(rep, args.record, code)
        print(f"deployment record: {args.record}")
    print("doctor: all stages passed" if code == 0 else
          f"doctor: {'FAILED at ' + rep.failed['stage'] if rep.failed else 'incomplete (stages skipped)'}")
    return code


if __name__ == "__main__":
    raise SystemExit(main())

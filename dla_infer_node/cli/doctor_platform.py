"""The doctor's ``platform`` stage: which versions this robot runs, checked before any module is loaded.

Facts: JetPack / L4T release (/etc/nv_tegra_release, dpkg's nvidia-l4t-core), TensorRT (``trtexec
--version``, else libnvinfer's getInferLibVersion), CUDA driver and runtime, cuda-bindings, the libcudla file
actually mapped into this process (from /proc/self/maps after the first cuDLA call: the system copy of
JetPack or the pip copy of the nvidia-cudla wheel, which cuda.pathfinder may prefer) with its
``cudla.get_version()``, and the DLA count. They are checked against ``artifact.trt_support``, and the
TensorRT recorded in the artifact's sidecar is compared with this one: a loadable from another DLA software
version fails at module load with cudlaErrorIncompatibleDlaSWVersion, so the doctor warns first.
"""

from __future__ import annotations

import ctypes
import importlib.metadata as md
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from dla_infer_node.artifact import trt_support
from dla_infer_node.backends import cuda_runtime as cr
from dla_infer_node.backends.cudla import open_artifact
from dla_infer_node.backends.cudla_errors import status_name
from dla_infer_node.core.errors import DlaInferError

# L4T major -> JetPack line (NVIDIA's JetPack release table: L4T 35 = JetPack 5, 36 = 6, 38 = 7)
JETPACK_BY_L4T = {32: "4.x", 35: "5.x", 36: "6.x", 38: "7.x"}
TRTEXEC_PLACES = ("/usr/src/tensorrt/bin/trtexec",)  # where JetPack installs it, off PATH


def _version(pkg: str) -> str | None:
    try:
        return md.version(pkg)
    except md.PackageNotFoundError:
        return None


def l4t_release(path: Path = Path("/etc/nv_tegra_release")) -> dict[str, Any]:
    """``# R36 (release), REVISION: 4.3, ...`` -> 36.4.3, and the JetPack line it belongs to."""
    out: dict[str, Any] = {"l4t": None, "jetpack": None, "l4t_core_package": None}
    if path.is_file():
        first = path.read_text(errors="replace").split("\n", 1)[0]
        m = re.search(r"R(\d+)\s*\(release\),\s*REVISION:\s*([\d.]+)", first)
        if m:
            out["l4t"] = f"{m.group(1)}.{m.group(2)}"
            out["jetpack"] = JETPACK_BY_L4T.get(int(m.group(1)))
        else:
            out["l4t"] = first.strip() or None
    if shutil.which("dpkg-query"):
        proc = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "nvidia-l4t-core"],
                              capture_output=True, text=True, timeout=20)
        out["l4t_core_package"] = proc.stdout.strip() if proc.returncode == 0 else None
    return out


def tensorrt_version() -> tuple[str | None, str]:
    """(version, how it was found): trtexec first (it is what builds loadables), then libnvinfer."""
    for exe in (shutil.which("trtexec"), *TRTEXEC_PLACES):
        if exe and os.access(exe, os.X_OK):
            try:
                proc = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60)
            except (OSError, subprocess.SubprocessError):
                continue
            v = trt_support.parse_trtexec_version(proc.stdout + proc.stderr)
            if v is not None:
                return trt_support.format_version(v), f"{exe} --version"
    for name in ("libnvinfer.so.11", "libnvinfer.so.10", "libnvinfer.so.8"):
        try:
            n = int(ctypes.CDLL(name).getInferLibVersion())
        except (OSError, AttributeError):
            continue
        # 10.x+ encodes major*10000 + minor*100 + patch; 8.x encodes major*1000 + minor*100 + patch
        major, rest = (n // 10000, n % 10000) if n >= 10000 else (n // 1000, n % 1000)
        return f"{major}.{rest // 100}.{rest % 100}", f"{name} getInferLibVersion"
    py = _version("tensorrt")
    return (py, "python package tensorrt") if py else (None, "no trtexec, libnvinfer or tensorrt package")


def mapped_libcudla() -> str | None:
    """The libcudla file this process has mapped (after a cuDLA call), from /proc/self/maps."""
    try:
        text = Path("/proc/self/maps").read_text()
    except OSError:
        return None
    paths = [ln.split(None, 5)[5] for ln in text.splitlines() if len(ln.split(None, 5)) == 6]
    return next((p.strip() for p in paths if "libcudla" in Path(p.strip()).name), None)


def library_origin(path: str | None, emulated: bool) -> str:
    if path is None:
        return "not loaded"
    if emulated:
        return "DLA EMULATOR (test infrastructure)"
    if "site-packages" in path or "dist-packages" in path:
        return "pip copy (nvidia-cudla wheel)"
    return "system copy (JetPack)"


def is_emulator() -> bool:
    try:
        return bool(ctypes.CDLL("libcudla.so.1", mode=os.RTLD_NOLOAD).dlaEmuIsEmulator())
    except (OSError, AttributeError):
        return False


def cuda_facts() -> dict[str, Any]:
    try:
        v = cr.versions()
        return {"cuda_driver": v["driver"], "cuda_runtime": v["runtime"]}
    except Exception as exc:  # informational here; the cuda stage reports the failure properly
        return {"cuda_driver": None, "cuda_runtime": None, "cuda_error": f"{type(exc).__name__}: {exc}"}


def cudla_facts(cudla: Any) -> dict[str, Any]:
    facts: dict[str, Any] = {"cudla_version": None, "dla_count": None}
    try:
        facts["cudla_version"] = int(cudla.get_version())
        facts["dla_count"] = int(cudla.device_get_count())
    except Exception as exc:  # the runtime_library / dla_count stages report it with the hint
        facts["cudla_error"] = f"{type(exc).__name__}: {exc}"
    path = mapped_libcudla()
    emulated = is_emulator()
    facts.update({"cudla_library": path, "cudla_library_origin": library_origin(path, emulated),
                  "dla_emulator": emulated})
    return facts


def collect(cudla: Any) -> dict[str, Any]:
    facts: dict[str, Any] = l4t_release()
    trt, how = tensorrt_version()
    facts["tensorrt"] = trt_support.describe(trt)
    facts["tensorrt"]["found_by"] = how
    facts["cuda_bindings"] = _version("cuda-bindings")
    facts.update(cuda_facts())
    facts.update(cudla_facts(cudla))
    return facts


def check(facts: dict[str, Any], artifact_build: dict[str, Any] | None) -> list[str]:
    """Warnings: this TensorRT builds no DLA loadable; the artifact was built by another TensorRT."""
    warnings: list[str] = []
    trt = facts["tensorrt"]
    if trt["version"] and not trt["dla"]:
        warnings.append(f"TensorRT {trt['version']} builds no DLA loadable ({trt['where']}); "
                        f"DLA loadables come from {trt_support.DLA_VERSIONS_TEXT}")
    built = (artifact_build or {}).get("tensorrt_version")
    if artifact_build is None:
        return warnings
    if not built:
        warnings.append("the artifact's sidecar records no TensorRT version: cannot check it matches")
    elif not trt["version"]:
        warnings.append(f"artifact built by TensorRT {built}; this platform's TensorRT is unknown: "
                        f"a different DLA software version fails at module load "
                        f"(cudlaErrorIncompatibleDlaSWVersion)")
    elif not trt_support.same_dla_software(str(built), trt["version"]):
        built_line = artifact_build.get("tensorrt_line") or trt_support.describe(str(built))["line"]
        warnings.append(f"artifact built by TensorRT {built} "
                        f"({built_line}), "
                        f"platform has {trt['version']} ({trt['line']}): expect "
                        f"cudlaErrorIncompatibleDlaSWVersion at module load; rebuild with this TensorRT")
    return warnings


def summary(facts: dict[str, Any]) -> str:
    trt = facts["tensorrt"]
    return (f"L4T {facts['l4t'] or 'not present'} (JetPack {facts['jetpack'] or '?'}); TensorRT "
            f"{trt['version'] or 'not found'} ({trt['line'] or 'no DLA line'}); CUDA driver "
            f"{facts.get('cuda_driver')}, runtime {facts.get('cuda_runtime')}; cuda-bindings "
            f"{facts['cuda_bindings']}; libcudla {facts['cudla_library']} "
            f"[{facts['cudla_library_origin']}], version {facts['cudla_version']}; "
            f"{facts['dla_count']} DLA core(s)")


def stage(rep: Any, cudla: Any, args: Any) -> None:
    """Informational facts + warnings; fails only if it cannot run at all (never on a version)."""
    build = None
    if args.loadable or args.artifact:
        try:
            build = dict(open_artifact(args.loadable or "", args.artifact or "").build)
        except DlaInferError:
            build = None  # the artifact stage reports why
    facts = collect(cudla)
    rep.platform.update(facts)
    warnings = check(facts, build)
    if build is not None:
        rep.platform["artifact_tensorrt"] = {"version": build.get("tensorrt_version"),
                                             "line": build.get("tensorrt_line")}
    rep.platform["warnings"] = warnings
    rep.add("platform", "WARN" if warnings else "PASS", summary(facts))
    for w in warnings:
        print(f"       warning: {w}", flush=True)


def task_statistics(rep: Any, backend: Any) -> None:
    """cuDLA 1.5's per-layer task statistics (NUM_OUTPUT_TASK_STATISTICS), where binding and library have
    them: the count is recorded; 0 means the loadable was built without statistics."""
    cudla = backend._cudla
    attr = getattr(cudla.ModuleAttributeType, "NUM_OUTPUT_TASK_STATISTICS", None)
    if attr is None or backend._module is None:
        rep.runtime["task_statistics"] = "not available in this cuda-bindings"
        return
    try:
        n = cudla.module_get_attributes(backend._module, int(attr))
        rep.runtime["task_statistics"] = {"num_output_task_statistics": int(n)}
    except Exception as exc:
        status = getattr(exc, "status", None)
        why = status_name(status) if status is not None else str(exc)
        rep.runtime["task_statistics"] = f"not available: {why}"

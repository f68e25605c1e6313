"""Several cameras: one node process against one process per camera (not a test).

    python -m dla_infer_node.bench.cameras [--cameras 1,2,4] [--cores 1,2] [--duration 10] \
        [--node-param backend:=cudla --node-param loadable_path:=X ...] [--node-wrapper emulator.network_host]

For each number of cameras and of DLA cores, and each way of serving them (``one``: one node process with
``cameras`` and ``dla_cores``; ``per_camera``: one single-camera node process per camera, on core
``i % cores``), camera processes (``bench.camera_roles camera``: a generated 1920x1080 rgb8 scene at 30 Hz,
best effort) publish ``/benchcams/c<i>/image`` for ``--duration`` s; the node(s) answer on
``/benchcams/c<i>/detections``, which a listener process takes (with /diagnostics). Every process loads
``config/fastdds_large_images.xml`` (``--profile default`` leaves it out). Per configuration: frames
published, taken in and processed per camera (the node's own counters from its /diagnostics), detection
arrays received, latency (arrival - publish stamp) p50/p95, and the node processes' RSS, CPU (user + system
over the stream, from /proc) summed over processes, and the GPU memory they hold (nvidia-smi: the GPU's
memory in use during the stream less before the nodes started; nothing else may use the GPU meanwhile).
With the DLA EMULATOR the cores are shared by every process through ``DLA_EMU_CORE_FILE`` (one file per
configuration), as a Jetson's two DLA cores are; ``DLA_EMU_TASK_MS`` and ``DLA_EMU_REUSE_OUTPUTS`` are the
caller's (see emulator/README.md). Results: ``bench/results/cameras.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from dla_infer_node.bench.node import PROFILE, PROFILE_ENVS
from dla_infer_node.bench.role_stop import stop_all

NS = "/benchcams"
ROLES = [sys.executable, "-m", "dla_infer_node.bench.camera_roles"]


def _proc_cpu_s(pid: int) -> float:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = text[text.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rss_mb(pid: int) -> dict[str, float]:
    out = {"rss": 0.0, "peak": 0.0}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                out["rss"] = int(line.split()[1]) / 1024
            elif line.startswith("VmHWM:"):
                out["peak"] = int(line.split()[1]) / 1024
    except OSError:
        pass
    return out


def _gpu_used_mb() -> float | None:
    """Memory in use on the GPU(s) (nvidia-smi); None without nvidia-smi. The benchmark takes the growth
    from before its nodes start: per-process figures are often unavailable inside a container."""
    if shutil.which("nvidia-smi") is None:
        return None
    query = ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"]
    try:
        out = subprocess.run(query, capture_output=True, text=True, timeout=20).stdout
        return sum(float(line) for line in out.split())
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return None


def _pct(values: list[float], q: float) -> float | None:
    return round(float(np.percentile(values, q)), 2) if values else None


def _node_cmd(args: argparse.Namespace) -> list[str]:
    if args.node_cmd:
        return shlex.split(args.node_cmd)
    if args.node_wrapper:
        return [sys.executable, "-m", args.node_wrapper, "dla_infer_node.ros.node"]
    return [sys.executable, "-m", "dla_infer_node.ros.node"]


def _params(pairs: list[tuple[str, str]]) -> list[str]:
    return [x for key, value in pairs for x in ("-p", f"{key}:={value}")]


def run_config(args: argparse.Namespace, env: dict[str, str], n: int, cores: int, mode: str
               ) -> dict[str, Any]:
    names = [f"c{i}" for i in range(n)]
    common = [tuple(p.split(":=", 1)) for p in args.node_param]
    common += [("diagnostics_period", "1.0"), ("qos_depth", str(args.qos_depth))]
    with tempfile.TemporaryDirectory(prefix="bench_cameras_") as folder:
        tmp = Path(folder)
        env = dict(env, DLA_EMU_CORE_FILE=str(tmp / "dla_cores"))
        procs: dict[str, subprocess.Popen[bytes]] = {}

        def start(role: str, cmd: list[str]) -> subprocess.Popen[bytes]:
            with open(tmp / f"{role}.log", "wb") as log:
                procs[role] = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
            return procs[role]

        gpu0 = _gpu_used_mb()
        nodes: list[subprocess.Popen[bytes]] = []
        if mode == "one":
            pairs = [*common, ("cameras", "[" + ",".join(names) + "]"),
                     ("dla_cores", "[" + ",".join(str(c) for c in range(cores)) + "]")]
            nodes.append(start("node", [*_node_cmd(args), "--ros-args", "-r", f"__ns:={NS}",
                                        *_params(pairs)]))
        else:
            for i, name in enumerate(names):
                pairs = [*common, ("dla_core", str(i % cores))]
                nodes.append(start(f"node_{name}", [*_node_cmd(args), "--ros-args", "-r",
                                                    f"__ns:={NS}/{name}", *_params(pairs)]))
        listen = start("listen", [*ROLES, "listen", "--result", str(tmp / "listen.json"), "--ready",
                                  str(tmp / "listen.ready"), "--prefix", f"{NS}/",
                                  *(x for c in names for x in ("--camera", c))])
        problem = ""
        cpu0 = wall0 = 0.0
        cpu1 = wall1 = 0.0
        mem: list[dict[str, float]] = []
        gpu: float | None = None
        try:
            deadline = time.monotonic() + args.startup
            while not (tmp / "listen.ready").exists():
                if any(p.poll() is not None for p in (*nodes, listen)):
                    problem = "a node or the listener exited before the stream"
                    break
                if time.monotonic() > deadline:
                    problem = f"the nodes' outputs were not all there after {args.startup:.0f} s"
                    break
                time.sleep(0.2)
            if not problem:
                for i, name in enumerate(names):
                    start(f"camera_{name}", [*ROLES, "camera", "--topic", f"{NS}/{name}/image", "--width",
                                             str(args.width), "--height", str(args.height), "--rate",
                                             str(args.rate), "--duration", str(args.duration), "--seed",
                                             str(i + 1), "--result", str(tmp / f"camera_{name}.json")])
                time.sleep(1.5 + 0.5)  # the cameras' match and first frames; the window starts after them
                cpu0, wall0 = sum(_proc_cpu_s(p.pid) for p in nodes), time.monotonic()
                time.sleep(max(0.0, args.duration - 3.0))
                cpu1, wall1 = sum(_proc_cpu_s(p.pid) for p in nodes), time.monotonic()
                mem = [_rss_mb(p.pid) for p in nodes]
                used = _gpu_used_mb()
                gpu = None if used is None or gpu0 is None else round(used - gpu0, 1)
                for name in names:
                    procs[f"camera_{name}"].wait(args.duration + 60)
                time.sleep(2.5)  # frames in hand, and one more diagnostics period
        finally:
            rcs = stop_all(procs, logs={r: tmp / f"{r}.log" for r in procs})
        bad = {r: rc for r, rc in rcs.items() if rc != 0}
        if problem or bad or not (tmp / "listen.json").exists():
            for role in procs:
                print(f"--- {role}.log\n{(tmp / f'{role}.log').read_text(errors='replace')[-3000:]}",
                      file=sys.stderr)
            raise SystemExit(f"bench_cameras: {n} camera(s), {cores} core(s), {mode}: "
                             f"{problem or 'a process failed'} (exit codes {bad})")
        heard = json.loads((tmp / "listen.json").read_text())
        cams = []
        for name in names:
            pub = json.loads((tmp / f"camera_{name}.json").read_text())
            status_name = (f"{NS}/dla_infer_node: {name}" if mode == "one"
                           else f"{NS}/{name}/dla_infer_node: detector")
            st = heard["status"].get(status_name, {})
            cams.append({"camera": name, "published": pub["published"],
                         "frames_in": int(st.get("frames_in", 0)),
                         "processed": int(st.get("frames_processed", 0)),
                         "dropped": int(st.get("frames_dropped", 0)),
                         "answered": len(heard["latency_ms"][name]),
                         "latency_ms_p50": _pct(heard["latency_ms"][name], 50)})
        lat = [x for name in names for x in heard["latency_ms"][name]]
        seconds = max(wall1 - wall0, 1e-9)
        processed = sum(c["processed"] for c in cams)
        published = sum(c["published"] for c in cams)
        return {
            "cameras": n, "cores": cores, "mode": mode, "processes": len(nodes),
            "published": published, "frames_in": sum(c["frames_in"] for c in cams), "processed": processed,
            "taken_in_ratio": round(sum(c["frames_in"] for c in cams) / max(published, 1), 4),
            "processed_ratio": round(processed / max(published, 1), 4),
            "latency_ms": {"p50": _pct(lat, 50), "p95": _pct(lat, 95)},
            "rss_mb": round(sum(m["rss"] for m in mem), 1),
            "peak_rss_mb": round(sum(m["peak"] for m in mem), 1),
            "cpu_core_percent": round(100.0 * (cpu1 - cpu0) / seconds, 1),
            "cpu_ms_per_frame": round(1e3 * (cpu1 - cpu0) / max(processed * seconds / args.duration, 1), 3),
            "gpu_mem_mb": gpu, "per_camera": cams,
        }


def _summary(run: dict[str, Any]) -> str:
    lat = run["latency_ms"]
    return (f"{run['cameras']} camera(s), {run['cores']} core(s), {run['mode']}: taken in "
            f"{run['taken_in_ratio']:.3f}, processed {run['processed_ratio']:.3f}, latency p50/p95 "
            f"{lat['p50']}/{lat['p95']} ms, RSS {run['rss_mb']} MB, CPU {run['cpu_core_percent']} %, "
            f"GPU {run['gpu_mem_mb']} MB")


def markdown_table(doc: dict[str, Any]) -> str:
    """The README's table of a result file."""
    rows = ["| cameras | DLA cores | processes | taken in | processed | latency p50 / p95 (ms) | RSS (MB) | "
            "CPU (% of a core) | GPU memory (MB) |", "|" + " --- |" * 9]
    for r in doc["runs"]:
        if "failed" in r:
            rows.append(f"| {r['cameras']} | {r['cores']} | {r['mode'].replace('_', ' ')} | failed: "
                        f"{r['failed']} | | | | | |")
            continue
        gpu = "n/a" if r["gpu_mem_mb"] is None else f"{r['gpu_mem_mb']:.0f}"
        rows.append(f"| {r['cameras']} | {r['cores']} | {r['processes']} ({r['mode'].replace('_', ' ')}) | "
                    f"{100 * r['taken_in_ratio']:.1f} % | {100 * r['processed_ratio']:.1f} % | "
                    f"{r['latency_ms']['p50']} / {r['latency_ms']['p95']} | {r['rss_mb']:.0f} | "
                    f"{r['cpu_core_percent']:.0f} | {gpu} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench_cameras",
                                 description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--cameras", default="1,2,4", help="numbers of cameras, comma-separated")
    ap.add_argument("--cores", default="1,2", help="numbers of DLA cores, comma-separated")
    ap.add_argument("--modes", default="one,per_camera", help="one (one node process) and/or per_camera")
    ap.add_argument("--duration", type=float, default=10.0, help="seconds each camera publishes")
    ap.add_argument("--rate", type=float, default=30.0)
    ap.add_argument("--width", type=int, default=1920)
    ap.add_argument("--height", type=int, default=1080)
    ap.add_argument("--qos-depth", type=int, default=5)
    ap.add_argument("--startup", type=float, default=180.0, help="longest wait for the nodes' outputs")
    ap.add_argument("--profile", choices=("default", "shipped"), default="shipped")
    ap.add_argument("--node-param", action="append", default=[], metavar="NAME:=VALUE")
    ap.add_argument("--node-wrapper", default="", metavar="MODULE",
                    help="run each node as `python -m MODULE dla_infer_node.ros.node` "
                         "(emulator.network_host)")
    ap.add_argument("--node-cmd", default="", metavar="COMMAND",
                    help="the node's command line before --ros-args, instead of `python -m "
                         "dla_infer_node.ros.node` (test/_fake_cudla_env.py's: the DLA emulator, no GPU)")
    ap.add_argument("--out", type=Path, default=Path("bench/results/cameras.json"))
    args = ap.parse_args(argv)
    env = dict(os.environ, ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST", ROS_LOCALHOST_ONLY="1")
    env.setdefault("ROS_DOMAIN_ID", str(1 + (os.getpid() * 7) % 200))
    for name in PROFILE_ENVS:
        env.pop(name, None)
        if args.profile == "shipped":
            env[name] = str(PROFILE)
    runs: list[dict[str, Any]] = []
    doc = {"benchmark": "several cameras: one node process vs one process per camera",
           "stream": {"width": args.width, "height": args.height, "encoding": "rgb8", "rate_hz": args.rate,
                      "seconds": args.duration, "qos": f"best_effort, node depth {args.qos_depth}",
                      "dds_profile": str(PROFILE.name) if args.profile == "shipped" else "default"},
           "node_parameters": args.node_param, "node_wrapper": args.node_wrapper,
           "node_cmd": args.node_cmd,
           "emulator": {k: os.environ[k] for k in ("DLA_EMU_TASK_MS", "DLA_EMU_REUSE_OUTPUTS")
                        if k in os.environ},
           "runs": runs,
           "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                       "python": platform.python_version()},
           "when": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for n in (int(x) for x in args.cameras.split(",")):
        for cores in (int(x) for x in args.cores.split(",")):
            for mode in args.modes.split(","):
                if (n == 1 and mode == "per_camera") or cores > max(n, 1):
                    continue  # one camera: both ways are one process; more cores than cameras: idle cores
                try:
                    run = run_config(args, env, n, cores, mode)
                except SystemExit as exc:  # one configuration failed (its logs are printed): the others run
                    run = {"cameras": n, "cores": cores, "mode": mode, "failed": str(exc)}
                runs.append(run)
                args.out.write_text(json.dumps(doc, indent=1) + "\n")  # after each: a cut-off run keeps them
                if "failed" not in run:
                    print(_summary(run), flush=True)
    print(markdown_table(doc))
    print(f"bench_cameras: wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Transport benchmark (not a test): ``python -m dla_infer_node.bench.transport [--out FILE] [--quick]``.

How many raw camera frames cross from one process to another over Fast DDS, and how late, by frame size (VGA,
720p, 1080p rgb8), reliability (best effort, reliable), transport configuration (Fast DDS defaults, or
``config/fastdds_large_images.xml`` loaded in both processes with FASTDDS_DEFAULT_PROFILES_FILE, or
FASTRTPS_DEFAULT_PROFILES_FILE on Humble and Jazzy) and receiver: a bare rclpy subscriber, or the real node
(``main(injected=...)`` with the zero-cost backend of ``bench.node_roles``, so the CPU goes to the transport
and "received" is the node's own ``frames_in``).

Each cell is a fresh publisher process and a fresh receiver process, ``--frames`` frames at ``--rate`` Hz; the
receiver takes frames keep last 1, as the node does by default. Cells run one after the other, each after the
last one's processes ended, all in the DDS domain ROS_DOMAIN_ID gives (one the benchmark picks where it is
unset): a test runner's domain is where it stays.
Latency = callback entry in the receiver - the publisher's wall clock at publish (header stamp).

Two setups:
- ``localhost``: ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST and ROS_LOCALHOST_ONLY=1, as the test suite runs;
- ``stock_netns``: no ROS_* discovery variables (what a robot has), best effort only, both processes inside
  a network namespace that holds only loopback (``ip netns``), so nothing reaches a real interface. Where
  namespaces cannot be made, the result says why and these cells are absent.

The README's table comes from the JSON (``bench.transport_table``); a test keeps the two equal.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from dla_infer_node.bench.node_roles import ROLES
from dla_infer_node.bench.role_stop import stop_all
from dla_infer_node.bench.transport_roles import SIZES, LoopbackNetns, ShmLedger, role_publisher
from dla_infer_node.bench.transport_table import markdown_table
from dla_infer_node.ros.launch_args import profile_env

REPO = Path(__file__).resolve().parents[2]
PROFILE = REPO / "config" / "fastdds_large_images.xml"
PROFILES = ("default", "profile")
RELIABILITIES = ("best_effort", "reliable")
RECEIVERS = ("bare", "node")
_DIAGNOSTICS_SETTLE_S = 2.5  # two of the node role's diagnostics periods (1 s) and a margin
_FASTDDS_VARS = (
    "FASTDDS_DEFAULT_PROFILES_FILE", "FASTRTPS_DEFAULT_PROFILES_FILE", "FASTDDS_BUILTIN_TRANSPORTS",
    "RMW_FASTRTPS_USE_QOS_FROM_XML")


def cell_env(base: dict[str, str], *, profile: str, reliability: str, stock: bool, domain: int
             ) -> dict[str, str]:
    """The environment of both processes of one cell: only what the cell says, nothing inherited."""
    env = {k: v for k, v in base.items() if k not in _FASTDDS_VARS}
    if stock:
        env.pop("ROS_AUTOMATIC_DISCOVERY_RANGE", None)
        env.pop("ROS_LOCALHOST_ONLY", None)
    else:
        env["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
        env["ROS_LOCALHOST_ONLY"] = "1"
    if profile == "profile":  # under the name this ROS 2's Fast DDS reads
        env.update(profile_env(str(PROFILE), base))
    env["ROS_DOMAIN_ID"] = str(domain)
    env["BENCH_RELIABILITY"] = reliability
    return env


def _pct(values: list[float], q: float) -> float | None:
    return round(float(np.percentile(values, q)), 2) if values else None


def run_cell(cell: dict[str, Any], args: argparse.Namespace, env: dict[str, str],
             prefix: list[str] | Mapping[str, list[str]], ledger: ShmLedger, *, listen: bool = False
             ) -> dict[str, Any]:
    """One publisher and one receiver process; the cell's figures (or its failure, with the logs' tails).

    ``prefix``: what each process runs under (``ip netns exec ...``), one for all or per role ('publisher',
    'measure' / 'node', 'listen'). ``listen`` (node receiver only): a listener beside the node keeps the last
    /diagnostics values it published, in ``node_diagnostics``."""
    procs: dict[str, subprocess.Popen[bytes]] = {}
    with tempfile.TemporaryDirectory(prefix="bench_transport_") as folder:
        tmp = Path(folder)

        def start(role: str, *extra: str) -> None:
            runs_under = prefix.get(role, []) if isinstance(prefix, Mapping) else prefix
            me = [*runs_under, sys.executable, "-m", "dla_infer_node.bench.transport"]
            with open(tmp / f"{role}.log", "wb") as log:
                files = ["--result", str(tmp / f"{role}.json"), "--ready", str(tmp / f"{role}.ready")]
                procs[role] = subprocess.Popen([*me, "--role", role, *files, *extra], env=env, cwd=REPO,
                                               stdout=log, stderr=subprocess.STDOUT)

        receiver = "measure" if cell["receiver"] == "bare" else "node"
        listen = listen and receiver == "node"
        problem = ""
        try:
            start(receiver)
            if listen:
                start("listen")
            # the publisher waits until the receiver has matched, then --warmup seconds more
            start("publisher", "--size", cell["size"], "--frames", str(args.frames), "--rate", str(args.rate))
            end = time.monotonic() + 120 + args.frames / args.rate
            while procs["publisher"].poll() is None and time.monotonic() < end:
                ledger.note([p.pid for p in procs.values() if p.poll() is None])
                time.sleep(0.5)
            if procs["publisher"].poll() is None:
                problem = "publisher did not finish"
            elif listen:
                time.sleep(_DIAGNOSTICS_SETTLE_S)  # the node's /diagnostics after the last frame
        finally:
            rcs = stop_all(procs, grace_s=20.0)
        out: dict[str, Any] = dict(cell)
        try:
            pub = json.loads((tmp / "publisher.json").read_text())
            got = json.loads((tmp / f"{receiver}.json").read_text())
        except (OSError, ValueError) as exc:
            problem = problem or f"no result ({exc}); exit codes {rcs}"
        if listen:
            try:
                out["node_diagnostics"] = json.loads((tmp / "listen.json").read_text())["diagnostics"]
            except (OSError, ValueError, KeyError) as exc:
                out["node_diagnostics"] = {"error": f"no result from the listener ({exc}): "
                                                    + (tmp / "listen.log").read_text(errors="replace")[-600:]}
        if problem or not pub.get("matched"):
            tails = {r: (tmp / f"{r}.log").read_text(errors="replace")[-600:] for r in procs}
            return {**out, "error": problem or "the receiver never matched", "logs": tails}
    arrivals = got["bare"] if receiver == "measure" else got["arrivals"]
    latencies = [(int(t) - int(stamp)) / 1e6 for stamp, t in arrivals.items()]
    received = len(arrivals) if receiver == "measure" else int(got["counters"].get("frames_in", 0))
    out.update(published=pub["published"], received=received,
               delivery=round(received / max(pub["published"], 1), 4), publisher_late=pub["late"],
               latency_ms={"p50": _pct(latencies, 50), "p95": _pct(latencies, 95)})
    if receiver == "node":
        out["node_counters"] = got["counters"]
    return out


def plan(args: argparse.Namespace, netns_ok: bool) -> list[dict[str, Any]]:
    rels = ("best_effort",) if args.quick else RELIABILITIES
    cells = [{"setup": "localhost", "size": size, "reliability": rel, "profile": prof, "receiver": rcv}
             for size in args.sizes for rel in rels for prof in PROFILES for rcv in args.receivers]
    if netns_ok:
        cells += [{"setup": "stock_netns", "size": size, "reliability": "best_effort", "profile": prof,
                   "receiver": rcv} for size in args.sizes for prof in PROFILES for rcv in args.receivers]
    return cells


def orchestrate(args: argparse.Namespace) -> int:
    base = dict(os.environ)
    netns_problem = LoopbackNetns.unavailable()
    cells = plan(args, not netns_problem)
    domain = int(base.get("ROS_DOMAIN_ID") or 1 + os.getpid() % 200)
    ledger = ShmLedger()
    results: list[dict[str, Any]] = []
    netns_links: list[str] = []
    load_before = os.getloadavg()
    for index, cell in enumerate(cells):
        stock = cell["setup"] == "stock_netns"
        env = cell_env(base, profile=cell["profile"], reliability=cell["reliability"], stock=stock,
                       domain=domain)
        if stock:
            with LoopbackNetns(f"dla_bench_{os.getpid()}") as ns:
                netns_links = ns.links()
                result = run_cell(cell, args, env, ns.prefix, ledger)
        else:
            result = run_cell(cell, args, env, [], ledger)
        result["shm_files_removed"] = len(ledger.clean())
        result["domain"] = domain
        results.append(result)
        shown = (f"{result['received']}/{result['published']} p50 {result['latency_ms']['p50']} ms"
                 if "error" not in result else f"ERROR {result['error']}")
        print(f"[{index + 1}/{len(cells)}] {cell['setup']} {cell['size']} {cell['reliability']} "
              f"{cell['profile']} {cell['receiver']}: {shown}", flush=True)
    doc = {
        "benchmark": "raw rgb8 frames between two processes over Fast DDS",
        "frames_per_cell": args.frames, "rate_hz": args.rate, "quick": args.quick,
        "publisher_qos": "keep last 5", "receiver_qos": "keep last 1",
        "profile_file": str(PROFILE.relative_to(REPO)),
        "stock_netns": {"available": not netns_problem, "why_not": netns_problem, "links": netns_links},
        "cells": results,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                    "python": platform.python_version(),
                    "load_avg_before": [round(x, 2) for x in load_before],
                    "load_avg_after": [round(x, 2) for x in os.getloadavg()]},
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(markdown_table(doc))
    print(f"bench_transport: wrote {args.out}")
    return 1 if any("error" in r for r in results) else 0


def _receiver_role(role: str, args: argparse.Namespace) -> int:
    from dla_infer_node.ros.node import has_events_executor  # loads rclpy: receiver processes only

    role_args = argparse.Namespace(result=args.result, ready=args.ready, bare="raw", executor="single",
                                   peer_executor="events" if has_events_executor() else "single")
    return ROLES[role](role_args)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench_transport", description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("bench/results/transport.json"))
    ap.add_argument("--quick", action="store_true", help="30 frames per cell, best effort only")
    ap.add_argument("--frames", type=int, default=None, help="frames per cell (default 90; --quick: 30)")
    ap.add_argument("--rate", type=float, default=30.0, help="frames per second")
    ap.add_argument("--sizes", nargs="+", choices=tuple(SIZES), default=list(SIZES), help="frame sizes")
    ap.add_argument("--receivers", nargs="+", choices=RECEIVERS, default=list(RECEIVERS),
                    help="bare rclpy subscriber and/or the node")
    ap.add_argument("--role", choices=("orchestrate", "publisher", "measure", "node", "listen"),
                    default="orchestrate",
                    help=argparse.SUPPRESS)
    ap.add_argument("--size", choices=tuple(SIZES), default="VGA", help=argparse.SUPPRESS)
    ap.add_argument("--warmup", type=float, default=1.0, help=argparse.SUPPRESS)
    ap.add_argument("--tail", type=float, default=1.5, help=argparse.SUPPRESS)
    ap.add_argument("--result", default="", help=argparse.SUPPRESS)
    ap.add_argument("--ready", default="", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.frames is None:
        args.frames = 30 if args.quick else 90
    if args.role == "publisher":
        return role_publisher(args)
    if args.role != "orchestrate":
        return _receiver_role(args.role, args)
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # a stopped run still stops its children
    return orchestrate(args)


if __name__ == "__main__":
    sys.exit(main())

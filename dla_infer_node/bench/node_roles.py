"""The four processes of the node benchmark (``dla_infer_node.bench.node``), one function per role.

Each runs in its own process, started by the orchestrator as ``python -m dla_infer_node.bench.node --role
ROLE``: the publisher of the 1920x1080 stream, the bare subscriber (``measure``), the downstream consumer of
the node's output (``listen``) and the real node with a zero-cost backend (``node``). Every role writes its
figures to ``--result``; the bare subscriber and the listener also create ``--ready`` when they are in place.
Why the roles are what they are is in ``bench_node``'s module docstring.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from dla_infer_node.bench.cpu_probe import CpuSampler, StageClock
from dla_infer_node.core.backend import RawOutputs
from dla_infer_node.core.cdr_image import parse_image
from dla_infer_node.core.model_meta import parse_metadata
from dla_infer_node.core.pipeline import Detector
from dla_infer_node.core.preprocess import Letterbox
from dla_infer_node.core.stop_signals import stop_on_signals
from dla_infer_node.ros.frame_memory import keep_frame_buffers

NS = "/bench"
FRAME_COUNTERS = ("frames_in", "frames_processed", "frames_dropped", "frames_bad_input", "frames_failed")
W, H = 1920, 1080
PEERS = ("measure", "listen")  # instruments: the node is what is measured


def zero_cost_backend() -> tuple[Any, Any]:
    """A backend that returns a constant, all-negative 1x1 raw head at once: no boxes, no inference."""
    meta = parse_metadata({
        "name": "zero_cost",
        "input": {"name": "images", "width": 32, "height": 32},
        "decoder": {"kind": "yolov5_raw", "num_classes": 1, "strides": [32], "anchors": [[16, 16]]},
        "outputs": [{"name": "head0", "shape": [1, 6, 1, 1]}], "classes": ["thing"]},
        Path("zero_cost.meta.yaml"))
    head = np.full((1, 6, 1, 1), -20.0, np.float32)

    class ZeroCost:
        name = "zero_cost"

        def infer(self, image: np.ndarray, encoding: str) -> RawOutputs:
            return RawOutputs([head], Letterbox.fit(image.shape[1], image.shape[0], 32, 32))

        def close(self) -> None:
            pass

    return ZeroCost(), meta


def _stamp_ns(sec: int, nanosec: int) -> int:
    return int(sec) * 1_000_000_000 + int(nanosec)


def _note_arrival(times: dict[int, int], raw: bytes) -> None:
    """At callback entry: the wall time now, keyed by the serialized frame's header stamp."""
    t = time.time_ns()
    h = parse_image(raw).header
    times[_stamp_ns(h.sec, h.nanosec)] = t


def _qos() -> Any:
    from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy

    rel = ReliabilityPolicy.RELIABLE if os.environ.get("BENCH_RELIABILITY") == "reliable" \
        else ReliabilityPolicy.BEST_EFFORT
    return QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=1, reliability=rel)


def _ros(name: str) -> tuple[Any, Any, threading.Event]:
    import rclpy
    from rclpy.signals import SignalHandlerOptions

    stop = threading.Event()
    keep_frame_buffers()  # as the node's process does: the bare subscriber is compared on equal terms
    rclpy.init(args=[name], signal_handler_options=SignalHandlerOptions.NO)
    stop_on_signals(stop)  # for the life of the role process
    return rclpy, rclpy.create_node(name), stop


def role_publisher(args: argparse.Namespace) -> int:
    from sensor_msgs.msg import Image

    rclpy, node, stop = _ros("bench_publisher")
    pub = node.create_publisher(Image, f"{NS}/image", _qos())
    msg = Image()
    msg.height, msg.width, msg.encoding, msg.step, msg.header.frame_id = H, W, "rgb8", W * 3, "bench"
    msg.data = np.random.default_rng(0).integers(0, 256, H * W * 3, dtype=np.uint8).tobytes()
    deadline = time.monotonic() + 60
    while pub.get_subscription_count() < 2 and time.monotonic() < deadline and not stop.is_set():
        time.sleep(0.05)
    stop.wait(args.warmup)
    sent, period = 0, 1.0 / args.rate
    t0 = time.monotonic()
    while not stop.is_set() and time.monotonic() - t0 < args.duration:
        now = time.time_ns()
        msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(now, 1_000_000_000)
        pub.publish(msg)
        sent += 1
        stop.wait(max(0.0, t0 + sent * period - time.monotonic()))
    Path(args.result).write_text(json.dumps({"published": sent, "seconds": time.monotonic() - t0}))
    node.destroy_node()
    rclpy.shutdown()
    return 0


def _key(msg: Any) -> int:
    return _stamp_ns(msg.header.stamp.sec, msg.header.stamp.nanosec)


def _spin_then_save(rclpy: Any, node: Any, stop: threading.Event, args: argparse.Namespace,
                    doc: dict[str, Any], ready: Callable[[], bool],
                    sampler: CpuSampler | None = None) -> int:
    """Spin until stopped, then save ``doc``; ``args.ready`` is created once ``ready()`` first holds.

    The executor spins on the main thread, as in the node (a frame's bytes are allocated by the thread that
    takes it, and glibc gives a secondary thread's arena back to the kernel after each 6 MB frame: an
    executor on another thread measured 9-10 ms of system time per frame, the main thread's a fraction).
    A second thread saves the result as soon as the stop comes, before any rclpy teardown: these roles are
    measuring instruments, and their figures must not depend on how rclpy's executor and context wind
    down (the orchestrator reports a role that hangs after saving).
    """
    # ros.node loads rclpy: only the role processes need it, not the orchestrator
    from dla_infer_node.ros.node import executor_factory, shutdown_executor

    executor = executor_factory(args.peer_executor)()
    executor.add_node(node)

    def save_on_stop() -> None:
        stop.wait()
        # dict() copies each table in one C call, so a callback still running on the executor cannot change
        # it while it is being written out
        saved: dict[str, Any] = {key: dict(table) for key, table in doc.items()}
        if sampler is not None:
            saved["cpu_samples"] = sampler.stop()
        Path(args.result).write_text(json.dumps(saved))

    saver = threading.Thread(target=save_on_stop, name="bench-save", daemon=True)
    saver.start()
    if sampler is not None:
        sampler.start()
    announced = False
    while not stop.is_set():
        executor.spin_once(timeout_sec=0.05)
        if not announced and ready():
            Path(args.ready).touch()
            announced = True
    saver.join(10.0)
    shutdown_executor(executor)  # reverse order of creation: executor, node, context
    node.destroy_node()
    rclpy.shutdown()
    return 0


def role_measure(args: argparse.Namespace) -> int:
    """The bare subscriber: notes when each frame arrives, nothing else."""
    from sensor_msgs.msg import Image

    rclpy, node, stop = _ros("bench_measure")
    bare: dict[int, int] = {}
    if args.bare == "raw":
        node.create_subscription(Image, f"{NS}/image", lambda raw: _note_arrival(bare, raw), _qos(), raw=True)
    else:
        node.create_subscription(Image, f"{NS}/image", lambda m: bare.__setitem__(_key(m), time.time_ns()),
                                 _qos())
    return _spin_then_save(rclpy, node, stop, args, {"bare": bare}, ready=lambda: True,
                           sampler=CpuSampler(lambda: len(bare)))


def role_listen(args: argparse.Namespace) -> int:
    """A downstream consumer of the node's output: notes when each detection array arrives."""
    from diagnostic_msgs.msg import DiagnosticArray
    from vision_msgs.msg import Detection2DArray

    rclpy, node, stop = _ros("bench_listen")
    dets: dict[int, int] = {}
    diag: dict[str, str] = {}

    def on_diag(msg: Any) -> None:
        for st in msg.status:
            if st.name.startswith(f"{NS}/dla_infer_node:"):
                diag.update({kv.key: kv.value for kv in st.values})

    node.create_subscription(Detection2DArray, f"{NS}/detections",
                             lambda m: dets.__setitem__(_key(m), time.time_ns()), 50)
    node.create_subscription(DiagnosticArray, "/diagnostics", on_diag, 10)
    # ready once the node's detections publisher is in the graph: frames sent before would go unanswered here
    return _spin_then_save(rclpy, node, stop, args, {"detections": dets, "diagnostics": diag},
                           ready=lambda: node.count_publishers(f"{NS}/detections") > 0)


def _time_stages(clock: StageClock) -> None:
    """Wrap the node's per-frame steps in ``clock`` (class attributes, before the node exists): the
    worker's header parse + pixel view, the detector (backend, then decode), publishing, the cuDLA
    backend's unpacking of each output tensor; and, at the first frame, the backend's own steps where it
    has them (the cuDLA backend's input upload and its wait for the stream)."""
    # these load rclpy: only the node role's process needs them, not the orchestrator
    from dla_infer_node.backends import cudla
    from dla_infer_node.ros.inference import FrameInference
    from dla_infer_node.ros.outputs import DetectionOutputs

    cudla.unpack = clock.wrap("backend_unpack", cudla.unpack)  # once per output tensor

    FrameInference._frame = clock.wrap("header_parse_view", FrameInference._frame)  # type: ignore[method-assign]
    DetectionOutputs.publish = clock.wrap("publish", DetectionOutputs.publish)  # type: ignore[method-assign]
    start = Detector.start
    wrapped: list[bool] = []

    def start_timing_backend(self: Any, image: np.ndarray, encoding: str) -> Any:
        if not wrapped:
            wrapped.append(True)
            backend = self.backend
            # a pipelined backend (cuDLA) takes a frame in two halves, the others in one call
            if hasattr(backend, "submit"):
                backend.submit = clock.wrap("backend_submit", backend.submit)
                backend.collect = clock.wrap("backend_collect", backend.collect)
                for buffers in getattr(backend, "_sets", ()):
                    buffers.done.synchronize = clock.wrap("backend_wait", buffers.done.synchronize)
            else:
                backend.infer = clock.wrap("backend_submit", backend.infer)
            if getattr(backend, "_input", None) is not None:
                backend._input.enqueue = clock.wrap("backend_copy_to_gpu", backend._input.enqueue)
        return start(self, image, encoding)

    Detector.start = clock.wrap("detect_start", start_timing_backend)  # type: ignore[method-assign]
    Detector.finish = clock.wrap("detect_finish", Detector.finish)  # type: ignore[method-assign]


# The DLA EMULATOR's host-function thread (the CUDA driver's thread that runs its task functions, named so
# by the emulator, and any thread it started): it exists only because the emulator stands in for the DLA
# (cuDLA's hybrid mode on a Jetson runs no host function per task), so its CPU is not the node's.
EMULATOR_THREADS = ("dla-emu-host",)
EMULATOR_EXCLUDED_WHY = (
    "left out of the node's CPU: the DLA EMULATOR's host-function thread (the CUDA driver's thread that runs "
    "the emulator's task functions: waiting for each task's copies, the task program, the hold on its core) "
    "and the task programs' CPU on the node's own threads; on a Jetson that work is the DLA's, and cuDLA's "
    "hybrid mode runs no host function per task")


def emulated_dla_cpu_s() -> float:
    """CPU seconds the DLA EMULATOR's task programs took on the threads that submitted them (0 without the
    emulator, and with a CUDA driver that runs host functions on its own thread, whose CPU is left out
    whole as ``EMULATOR_THREADS``): on a Jetson that work is the DLA's, so the benchmark leaves it out of
    the node's CPU per frame."""
    try:
        fn = ctypes.CDLL(None).dlaEmuInlineHostCpuNs
    except (AttributeError, OSError):
        return 0.0
    fn.restype = ctypes.c_uint64
    return float(fn()) / 1e9


def role_node(args: argparse.Namespace) -> int:
    # ros.node loads rclpy: only the role processes need it, not the orchestrator
    from dla_infer_node.ros import node as node_module
    from dla_infer_node.ros.parts import DetectorParts

    arrivals: dict[int, int] = {}
    instance: list[Any] = []
    on_image = DetectorParts._on_image
    clock = StageClock()
    sampler = CpuSampler(lambda: len(arrivals), excluded=emulated_dla_cpu_s,
                         excluded_threads=EMULATOR_THREADS)

    def on_image_noting_arrival(self: Any, raw: bytes) -> None:
        _note_arrival(arrivals, raw)  # exactly what the bare subscriber does, at the same point
        if not instance:
            instance.append(self)
            sampler.start()
        on_image(self, raw)

    _time_stages(clock)
    DetectorParts._on_image = clock.wrap("callback", on_image_noting_arrival)  # type: ignore[method-assign]
    reliability = os.environ.get("BENCH_RELIABILITY", "best_effort")
    node_params = getattr(args, "node_param", [])  # bench.transport's receiver role passes none
    rc = node_module.main(["bench_node", "--ros-args", "-r", f"__ns:={NS}", "-p", "diagnostics_period:=1.0",
                           "-p", f"qos_reliability:={reliability}", "-p", f"executor:={args.executor}",
                           *(x for p in node_params for x in ("-p", p))],
                          injected=zero_cost_backend() if not node_params else None)
    samples = sampler.stop() if instance else []
    # counters after the node stopped (worker joined): final, unlike the last /diagnostics the listener saw
    final = {k: v for k, v in instance[0].counters().items() if k in FRAME_COUNTERS} if instance else {}
    Path(args.result).write_text(json.dumps({"arrivals": arrivals, "counters": final, "cpu_samples": samples,
                                             "stages": clock.snapshot()}))
    return rc


ROLES: dict[str, Callable[[argparse.Namespace], int]] = {
    "publisher": role_publisher, "measure": role_measure, "listen": role_listen, "node": role_node}

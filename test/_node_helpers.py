"""Helpers for the node tests over real DDS.

- an *oracle* model: a tiny ONNX whose raw YOLOv5 head is a constant, so the node's output for any
  128x128 frame is known exactly (two boxes, two classes, known scores) — geometry, class names and live
  thresholds can be checked without a trained model;
- :class:`NodeRunner`: the node as a separate process (``python -m dla_infer_node.ros.node --ros-args ...``),
  stopped with a signal, exit code and output read back;
- :class:`RosProbe`: the test's own rclpy node (own context) to publish frames and collect outputs.
"""

from __future__ import annotations

import itertools
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent

# ---- oracle model -----------------------------------------------------------------------------------
ORACLE_NET = 64                 # network input 64x64, one stride-32 head (2x2 grid), one anchor
ORACLE_ANCHOR = (20.0, 10.0)
ORACLE_CLASSES = ("alpha", "beta")
ORACLE_SOURCE = 128             # frames of 128x128: letterbox scale 0.5, no padding


def _sig(x: float) -> float:
    return float(1.0 / (1.0 + np.exp(-x)))


# (grid x, grid y, objectness logit, class index, class logit)
_ORACLE_CELLS = ((1, 0, 3.0, 1, 3.0), (0, 1, 1.0, 0, 2.0))


def oracle_expected() -> list[tuple[str, float, tuple[float, float, float, float]]]:
    """(class name, score, xyxy in source pixels), highest score first, from the decode formulas."""
    out = []
    scale = ORACLE_NET / ORACLE_SOURCE
    for gx, gy, obj, cls, logit in _ORACLE_CELLS:
        cx, cy = (0.5 * 2 - 0.5 + gx) * 32, (0.5 * 2 - 0.5 + gy) * 32  # raw 0 -> sigmoid 0.5
        w, h = (0.5 * 2) ** 2 * ORACLE_ANCHOR[0], (0.5 * 2) ** 2 * ORACLE_ANCHOR[1]
        box = ((cx - w / 2) / scale, (cy - h / 2) / scale, (cx + w / 2) / scale, (cy + h / 2) / scale)
        out.append((ORACLE_CLASSES[cls], _sig(obj) * _sig(logit), box))
    return sorted(out, key=lambda d: -d[1])


def write_oracle_model(folder: Path) -> tuple[Path, Path]:
    """oracle.onnx + oracle.meta.yaml in ``folder``; returns (model, metadata)."""
    import onnx
    import yaml
    from onnx import TensorProto, helper, numpy_helper

    nc = len(ORACLE_CLASSES)
    head = np.full((1, 5 + nc, 2, 2), -12.0, np.float32)
    head[0, 0:4] = 0.0
    for gx, gy, obj, cls, logit in _ORACLE_CELLS:
        head[0, 4, gy, gx] = obj
        head[0, 5 + cls, gy, gx] = logit
    nodes = [
        # 0 * mean(input) keeps the graph a function of its input (ORT rejects no inputs, warns on unused)
        helper.make_node("ReduceMean", ["images"], ["m"], keepdims=1),
        helper.make_node("Mul", ["m", "zero"], ["z"]),
        helper.make_node("Add", ["z", "const"], ["head0"]),
    ]
    graph = helper.make_graph(
        nodes, "oracle",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, ORACLE_NET, ORACLE_NET])],
        [helper.make_tensor_value_info("head0", TensorProto.FLOAT, [1, 5 + nc, 2, 2])],
        [numpy_helper.from_array(head, "const"), numpy_helper.from_array(np.zeros(1, np.float32), "zero")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    folder.mkdir(parents=True, exist_ok=True)
    onnx_path, meta_path = folder / "oracle.onnx", folder / "oracle.meta.yaml"
    onnx.save(model, str(onnx_path))
    meta = {
        "name": "oracle", "onnx": "oracle.onnx",
        "input": {"name": "images", "width": ORACLE_NET, "height": ORACLE_NET, "channel_order": "rgb",
                  "mean": [0, 0, 0], "std": [255, 255, 255], "pad_value": 114},
        "decoder": {"kind": "yolov5_raw", "num_classes": nc, "strides": [32],
                    "anchors": [list(ORACLE_ANCHOR)]},
        "outputs": [{"name": "head0", "shape": [1, 5 + nc, 2, 2]}],
        "classes": list(ORACLE_CLASSES),
    }
    meta_path.write_text(yaml.safe_dump(meta, sort_keys=False))
    return onnx_path, meta_path


def replay_until_settled(bag: Path, remap: str, recorder: Any, env: Mapping[str, str], quiet_s: float = 3.0,
                         ) -> subprocess.CompletedProcess[str]:
    """Replay ``bag`` (``bags.replay`` at half rate, ``remap`` FROM:=TO, once a subscriber is there) in its
    own process, then wait until ``recorder`` has taken nothing new for ``quiet_s`` seconds."""
    replay = subprocess.run(
        [sys.executable, "-m", "dla_infer_node.bags.replay", str(bag), "--rate", "0.5", "--remap", remap,
         "--wait-subscribers", "1", "--wait-timeout", "90", "--no-progress"],
        env=dict(env), capture_output=True, text=True, timeout=300)
    last, stable_since = -1, time.monotonic()
    while time.monotonic() - stable_since < quiet_s:  # until no more messages arrive
        n = len(recorder.snapshot())
        if n != last:
            last, stable_since = n, time.monotonic()
        time.sleep(0.1)
    return replay


def iou(a: tuple[float, ...] | np.ndarray, b: tuple[float, ...] | np.ndarray) -> float:
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return float(inter / union) if union > 0 else 0.0


# ---- node process -----------------------------------------------------------------------------------
def ros_value(value: Any) -> str:
    """A -p value as rcl parses it (YAML): strings quoted so '0.5' or 'true' stay strings."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(ros_value(v) for v in value) + "]"
    return "'" + str(value).replace("'", "''") + "'"


class NodeProcess:
    def __init__(self, proc: subprocess.Popen[bytes], log: Path, namespace: str) -> None:
        self.proc, self.log, self.namespace = proc, log, namespace

    @property
    def fqn(self) -> str:
        return f"{self.namespace}/dla_infer_node"

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def wait_exit(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise AssertionError(f"node did not exit within {timeout} s; output:\n{self.output()}") from None

    def stop(self, sig: int = signal.SIGINT, timeout: float = 30.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.wait_exit(timeout)


class NodeRunner:
    _ids = itertools.count()

    def __init__(self, folder: Path, env: Mapping[str, str]) -> None:
        self.folder, self.env = folder, dict(env)
        self.procs: list[NodeProcess] = []

    def start(self, params: Mapping[str, Any], *, namespace: str | None = None,
              remaps: Mapping[str, str] | None = None, module: str = "dla_infer_node.ros.node",
              extra_args: tuple[str, ...] = ()) -> NodeProcess:
        n = next(self._ids)
        ns = namespace or f"/t{os.getpid()}_{n}"
        cmd = [sys.executable, "-m", module, *extra_args, "--ros-args", "-r", f"__ns:={ns}"]
        for key, value in params.items():
            cmd += ["-p", f"{key}:={ros_value(value)}"]
        for src, dst in (remaps or {}).items():
            cmd += ["-r", f"{src}:={dst}"]
        log = self.folder / f"node{n}.log"
        with open(log, "wb") as fh:  # a file, not a pipe: a chatty node can never block on a full pipe
            proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=self.env, cwd=REPO)
        np_ = NodeProcess(proc, log, ns)
        self.procs.append(np_)
        return np_

    def run_to_exit(self, params: Mapping[str, Any], timeout: float = 60.0) -> tuple[int, str]:
        p = self.start(params)
        rc = p.wait_exit(timeout)
        return rc, p.output()

    def cleanup(self) -> None:
        for p in self.procs:  # only processes this runner started, by their own handle
            if p.proc.poll() is None:
                p.proc.send_signal(signal.SIGINT)
                try:
                    p.proc.wait(15)
                except subprocess.TimeoutExpired:
                    p.proc.kill()
                    p.proc.wait(10)


# ---- test-side ROS node ---------------------------------------------------------------------------
class RosProbe:
    """The test's rclpy node in its own context; spin explicitly with :meth:`spin_until`."""

    def __init__(self, name: str = "probe") -> None:
        import rclpy
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.signals import SignalHandlerOptions

        self.rclpy = rclpy
        self.context = rclpy.Context()
        rclpy.init(context=self.context, signal_handler_options=SignalHandlerOptions.NO)
        self.node = rclpy.create_node(f"{name}_{os.getpid()}", context=self.context)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)

    def qos(self, reliable: bool = True, depth: int = 10, transient_local: bool = False) -> Any:
        from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

        rel = ReliabilityPolicy.RELIABLE if reliable else ReliabilityPolicy.BEST_EFFORT
        return QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=depth, reliability=rel,
                          durability=DurabilityPolicy.TRANSIENT_LOCAL if transient_local
                          else DurabilityPolicy.VOLATILE)

    def collect(self, msg_type: Any, topic: str, qos: Any = None) -> list[Any]:
        box: list[Any] = []
        self.node.create_subscription(msg_type, topic, box.append, qos or self.qos())
        return box

    def spin_until(self, pred: Callable[[], Any], timeout: float, every: Callable[[], None] | None = None,
                   period: float = 1.0) -> Any:
        """Spin until ``pred()`` is truthy (returned) or timeout (returns the last falsy value).
        ``every`` runs at once and then each ``period`` seconds (e.g. re-publish on best-effort links)."""
        deadline = time.monotonic() + timeout
        next_every = time.monotonic()
        result = pred()
        while not result and time.monotonic() < deadline:
            if every is not None and time.monotonic() >= next_every:
                every()
                next_every = time.monotonic() + period
            self.executor.spin_once(timeout_sec=0.05)
            result = pred()
        return result

    def call(self, srv_type: Any, name: str, request: Any, timeout: float = 20.0) -> Any:
        client: Any = self.node.create_client(srv_type, name)
        try:
            assert client.wait_for_service(timeout_sec=timeout), f"service {name} not available"
            future = client.call_async(request)
            self.spin_until(future.done, timeout)
            assert future.done(), f"no answer from {name}"
            return future.result()
        finally:
            self.node.destroy_client(client)

    def set_parameters(self, node_fqn: str, values: Mapping[str, Any]) -> list[Any]:
        """SetParameters on another node; returns the SetParametersResult list (successful, reason)."""
        from rcl_interfaces.srv import SetParameters
        from rclpy.parameter import Parameter

        req = SetParameters.Request()
        req.parameters = [Parameter(k, value=v).to_parameter_msg() for k, v in values.items()]
        return list(self.call(SetParameters, f"{node_fqn}/set_parameters", req).results)

    def close(self) -> None:
        self.executor.shutdown()
        self.node.destroy_node()
        self.rclpy.try_shutdown(context=self.context) if hasattr(self.rclpy, "try_shutdown") \
            else self.rclpy.shutdown(context=self.context)


def start_cameras(folder: Path, env: Mapping[str, str], namespace: str, rates: Mapping[str, float],
                  seconds: float, seeds: Mapping[str, int] | None = None, width: int = 320, height: int = 240,
                  ) -> dict[str, subprocess.Popen[bytes]]:
    """One camera process per camera of ``rates`` (``bench.camera_roles camera``, started once a
    subscriber matched) on ``<namespace>/<camera>/image``: the generated scene of its seed (default 1, 2,
    ... in camera order), ``width`` x ``height`` rgb8 at its rate, best effort, for ``seconds``; its output
    in ``<folder>/<camera>.log``, what it published in ``<folder>/<camera>.json``."""
    seeds = seeds or {camera: seed for seed, camera in enumerate(rates, start=1)}
    procs = {}
    for camera, rate in rates.items():
        with open(folder / f"{camera}.log", "wb") as log:
            procs[camera] = subprocess.Popen(
                [sys.executable, "-m", "dla_infer_node.bench.camera_roles", "camera",
                 "--topic", f"{namespace}/{camera}/image", "--width", str(width), "--height", str(height),
                 "--rate", str(rate), "--duration", str(seconds), "--seed", str(seeds[camera]),
                 "--result", str(folder / f"{camera}.json")],
                env=dict(env), cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    return procs


def end_cameras(procs: Mapping[str, subprocess.Popen[bytes]]) -> None:
    """Kill the camera processes of :func:`start_cameras` still running (only those, by their handle)."""
    for p in procs.values():
        if p.poll() is None:
            p.kill()
        p.wait(10)


def statuses_by_name(diagnostics: list[Any]) -> dict[str, dict[str, str]]:
    """name -> key/values of every status in collected DiagnosticArrays (the latest of each name)."""
    return {s.name: {kv.key: kv.value for kv in s.values} for m in diagnostics for s in m.status}


def image_msg(image: np.ndarray, encoding: str, sec: int, frame_id: str = "cam", pad: int = 0) -> Any:
    """A sensor_msgs/Image of ``image`` (already in ``encoding``'s channel order), rows padded by ``pad``."""
    from sensor_msgs.msg import Image

    h, w = image.shape[:2]
    c = 1 if image.ndim == 2 else image.shape[2]
    rows = np.zeros((h, w * c + pad), np.uint8)
    rows[:, : w * c] = image.reshape(h, w * c)
    msg = Image()
    msg.header.stamp.sec, msg.header.stamp.nanosec, msg.header.frame_id = sec, 123, frame_id
    msg.height, msg.width, msg.encoding, msg.is_bigendian, msg.step = h, w, encoding, 0, w * c + pad
    msg.data = rows.tobytes()
    return msg


def compressed_msg(data: bytes, sec: int, fmt: str = "jpeg", frame_id: str = "cam") -> Any:
    from sensor_msgs.msg import CompressedImage

    msg = CompressedImage()
    msg.header.stamp.sec, msg.header.stamp.nanosec, msg.header.frame_id = sec, 456, frame_id
    msg.format = fmt
    msg.data = data
    return msg


def diag_values(arrays: list[Any], fqn: str) -> dict[str, str]:
    """The latest key/values of this node's detector status seen in collected DiagnosticArrays."""
    for arr in reversed(arrays):
        for st in arr.status:
            if st.name.startswith(fqn + ":"):
                return {kv.key: kv.value for kv in st.values}
    return {}


def readme_command(section: str, prefix: str = ".venv/bin/dla_infer_node ") -> list[str]:
    """The one command line of README.md's ``## <section>`` that starts with ``prefix``, split as a shell
    would: tests read their commands from the README, so text and test cannot drift apart."""
    readme = (REPO / "README.md").read_text()
    found = re.search(rf"^## {re.escape(section)}\n(.*?)(?=^## )", readme, flags=re.S | re.M)
    assert found, f"README.md has no '## {section}' section"
    lines = [ln for ln in found.group(1).splitlines() if ln.startswith(prefix)]
    assert len(lines) == 1, f"expected one `{prefix.strip()}` command, found {lines}"
    return shlex.split(lines[0])


def as_sourced_ros(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with ROS_DISTRO as a sourced install of this venv's ROS 2 would set it: the README recipes
    pick the Fast DDS profile variable by it. The project's Kilted venv leaves it unset (as the README
    says, and the recipes' default then is Kilted's name); the Jazzy CI venv stands for a sourced Jazzy."""
    from dla_infer_node.ros import launch_args  # here: core tests import this module without ROS

    out = {k: v for k, v in env.items() if k != "ROS_DISTRO"}
    if launch_args.profile_env_names(out) != (launch_args.DDS_PROFILE_ENV,):
        out["ROS_DISTRO"] = "jazzy"
    return out

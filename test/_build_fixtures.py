"""Inputs for the compile tests that the other build steps will make for real: a TensorRT calibration cache
(10.x line), an fp16-typed ONNX and a Q/DQ ONNX (11.4.1+ line), derived from the shipped model by plain graph
edits. They are what the fake trtexec and the sidecar writer read (types, QuantizeLinear, scales), not
accuracy-tested models: ``dla_build calibrate`` / ``convert`` produce the real ones."""

from __future__ import annotations

import os
import struct
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
MODEL = REPO / "models" / "shapes_yolo.onnx"
FAKES = REPO / "test" / "fake_trtexec"
IN_SCALE = 1.0 / 127.0


def fake_env(version: str) -> dict[str, str]:
    """Environment with the fake trtexec of ``version`` (10.3, 11.4.1, 11.2) first on PATH."""
    return dict(os.environ, PATH=f"{FAKES / ('trt-' + version)}{os.pathsep}{os.environ['PATH']}",
                FAKE_TRTEXEC_PYTHON=sys.executable, PYTHONPATH=str(REPO))


def write_cache(path: Path, scales: dict[str, float]) -> Path:
    lines = ["TRT-100300-EntropyCalibration2"]
    lines += [f"{k}: {struct.pack('>f', v).hex()}" for k, v in scales.items()]
    path.write_text("\n".join(lines) + "\n", encoding="ascii")
    return path


def _copy_meta(dst_model: Path) -> None:
    stem = dst_model.name.split(".")[0]
    for suffix in (".meta.yaml", ".labels.txt"):
        src = MODEL.with_name("shapes_yolo" + suffix)
        (dst_model.parent / (stem + suffix)).write_bytes(src.read_bytes())


def copy_model(folder: Path) -> Path:
    dst = folder / "shapes_yolo.onnx"
    dst.write_bytes(MODEL.read_bytes())
    _copy_meta(dst)
    return dst


def write_fp16(folder: Path) -> Path:
    import onnx
    from onnx import TensorProto, numpy_helper

    m = onnx.load(str(MODEL))
    for i, t in enumerate(m.graph.initializer):
        if t.data_type == TensorProto.FLOAT:
            m.graph.initializer[i].CopyFrom(numpy_helper.from_array(
                numpy_helper.to_array(t).astype(np.float16), t.name))
    for v in (*m.graph.input, *m.graph.output):
        v.type.tensor_type.elem_type = TensorProto.FLOAT16
    dst = folder / "shapes_yolo.fp16.onnx"
    onnx.save(m, str(dst))
    _copy_meta(dst)
    return dst


def write_qdq(folder: Path, name: str = "shapes_yolo.qdq.onnx", zero_point: np.ndarray | None = None) -> Path:
    """Q/DQ on the image input (symmetric int8, zero point 0 unless given): consumers read the dequantized
    tensor."""
    import onnx
    from onnx import helper, numpy_helper

    m = onnx.load(str(MODEL))
    src = m.graph.input[0].name
    for node in m.graph.node:
        for i, x in enumerate(node.input):
            if x == src:
                node.input[i] = f"{src}_dq"
    m.graph.initializer.extend([numpy_helper.from_array(np.array(IN_SCALE, np.float32), f"{src}_scale"),
                                numpy_helper.from_array(np.array(0, np.int8) if zero_point is None
                                                        else zero_point, f"{src}_zp")])
    q = helper.make_node("QuantizeLinear", [src, f"{src}_scale", f"{src}_zp"], [f"{src}_q"])
    dq = helper.make_node("DequantizeLinear", [f"{src}_q", f"{src}_scale", f"{src}_zp"], [f"{src}_dq"])
    m.graph.node.insert(0, dq)
    m.graph.node.insert(0, q)
    dst = folder / name
    onnx.save(m, str(dst))
    return dst

"""``dla_build trim``: the head is recognised, the cut graph runs in ONNX Runtime, and the raw decoder on the
trimmed graph gives the detections the final-output decoder gives on the untrimmed graph.

Graphs: a hand-built v8-style head and a YOLOv5 decode appended to the shipped raw-head model (both built
here with onnx.helper), plus the ultralytics exports in test/fixtures/yolo/ (YOLOv8n, YOLO11n, YOLOv5nu at
320, random weights), which are skipped only if that folder is absent.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import yaml
from _core_fixtures import make_metadata
from _yolo_graphs import REG_MAX, V8_H, V8_NAMES, V8_NC, V8_W, build_v5_final, build_v8_final

from dla_infer_node.core.decode import make_decoder
from dla_infer_node.core.detections import Detections
from dla_infer_node.core.model_meta import load_metadata
from dla_infer_node.core.preprocess import preprocess
from dla_infer_node.core.resources import default_model_metadata
from dla_infer_node.core.synth import generate_scene
from dla_infer_node.dla_build.build_cli import main as dla_build

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "test" / "fixtures" / "yolo"
REAL = ["yolov8n_320", "yolo11n_320", "yolov5nu_320"]


def run_onnx(path: Path, x: np.ndarray, outputs: list[str] | None = None) -> list[np.ndarray]:
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return [np.asarray(o) for o in sess.run(outputs, {sess.get_inputs()[0].name: x})]


def assert_same_detections(a: Detections, b: Detections) -> None:
    """Same set of detections: each box of ``a`` has one in ``b`` with the same class, box within 1e-3 px
    and score within 1e-5 (matched by box, so two near-equal scores may swap places)."""
    assert len(a) == len(b)
    used: set[int] = set()
    for box, score, cls in zip(a.boxes, a.scores, a.class_ids, strict=True):
        d = np.abs(b.boxes - box).max(axis=1)
        j = int(np.argmin(d))
        assert j not in used and d[j] < 1e-3, (box, b.boxes[j])
        assert b.class_ids[j] == cls and abs(float(b.scores[j]) - float(score)) < 1e-5
        used.add(j)


def trim_cli(model: Path, out: Path, *extra: str) -> None:
    assert dla_build(["trim", str(model), "--out", str(out), *extra]) == 0


def check_v8_equivalence(final: Path, trimmed: Path, x: np.ndarray, min_dets: int) -> None:
    meta = load_metadata(trimmed.with_name(trimmed.name.replace(".onnx", ".meta.yaml")))
    assert meta.decoder.kind == "yolov8_raw" and meta.decoder.reg_max == REG_MAX
    (y,) = run_onnx(final, x)
    raw = run_onnx(trimmed, x, [o.name for o in meta.outputs])
    final_meta = make_metadata("yolov8", num_classes=meta.decoder.num_classes, width=meta.input.width,
                               height=meta.input.height)
    for conf, iou, max_det in ((0.25, 0.45, 100), (0.001, 0.7, 300)):
        want = make_decoder(final_meta)([y], conf, iou, max_det)
        got = make_decoder(meta)(raw, conf, iou, max_det)
        assert len(want) >= (min_dets if conf == 0.25 else 1)
        assert_same_detections(want, got)


def test_trim_hand_built_v8(tmp_path: Path) -> None:
    final = tmp_path / "v8like.onnx"
    build_v8_final(final)
    trimmed = tmp_path / "v8like_trimmed.onnx"
    trim_cli(final, trimmed)
    meta = load_metadata(tmp_path / "v8like_trimmed.meta.yaml")
    assert [o.name for o in meta.outputs] == ["box_s8", "cls_s8", "box_s16", "cls_s16", "box_s32", "cls_s32"]
    assert meta.outputs[0].shape == (1, 64, V8_H // 8, V8_W // 8)
    assert meta.outputs[5].shape == (1, V8_NC, V8_H // 32, V8_W // 32)
    assert meta.decoder.strides == (8, 16, 32)
    assert meta.classes == tuple(V8_NAMES.values())  # from the ONNX metadata's dict text
    assert (meta.input.width, meta.input.height, meta.input.std) == (V8_W, V8_H, (255.0, 255.0, 255.0))
    ops = {n.op_type for n in __import__("onnx").load(str(trimmed)).graph.node}
    assert ops == {"Conv", "Relu"}  # the DFL, grids, Sigmoid and Concats are gone
    x = np.random.default_rng(3).uniform(0, 1, (1, 3, V8_H, V8_W)).astype(np.float32)
    check_v8_equivalence(final, trimmed, x, min_dets=3)


def test_trim_tells_box_from_class_conv_by_the_graph(tmp_path: Path) -> None:
    """64 classes = 4 * reg_max: both head convs of a level have 64 channels; the box conv is the one that
    feeds the DFL, and the trimmed model decodes exactly as the untrimmed one."""
    final = tmp_path / "v8wide.onnx"
    build_v8_final(final, nc=4 * REG_MAX)
    trimmed = tmp_path / "v8wide_trimmed.onnx"
    trim_cli(final, trimmed)
    meta = load_metadata(tmp_path / "v8wide_trimmed.meta.yaml")
    assert meta.decoder.num_classes == 4 * REG_MAX and len(meta.classes) == 4 * REG_MAX
    model = __import__("onnx").load(str(trimmed))
    producer = {o: n for n in model.graph.node for o in n.output}

    def conv_weight(tensor: str) -> str:  # through the renaming Identity to the head convolution
        node = producer[tensor]
        return node.input[1] if node.op_type == "Conv" else conv_weight(node.input[0])

    weights = [conv_weight(o.name) for o in model.graph.output]
    assert weights == [f"{kind}_w{i}" for i in range(3) for kind in ("box", "cls")]
    x = np.random.default_rng(3).uniform(0, 1, (1, 3, V8_H, V8_W)).astype(np.float32)
    check_v8_equivalence(final, trimmed, x, min_dets=1)


def test_trim_outputs_option_cuts_where_told(tmp_path: Path) -> None:
    final = tmp_path / "v8like.onnx"
    build_v8_final(final)
    out = tmp_path / "cut.onnx"
    trim_cli(final, out, "--outputs", "/head/box0,/head/cls0")
    sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    assert [o.name for o in sess.get_outputs()] == ["/head/box0", "/head/cls0"]
    x = np.zeros((1, 3, V8_H, V8_W), np.float32)
    (cls0,) = run_onnx(out, x, ["/head/cls0"])
    np.testing.assert_allclose(cls0, -2.0)  # zero input: ReLU(0)=0, so the class conv gives its bias


@pytest.mark.parametrize("argv, message", [
    (["trim", "/nonexistent/m.onnx"], "model file not found"),
    (["trim", str(ROOT / "models" / "shapes_yolo.onnx"), "--out", "/tmp/dla_trim_never.onnx"],
     "not the YOLOv5"),
])
def test_bad_input_is_one_line_exit_2(argv: list[str], message: str) -> None:
    p = subprocess.run([sys.executable, "-m", "dla_infer_node.dla_build.build_cli", *argv],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert p.returncode == 2, p.stderr
    assert p.stderr.count("\n") == 1 and message in p.stderr and "Traceback" not in p.stderr


def test_trim_v5_final_recovers_raw_heads_and_anchors(tmp_path: Path) -> None:
    shipped = load_metadata(default_model_metadata())
    final = tmp_path / "shapes_final.onnx"
    strides, anchors = build_v5_final(ROOT / "models" / "shapes_yolo.onnx", default_model_metadata(), final)
    trimmed = tmp_path / "shapes_final_trimmed.onnx"
    trim_cli(final, trimmed)
    meta = load_metadata(tmp_path / "shapes_final_trimmed.meta.yaml")
    assert meta.decoder.kind == "yolov5_raw" and list(meta.decoder.strides) == strides
    np.testing.assert_allclose(np.array(meta.decoder.anchors).reshape(3, -1), np.array(anchors), atol=1e-4)
    assert [o.name for o in meta.outputs] == ["head_s8", "head_s16", "head_s32"]
    assert meta.classes == shipped.classes
    scene = generate_scene(20_000_007)
    x, _ = preprocess(scene.image, "rgb8", meta.input)
    (y,) = run_onnx(final, x)
    raw = run_onnx(trimmed, x, [o.name for o in meta.outputs])
    final_meta = make_metadata("yolov5_final", num_classes=8, width=640, height=512,
                               outputs=[{"name": "output0", "shape": list(y.shape)}])
    for conf in (0.25, 0.001):
        want = make_decoder(final_meta)([y], conf, 0.45, 300)
        got = make_decoder(meta)(raw, conf, 0.45, 300)
        assert len(want) >= (3 if conf == 0.25 else 1)
        assert_same_detections(want, got)


@pytest.mark.parametrize("name", REAL)
def test_trim_ultralytics_exports(tmp_path: Path, name: str) -> None:
    src = FIXTURES / f"{name}.onnx"
    if not src.is_file():
        pytest.skip(f"{src} not generated (tools/make_yolo_fixtures.py)")
    trimmed = tmp_path / f"{name}_trimmed.onnx"
    trim_cli(src, trimmed)
    meta = yaml.safe_load((tmp_path / f"{name}_trimmed.meta.yaml").read_text(encoding="utf-8"))
    assert meta["decoder"]["strides"] == [8, 16, 32] and meta["decoder"]["reg_max"] == 16
    assert meta["classes"][:2] == ["person", "bicycle"]  # ultralytics' names dict, parsed
    x = np.random.default_rng(5).uniform(0, 1, (1, 3, 320, 320)).astype(np.float32)
    check_v8_equivalence(src, trimmed, x, min_dets=1)


@pytest.mark.parametrize("name", REAL)
def test_lint_of_the_trimmed_exports(tmp_path: Path, name: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Trimmed v8 and v5u graphs lint clean (a standalone DLA build can succeed). Trimmed YOLO11 cannot: its
    C2PSA attention multiplies two activations, and a matrix multiply is no DLA layer; lint names exactly
    those two nodes (models/README.md says what to do about it)."""
    src = FIXTURES / f"{name}.onnx"
    if not src.is_file():
        pytest.skip(f"{src} absent")
    trimmed = tmp_path / f"{name}_trimmed.onnx"
    trim_cli(src, trimmed)
    capsys.readouterr()
    rc = dla_build(["lint", str(trimmed)])
    out = capsys.readouterr().out
    if name.startswith("yolo11"):
        assert rc == 1
        offending = out.rsplit("offending: ", 1)[1].strip().split(", ")
        assert offending == ["/model.10/m/m.0/attn/MatMul", "/model.10/m/m.0/attn/MatMul_1"], out[-500:]
    else:
        assert rc == 0, out[-1500:]

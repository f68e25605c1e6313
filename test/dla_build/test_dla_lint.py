"""``dla_build lint`` rules: each documented DLA limit on hand-built graphs, one passing and one failing
case, plus the input checks (dynamic/batch/size/type/opset). The CLI is in ``test_dla_lint_cli``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _lint_graphs import build, const, rows_of, yolov8_like_head
from onnx import TensorProto, helper

from dla_infer_node.dla_build.lint_graph import lint


def conv(tmp_path: Path, cin: int = 4, cout: int = 8, k: int = 3, hw: int = 16, **attrs: Any) -> dict:
    group = attrs.get("group", 1)
    w = const("w", np.zeros((cout, cin // group, k, k)))
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="conv", kernel_shape=[k, k], **attrs)
    return rows_of(build(tmp_path, [node], [1, cin, hw, hw], inits=(w,)))["conv"]


def test_conv_limits(tmp_path: Path) -> None:
    assert conv(tmp_path, k=3, pads=[1, 1, 1, 1], strides=[8, 8])["verdict"] == "dla"
    assert conv(tmp_path, k=32, hw=40, pads=[31, 31, 31, 31])["verdict"] == "dla"
    assert conv(tmp_path, k=3, hw=80, dilations=[32, 32])["verdict"] == "dla"
    for attrs, word in [({"k": 33, "hw": 40}, "kernel"), ({"strides": [9, 9]}, "stride"),
                        ({"pads": [3, 3, 3, 3]}, "not less than kernel"),
                        ({"hw": 80, "dilations": [33, 33]}, "dilation")]:
        row = conv(tmp_path, **attrs)
        assert row["verdict"] == "gpu-fallback", (attrs, row)
        assert word in row["reason"] and "IConvolutionLayer" in row["reason"]
    assert conv(tmp_path, cin=8, cout=8, group=8)["verdict"] == "dla"
    grouped = conv(tmp_path, cin=8200, cout=8200, k=1, hw=1, group=8200)
    assert grouped["verdict"] == "gpu-fallback" and "groups [8200] outside [1,8192]" in grouped["reason"]
    wide = conv(tmp_path, cout=8193, k=1, hw=1)
    assert "output maps [8193] outside [1,8192]" in wide["reason"]


def test_deconvolution_rules(tmp_path: Path) -> None:
    def deconv(**attrs: Any) -> dict:
        w = const("w", np.zeros((4, 4 // attrs.get("group", 1), 2, 2)))
        node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], name="up", strides=[2, 2], **attrs)
        return rows_of(build(tmp_path, [node], [1, 4, 8, 8], inits=(w,)))["up"]
    assert deconv()["verdict"] == "dla"
    assert "grouped" in deconv(group=2)["reason"]
    assert "padding must be 0" in deconv(pads=[1, 1, 1, 1])["reason"]


@pytest.mark.parametrize(("op", "attrs", "verdict", "word"), [
    ("MaxPool", {"kernel_shape": [8, 8], "strides": [16, 16]}, "dla", ""),
    ("MaxPool", {"kernel_shape": [9, 9]}, "gpu-fallback", "window [9, 9] outside [1,8]"),
    ("AveragePool", {"kernel_shape": [2, 2], "strides": [17, 17]}, "gpu-fallback", "stride"),
    ("AveragePool", {"kernel_shape": [8, 8], "pads": [7, 7, 7, 7]}, "dla", ""),
])
def test_pooling_limits(tmp_path: Path, op: str, attrs: dict, verdict: str, word: str) -> None:
    node = helper.make_node(op, ["x"], ["y"], name="pool", **attrs)
    row = rows_of(build(tmp_path, [node], [1, 4, 40, 40]))["pool"]
    assert row["verdict"] == verdict and word in row["reason"]


def test_global_pool_window_is_the_whole_map(tmp_path: Path) -> None:
    node = helper.make_node("GlobalAveragePool", ["x"], ["y"], name="gap")
    assert rows_of(build(tmp_path, [node], [1, 4, 8, 8]))["gap"]["verdict"] == "dla"
    assert "window [20, 20]" in rows_of(build(tmp_path, [node], [1, 4, 20, 20]))["gap"]["reason"]


def test_activation_kinds_and_rank(tmp_path: Path) -> None:
    def act(op: str, shape: list[int], inputs: tuple = ("x",), inits: tuple = (), **attrs: Any) -> dict:
        node = helper.make_node(op, list(inputs), ["y"], name="act", **attrs)
        return rows_of(build(tmp_path, [node], shape, inits=inits))["act"]
    for op in ("Relu", "Sigmoid", "Tanh", "LeakyRelu"):
        assert act(op, [1, 4, 8, 8])["verdict"] == "dla", op
    assert "rank-3" in act("Sigmoid", [1, 80, 2100])["reason"]
    assert "not a DLA layer" in act("HardSigmoid", [1, 4, 8, 8])["reason"]
    relu6 = act("Clip", [1, 4, 8, 8], ("x", "lo", "hi"), (const("lo", 0.0), const("hi", 6.0)))
    assert relu6["verdict"] == "dla"
    clip = act("Clip", [1, 4, 8, 8], ("x", "lo", "hi"), (const("lo", -1.0), const("hi", 1.0)))
    assert clip["verdict"] == "gpu-fallback" and "Clipped ReLU" in clip["reason"]
    assert act("Abs", [1, 4, 8, 8])["verdict"] == "dla"
    assert "on DLA only Abs" in act("Exp", [1, 4, 8, 8])["reason"]
    assert act("LRN", [1, 4, 8, 8], size=5)["verdict"] == "dla"
    assert "LRN window 11" in act("LRN", [1, 4, 8, 8], size=11)["reason"]


def test_elementwise_needs_4d(tmp_path: Path) -> None:
    add = helper.make_node("Add", ["x", "x"], ["y"], name="add")
    assert rows_of(build(tmp_path, [add], [1, 4, 8, 8]))["add"]["verdict"] == "dla"
    mul = helper.make_node("Mul", ["x", "s"], ["y"], name="mul")
    row = rows_of(build(tmp_path, [mul], [1, 4, 2100], inits=(const("s", [8.0]),)))["mul"]
    assert row["verdict"] == "gpu-fallback" and "rank-3" in row["reason"]


def test_comparison_must_be_cast_right_away(tmp_path: Path) -> None:
    eq = helper.make_node("Equal", ["x", "x"], ["e"], name="eq")
    cast = helper.make_node("Cast", ["e"], ["y"], name="cast", to=TensorProto.FLOAT16)
    assert rows_of(build(tmp_path, [eq, cast], [1, 4, 8, 8]))["eq"]["verdict"] == "dla"
    assert "cast" in rows_of(build(tmp_path, [eq], [1, 4, 8, 8]))["eq"]["reason"]


def test_concat_only_along_channels(tmp_path: Path) -> None:
    def cat(axis: int, shape: list[int]) -> dict:
        node = helper.make_node("Concat", ["x", "x"], ["y"], name="cat", axis=axis)
        return rows_of(build(tmp_path, [node], shape))["cat"]
    assert cat(1, [1, 4, 8, 8])["verdict"] == "dla"
    assert "axis 2 of a rank-4" in cat(2, [1, 4, 8, 8])["reason"]
    assert cat(2, [1, 144, 400])["verdict"] == "gpu-fallback"  # the levels concat of a YOLOv8 head


def resize(tmp_path: Path, scales: list[float], mode: str = "nearest", **attrs: Any) -> dict:
    node = helper.make_node("Resize", ["x", "", "s"], ["y"], name="rs", mode=mode, **attrs)
    return rows_of(build(tmp_path, [node], [1, 4, 8, 8], inits=(const("s", scales),)))["rs"]


def test_resize_rules(tmp_path: Path) -> None:
    nearest = {"coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}
    assert resize(tmp_path, [1, 1, 2, 2], **nearest)["verdict"] == "dla"
    assert "not integers in [1,32]" in resize(tmp_path, [1, 1, 1.5, 1.5], **nearest)["reason"]
    assert "not integers in [1,32]" in resize(tmp_path, [1, 1, 33, 33], **nearest)["reason"]
    assert "batch and channel exactly 1" in resize(tmp_path, [1, 2, 2, 2], **nearest)["reason"]
    linear = resize(tmp_path, [1, 1, 2, 2], "linear", coordinate_transformation_mode="half_pixel")
    assert linear["verdict"] == "dla"
    assert "half_pixel only" in resize(tmp_path, [1, 1, 2, 2], "linear",
                                       coordinate_transformation_mode="align_corners")["reason"]
    assert "[1,4]" in resize(tmp_path, [1, 1, 8, 8], "linear")["reason"]
    sizes = helper.make_node("Resize", ["x", "", "", "sz"], ["y"], name="rs", mode="nearest")
    by_size = rows_of(build(tmp_path, [sizes], [1, 4, 8, 8], inits=(const("sz", [1, 4, 16, 16], np.int64),)))
    assert "sizes" in by_size["rs"]["reason"]


def test_upsample_opset9(tmp_path: Path) -> None:
    node = helper.make_node("Upsample", ["x", "s"], ["y"], name="up", mode="nearest")
    rows = rows_of(build(tmp_path, [node], [1, 4, 8, 8], inits=(const("s", [1, 1, 2, 2]),), opset=9))
    assert rows["up"]["verdict"] == "dla", rows["up"]


def test_slice_rules(tmp_path: Path) -> None:
    def sl(starts: list[int], ends: list[int], axes: list[int], steps: list[int]) -> dict:
        node = helper.make_node("Slice", ["x", "a", "b", "ax", "st"], ["y"], name="sl")
        inits = (const("a", starts, np.int64), const("b", ends, np.int64), const("ax", axes, np.int64),
                 const("st", steps, np.int64))
        return rows_of(build(tmp_path, [node], [2, 8, 8, 8], inits=inits, opset=13), batch=2)["sl"]
    assert sl([0], [4], [1], [1])["verdict"] == "dla"
    assert "first dimension" in sl([0], [1], [0], [1])["reason"]
    assert "steps [2]" in sl([0], [8], [1], [2])["reason"]
    runtime = helper.make_node("Slice", ["x", "a", "b"], ["y"], name="sl")
    extra = (helper.make_tensor_value_info("a", TensorProto.INT64, [1]),
             helper.make_tensor_value_info("b", TensorProto.INT64, [1]))
    row = rows_of(build(tmp_path, [runtime], [1, 8, 8, 8], extra_inputs=extra))["sl"]
    assert row["verdict"] == "forbids-standalone" and "data-dependent shape" in row["reason"]


def test_softmax_axis_and_size(tmp_path: Path) -> None:
    def sm(shape: list[int], axis: int) -> dict:
        node = helper.make_node("Softmax", ["x"], ["y"], name="sm", axis=axis)
        return rows_of(build(tmp_path, [node], shape))["sm"]
    assert sm([1, 16, 4, 64], 1)["verdict"] == "dla"  # the DFL softmax, channel axis
    assert "axis 0 (batch)" in sm([1, 16, 4, 64], 0)["reason"]
    assert "axis size 2000 > 1024" in sm([1, 2000, 4, 4], 1)["reason"]
    assert sm([1, 2000, 1, 1], 1)["verdict"] == "dla"  # other dims 1: up to 8192


def test_shuffle_and_folded_shape_chain(tmp_path: Path) -> None:
    nodes = [helper.make_node("Shape", ["x"], ["shp"], name="shape"),
             helper.make_node("Gather", ["shp", "i0"], ["n"], name="gather", axis=0),
             helper.make_node("Unsqueeze", ["n", "ax0"], ["n1"], name="unsq"),
             helper.make_node("Concat", ["n1", "rest"], ["target"], name="cat", axis=0),
             helper.make_node("Reshape", ["x", "target"], ["y"], name="reshape")]
    inits = (const("i0", 0, np.int64), const("ax0", [0], np.int64), const("rest", [64, 2, 16], np.int64))
    rows = rows_of(build(tmp_path, nodes, [1, 64, 4, 8], inits=inits))
    assert [rows[n]["verdict"] for n in ("shape", "gather", "unsq", "cat")] == ["folded"] * 4
    assert rows["reshape"]["verdict"] == "dla"
    flat = helper.make_node("Reshape", ["x", "t"], ["y"], name="reshape")
    rows = rows_of(build(tmp_path, [flat], [1, 64, 4, 8], inits=(const("t", [1, 64, 32], np.int64),)))
    assert rows["reshape"]["verdict"] == "gpu-fallback" and "rank 4 to rank 3" in rows["reshape"]["reason"]


@pytest.mark.parametrize(("nodes", "inits", "verdict", "word"), [
    ([helper.make_node("Gather", ["x", "i"], ["y"], name="n", axis=1)], (const("i", [0, 2], np.int64),),
     "gpu-fallback", "No DLA support"),
    ([helper.make_node("MatMul", ["x", "w"], ["y"], name="n")], (const("w", np.zeros((8, 8))),),
     "gpu-fallback", "matrix multiply"),
    ([helper.make_node("TopK", ["x", "k"], ["y", "idx"], name="n", axis=-1)], (const("k", [3], np.int64),),
     "gpu-fallback", "not a DLA layer"),
    ([helper.make_node("NonZero", ["x"], ["y"], name="n")], (), "forbids-standalone", "data-dependent"),
])
def test_unsupported_ops(tmp_path: Path, nodes: list, inits: tuple, verdict: str, word: str) -> None:
    report = lint(build(tmp_path, nodes, [1, 4, 8, 8], inits=inits))
    row = next(r for r in report["rows"] if r["name"] == "n")
    assert row["verdict"] == verdict and word in row["reason"], row
    assert not report["standalone_ok"] and report["offending"] == ["n"]


def test_custom_domain_op_is_not_dla(tmp_path: Path) -> None:
    node = helper.make_node("MyPlugin", ["x"], ["y"], name="plug", domain="com.example")
    row = rows_of(build(tmp_path, [node], [1, 4, 8, 8]))["plug"]
    assert row["verdict"] == "gpu-fallback" and "plugin" in row["reason"]


def test_input_checks(tmp_path: Path) -> None:
    relu = [helper.make_node("Relu", ["x"], ["y"], name="relu")]
    dynamic = build(tmp_path, relu, ["batch", 3, 64, 64])
    row = rows_of(dynamic)["x"]
    assert row["verdict"] == "forbids-standalone"
    assert "dynamic batch dimension 'batch' on input 'x'" in row["reason"]
    assert lint(dynamic, batch=1)["standalone_ok"]  # --batch pins it, as the build's profile would
    assert "dynamic dimension (axis 2) 'h'" in rows_of(build(tmp_path, relu, [1, 3, "h", 64]))["x"]["reason"]
    batched = build(tmp_path, relu, [4, 3, 64, 64])
    assert "batch 4 on input 'x' without --batch" in rows_of(batched)["x"]["reason"]
    assert lint(batched, batch=4)["standalone_ok"]
    assert "--batch 2 was given" in rows_of(batched, 2)["x"]["reason"]
    assert "9000 on input 'x' > 8192" in rows_of(build(tmp_path, relu, [1, 3, 9000, 8]))["x"]["reason"]
    int_input = build(tmp_path, relu, [1, 3, 8, 8], elem=TensorProto.INT64)
    assert "input type INT64" in rows_of(int_input)["x"]["reason"]
    old = rows_of(build(tmp_path, relu, [1, 3, 8, 8], opset=7))["<model>"]
    assert old["verdict"] == "forbids-standalone" and "opset 7 outside [9,25]" in old["reason"]


def test_non_batch_dimension_limit_on_layers(tmp_path: Path) -> None:
    w = const("w", np.zeros((8, 4, 1, 1)))
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="conv", kernel_shape=[1, 1])
    ok = rows_of(build(tmp_path, [node], [1, 4, 1, 8192], inits=(w,)))["conv"]
    big = rows_of(build(tmp_path, [node], [1, 4, 1, 8400], inits=(w,)))["conv"]
    assert ok["verdict"] == "dla" and big["verdict"] == "gpu-fallback" and "8400 > 8192" in big["reason"]


def test_yolov8_like_head_names_the_head_nodes(tmp_path: Path) -> None:
    report = lint(yolov8_like_head(tmp_path))
    assert not report["standalone_ok"]
    for name in ("/model.22/Reshape", "/model.22/Split", "/model.22/dfl/Reshape_1", "/model.22/Mul_2",
                 "/model.22/Sigmoid", "/model.22/Concat_5"):
        assert name in report["offending"], name
    for name in ("/model.22/cv2.0/Conv", "/model.22/cv3.0/Conv", "/model.22/Concat"):
        assert name not in report["offending"], name  # the per-level convolutions trim keeps run on DLA

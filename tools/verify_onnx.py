"""Check that ONNX Runtime reproduces the torch outputs saved at export (shapes_yolo.check.npz).

    .venv/bin/python tools/verify_onnx.py models/shapes_yolo.onnx models/shapes_yolo.check.npz
    # shrink a training-run check file to what models/ ships (first input stored as uint8, ~0.5 MB):
    .venv/bin/python tools/verify_onnx.py --compact FULL.npz models/shapes_yolo.check.npz

Also checks the graph uses only DLA-friendly operators. Needs onnxruntime + onnx, not torch.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

# operators the DLA executes (with BN folded into Conv); anything else would fall back to the GPU
DLA_OPS = {"Conv", "Relu", "LeakyRelu", "Sigmoid", "MaxPool", "Resize", "Upsample", "Concat",
           "Constant"}  # Constant: only the Resize scales (weights to TensorRT, not a layer)


def check_inputs(ref: Any) -> np.ndarray:
    """The network inputs of a loaded check file, float32 NCHW."""
    # compact files hold the input as uint8 pixels; the network input is exactly pixel / 255
    return np.asarray(ref["x_u8"].astype(np.float32) / 255.0 if "x_u8" in ref else ref["x"])


def main(onnx_path: str, check_path: str) -> int:
    import onnx
    import onnxruntime as ort

    model = onnx.load(onnx_path)
    ops = {n.op_type for n in model.graph.node}
    extra = ops - DLA_OPS
    print(f"opset {model.opset_import[0].version}; operators: {sorted(ops)}")
    ref = np.load(check_path)
    sess = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    worst = 0.0
    x = check_inputs(ref)
    for i in range(len(x)):
        outs = sess.run(names, {sess.get_inputs()[0].name: x[i:i + 1]})
        for j, o in enumerate(outs):
            r = ref[f"out{i}_{j}"]
            assert o.shape == r.shape, (o.shape, r.shape)
            worst = max(worst, float(np.abs(o - r).max() / (np.abs(r).max() + 1e-6)))
    print(f"inputs {[(i.name, i.shape) for i in sess.get_inputs()]}; outputs "
          f"{[(o.name, o.shape) for o in sess.get_outputs()]}")
    print(f"max relative difference ORT vs torch: {worst:.2e}")
    ok = worst < 1e-4 and not extra
    if extra:
        print(f"NOT DLA-friendly operators present: {sorted(extra)}")
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


def compact(full_path: str, out_path: str) -> None:
    ref = np.load(full_path)
    x = ref["x"][:1]
    u8 = np.round(x * 255.0).astype(np.uint8)
    if not np.array_equal(u8.astype(np.float32) / 255.0, x):
        raise SystemExit("first check input is not an 8-bit image; cannot compact it losslessly")
    np.savez_compressed(out_path, x_u8=u8, **{k: ref[k] for k in ref.files if k.startswith("out0_")})


if __name__ == "__main__":
    if sys.argv[1] == "--compact":
        compact(sys.argv[2], sys.argv[3])
        sys.exit(0)
    sys.exit(main(sys.argv[1], sys.argv[2]))

"""The doctor's ``compare`` stage: the DLA's outputs on one image against the ONNX model on the CPU."""

from __future__ import annotations

import argparse
from typing import Any

from dla_infer_node.cli.doctor import StageFailed
from dla_infer_node.core.errors import DlaInferError


def stage_compare(rep: Any, args: argparse.Namespace, backend: Any) -> None:
    import cv2
    import numpy as np

    from dla_infer_node.backends.factory import BackendSettings, open_backend

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

"""The files the build steps hand each other, named from the model: what one step writes, the next finds.

``calibrate`` writes ``<stem>.calib`` and ``<stem>.qdq.onnx`` beside MODEL, ``convert`` ``<stem>.fp16.onnx``;
``compile`` looks for them there, and every step reads the model's metadata ``<stem>.meta.yaml``.
"""

from __future__ import annotations

from pathlib import Path

from dla_infer_node.core.errors import ModelError
from dla_infer_node.dla_build.onnx_facts import model_stem


def qdq_path_for(model: Path) -> Path:
    """Where ``dla_build calibrate`` leaves the Q/DQ ONNX of ``model``: ``<stem>.qdq.onnx`` beside it."""
    return model.with_name(f"{model_stem(model)}.qdq.onnx")


def cache_path_for(model: Path) -> Path:
    """Where ``dla_build calibrate`` leaves the TensorRT calibration cache: ``<stem>.calib`` beside it."""
    return model.with_name(f"{model_stem(model)}.calib")


def fp16_path_for(model: Path) -> Path:
    """Where ``dla_build convert`` leaves the fp16-typed ONNX: ``<stem>.fp16.onnx`` beside the model."""
    return model.with_name(f"{model_stem(model)}.fp16.onnx")


def find_metadata(model: Path, given: str | Path | None = None) -> Path:
    """``--metadata``, else ``<stem>.meta.yaml`` next to the model (suffixes like ``.fp16``/``.qdq`` off)."""
    if given:
        return Path(given)
    stem = model_stem(model)
    tries = [model.with_name(stem + ".meta.yaml"), model.with_name(stem.split(".")[0] + ".meta.yaml")]
    for t in tries:
        if t.is_file():
            return t
    looked = ", ".join(str(t) for t in dict.fromkeys(tries))
    raise ModelError(f"no model metadata found (looked for {looked})",
                     call="find_metadata", params={"model": str(model)},
                     hint="pass --metadata META.yaml (input, decoder, outputs, classes)")

"""Write test/fixtures/yolo/{yolov8n,yolo11n,yolov5nu}_320.onnx: tiny YOLO detectors exported by ultralytics.

    YOLO_OFFLINE=1 python tools/make_yolo_fixtures.py [--out-dir test/fixtures/yolo]

Needs the dev-only model environment (requirements/models.txt: torch, ultralytics, onnx, onnxslim,
onnxruntime), not the node's venv. No download happens: the models are built from the model YAMLs shipped
inside the ultralytics wheel, with seeded random weights.

Why: the decoder, the graph trimming tool and `lint` must be tested against graphs that ultralytics' own
exporter writes (node names such as /model.22/cv2.0/cv2.0.2/Conv, DFL, the Concat/Sigmoid tail, the metadata
props `names`, `stride`, `imgsz`), not against hand-made look-alikes. Real checkpoints are 10-12 MB each and
cannot be downloaded here, so each model is built with a deliberately narrow custom scale (the layer graph of
the `n` model with fewer channels) and NC_CLASSES classes, which keeps every layer, the head structure and the
strides 8/16/32 while shrinking the file to about 1 MB (YOLO11 about 3 MB: its C2PSA attention needs at least
128 channels at P5: its num_heads is (channels / 2) // 64).

Random weights alone give useless outputs: the activations shrink about fivefold per layer (P5 head features
near 1e-11, zero in fp16), ultralytics initialises the class biases to log(5 / nc / (640 / stride)^2), about
-7 to -10, so no score reaches 0.001, and the box branch outputs are all its bias (2.0), so every box has
the same size. Before export, on a fixed calibration batch (a seeded uniform-noise image, a smooth one and
one of flat rectangles): every BatchNorm gets one running variance so that its output has RMS
ACTIVATION_RMS; the last 1x1 convolution of every box (cv2.i) and class (cv3.i) branch is rescaled to unit
spread per output channel; the box (DFL) logits get a bias falling with the bin index (boxes of a few
strides); the class logits get a seeded per-class offset plus one common bias, the mean over the calibration
images of the bias that lets CANDIDATES_PER_IMAGE of that image's 2100 anchors score above 0.25. Random
networks answer noise far more strongly than smooth images, so a uniform-noise image gives about 150-350
candidates over 0.25 and smooth or synthetic scenes about 0-60: decoder-equivalence tests should feed noise.
fp16 and fp32 scores agree within 0.01.

Deterministic: seeded weights, calibration factors rounded before use, and the export timestamp in the
metadata (`date`) replaced by a fixed one, so two runs write byte-identical files on the same machine.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

os.environ.setdefault("YOLO_OFFLINE", "1")  # before ultralytics is imported: never reach for the network

import numpy as np
import onnx
import torch
from torch import nn

if TYPE_CHECKING:
    from ultralytics import YOLO  # imported at run time only after YOLO_OFFLINE is set

REPO = Path(__file__).resolve().parents[1]
OUT_DIR = REPO / "test" / "fixtures" / "yolo"
IMGSZ = 320
OPSET = 18  # what ultralytics picks by default with torch >= 2.4; pinned so onnx upgrades do not change it
NC_CLASSES = 20  # 80 would not fit: the v8/v5u class branch is max(P3 channels, nc) wide, ~2.4 MB at nc=80
SEED = 20261204
CANDIDATES_PER_IMAGE = 50  # per calibration image: anchors (of 2100) whose best class score passes 0.25
ACTIVATION_RMS = 0.1  # BatchNorm outputs: small (SiLU near its linear part), far above fp16 underflow
BOX_BIN_SLOPE = -0.3  # DFL bin k gets bias k * slope: expected distance ~3 bins, boxes ~6 strides wide
FIXED_DATE = "2026-12-04T00:00:00+00:00"  # replaces the export time in the metadata
# The first NC_CLASSES COCO names, so the metadata `names` dict looks like a real model's.
CLASS_NAMES = (
    "person", "bicycle", "car", "motorcycle", "airplane", "bus", "train", "truck", "boat", "traffic light",
    "fire hydrant", "stop sign", "parking meter", "bench", "bird", "cat", "dog", "horse", "sheep", "cow",
)  # fmt: skip


@dataclass(frozen=True)
class Spec:
    """One fixture: the ultralytics model YAML to start from and the custom scale that replaces its scales."""

    name: str  # fixture name: test/fixtures/yolo/<name>_320.onnx
    yaml: str  # ultralytics model YAML name, shipped in the wheel (yolov8n.yaml -> cfg/models/v8/yolov8.yaml)
    depth: float  # depth multiple: kept at the `n` value, so the layer graph equals the real `n` model's
    width: float  # width multiple: narrower than `n` (0.25)
    max_channels: int


SPECS = (
    Spec("yolov8n", "yolov8n.yaml", depth=0.33, width=0.0625, max_channels=256),  # P3/P4/P5 16 channels
    # P3/P4/P5 32/64/128: C2PSA needs 128 at P5
    Spec("yolo11n", "yolo11n.yaml", depth=0.50, width=0.125, max_channels=1024),
    # ultralytics reads yolov5nu.yaml as yolov5n.yaml; either way it is the anchor-free YOLOv5u (Detect head)
    Spec("yolov5nu", "yolov5n.yaml", depth=0.33, width=0.0625, max_channels=256),  # P3/P4/P5 16
)


def build(spec: Spec, workdir: Path) -> YOLO:
    """Build the seeded, randomly initialised model from a copy of its YAML that carries the custom scale."""
    from ultralytics import YOLO
    from ultralytics.nn.tasks import yaml_model_load
    from ultralytics.utils import YAML

    cfg = yaml_model_load(spec.yaml)  # the YAML shipped with ultralytics
    for key in ("scale", "yaml_file"):  # filled in again from the file name when loaded
        cfg.pop(key, None)
    cfg["nc"] = NC_CLASSES
    cfg["scales"] = {"n": [spec.depth, spec.width, spec.max_channels]}
    path = workdir / spec.yaml  # the `n` in the name selects scale "n"
    YAML.save(path, cfg)
    torch.manual_seed(SEED)
    model = YOLO(str(path), task="detect")
    model.model.names = dict(enumerate(CLASS_NAMES[:NC_CLASSES]))
    return model


def calibration_batch() -> torch.Tensor:
    """Three seeded RGB images in [0, 1]: uniform noise, smooth blobs (upsampled coarse noise), and flat
    rectangles of random colours on a gray background (a crude scene with edges)."""
    g = torch.Generator().manual_seed(SEED)
    noise = torch.rand(1, 3, IMGSZ, IMGSZ, generator=g)
    coarse = torch.rand(1, 3, IMGSZ // 32, IMGSZ // 32, generator=g)
    smooth = nn.functional.interpolate(coarse, size=(IMGSZ, IMGSZ), mode="bilinear", align_corners=False)
    scene = torch.full((1, 3, IMGSZ, IMGSZ), 0.5)
    for _ in range(12):
        x0, y0 = (int(v) for v in torch.randint(0, IMGSZ - 16, (2,), generator=g))
        w, h = (int(v) for v in torch.randint(16, IMGSZ // 3, (2,), generator=g))
        scene[0, :, y0 : y0 + h, x0 : x0 + w] = torch.rand(3, 1, 1, generator=g)
    return torch.cat([noise, smooth, scene])


def _round_sig(x: torch.Tensor, digits: int = 3) -> torch.Tensor:
    """Round to `digits` significant digits, so tiny float differences between machines do not show."""
    exp = torch.floor(torch.log10(x.abs().clamp_min(1e-30)))
    scale = 10.0 ** (digits - 1 - exp)
    return torch.round(x * scale) / scale


def _round_to(x: torch.Tensor, step: float = 1 / 256) -> torch.Tensor:
    return torch.round(x / step) * step


@torch.no_grad()
def calibrate_batchnorm(model: nn.Module, batch: torch.Tensor) -> None:
    """Scale every BatchNorm so that its output has root-mean-square ACTIVATION_RMS on `batch`.

    Freshly initialised BatchNorms (mean 0, variance 1) let the activations shrink about fivefold per layer:
    the P5 head features end near 1e-11, which fp16 (TensorRT, DLA) flushes to zero. One variance per layer
    (running_var filled with one value, running_mean left at 0) only rescales each layer, keeping the random
    network's near-linear, smooth behaviour. (Per-channel statistics at unit scale were tried: the network
    turns chaotic, fp16 and fp32 scores differ by up to 0.9 and similar noise images give 10 or 2000
    candidates.) Each BatchNorm is set just before it runs in one eval-mode pass, so it sees its final input.
    """

    def set_stats(bn: nn.Module, args: tuple[torch.Tensor, ...]) -> None:
        var = args[0].pow(2).mean() / ACTIVATION_RMS**2
        bn.running_var.fill_(float(_round_sig(var, 4)))

    hooks = [m.register_forward_pre_hook(set_stats) for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    model.eval()
    model(batch)
    for h in hooks:
        h.remove()


@torch.no_grad()
def calibrate_head(model: nn.Module, batch: torch.Tensor) -> None:
    """Rescale the last convolution of each box (cv2.i) and class (cv3.i) branch (see module docstring)."""
    head = model.model[-1]  # ultralytics Detect
    nl, nc, reg_max = head.nl, head.nc, head.reg_max
    convs: list[nn.Conv2d] = [head.cv2[i][-1] for i in range(nl)] + [head.cv3[i][-1] for i in range(nl)]
    inputs: dict[int, torch.Tensor] = {}
    hooks = [
        c.register_forward_hook(lambda mod, args, _out, k=k: inputs.__setitem__(k, args[0]))
        for k, c in enumerate(convs)
    ]
    model.eval()
    model(batch)
    for h in hooks:
        h.remove()

    def standardise(k: int) -> torch.Tensor:
        """Give conv k unit spread per output channel and zero bias; return its new output (N, C, H*W)."""
        conv = convs[k]
        z = nn.functional.conv2d(inputs[k], conv.weight).flatten(2)  # without bias
        mean, std = z.mean(dim=(0, 2)), z.std(dim=(0, 2)).clamp_min(1e-12)
        gain = _round_sig(1.0 / std)
        conv.weight.mul_(gain[:, None, None, None])
        conv.bias.copy_(_round_sig(-mean * gain))
        return nn.functional.conv2d(inputs[k], conv.weight, conv.bias).flatten(2)

    bins = torch.arange(reg_max, dtype=torch.float32).repeat(4) * BOX_BIN_SLOPE  # 4 sides x reg_max bins
    for i in range(nl):
        standardise(i)
        convs[i].bias.add_(_round_to(bins))

    # Class logits: unit spread, a seeded per-class offset (classes differ in how often they fire), then one
    # common bias chosen so that about CANDIDATES_PER_IMAGE anchors per image have a best score over 0.25.
    g = torch.Generator().manual_seed(SEED + 1)
    offset = _round_to(torch.rand(nc, generator=g) - 0.5)
    logits = torch.cat([standardise(nl + i) for i in range(nl)], dim=2) + offset[None, :, None]  # (N, nc, A)
    best = logits.max(dim=1).values  # (N, A): best class logit of every anchor of every image
    quantiles = torch.quantile(best, 1.0 - CANDIDATES_PER_IMAGE / best.shape[1], dim=1)  # one per image
    common = _round_to(math.log(0.25 / 0.75) - quantiles.mean())  # images differ a lot: meet in the middle
    for i in range(nl):
        convs[nl + i].bias.add_(offset + common)


def export(spec: Spec, out_dir: Path) -> Path:
    """Build, calibrate and export one model with ultralytics' exporter; return the fixture's path."""
    with tempfile.TemporaryDirectory(prefix="yolo_fixture_") as tmp:
        yolo = build(spec, Path(tmp))
        batch = calibration_batch()
        calibrate_batchnorm(yolo.model, batch)
        calibrate_head(yolo.model, batch)
        cwd = Path.cwd()
        os.chdir(tmp)  # the exporter writes <yaml stem>.onnx into the working directory
        try:
            exported = Path(tmp) / yolo.export(
                format="onnx",
                imgsz=IMGSZ,
                opset=OPSET,
                simplify=True,
                dynamic=False,
                nms=False,
                batch=1,
                device="cpu",
            )
        finally:
            os.chdir(cwd)
        model = onnx.load(str(exported))
        for prop in model.metadata_props:
            if prop.key == "date":
                prop.value = FIXED_DATE
        target = out_dir / f"{spec.name}_{IMGSZ}.onnx"
        onnx.save(model, str(target))
        exported.unlink()
    return target


def summary(path: Path) -> str:
    """One line: file, size, sha256 and the number of candidates over 0.25 / 0.001 on a seeded noise image."""
    import onnxruntime as ort

    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    image = rng.integers(0, 256, (1, 3, IMGSZ, IMGSZ), dtype=np.uint8).astype(np.float32) / 255.0
    (out,) = sess.run(None, {sess.get_inputs()[0].name: image})
    best = out[0, 4:].max(axis=0)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    return (
        f"{path.relative_to(REPO) if path.is_relative_to(REPO) else path}: {path.stat().st_size} bytes "
        f"sha256 {digest}..  output {list(out.shape)}, candidates >0.25: {int((best > 0.25).sum())}, "
        f">0.001: {int((best > 0.001).sum())}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", type=Path, default=OUT_DIR)
    parser.add_argument("--only", choices=[s.name for s in SPECS], action="append", help="repeatable")
    args = parser.parse_args(argv)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)  # one reduction order for the calibration statistics
    for spec in SPECS:
        if args.only and spec.name not in args.only:
            continue
        path = export(spec, args.out_dir.resolve())
        print(summary(path))
    return 0


if __name__ == "__main__":
    sys.exit(main())

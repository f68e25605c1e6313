"""The shapes detector network: a small YOLOv5-style model built only from layers the DLA runs.

Conv (+BatchNorm, folded at export), ReLU, MaxPool, nearest Upsample and Concat; static shapes, batch 1 at
export. The forward pass ENDS at the raw head tensors (one per stride, [1, na*(5+nc), H, W], channel
a*(5+nc)+k): sigmoid, grid offsets and anchors are applied outside the network, so the whole graph can run on
the DLA (the "DLA-trimmed" YOLO form) and the decoder stays on the CPU/GPU.

Torch is a training-time dependency only; the package never imports this file.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn


class ConvBnAct(nn.Module):
    def __init__(self, cin: int, cout: int, k: int = 3, s: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k, s, k // 2 if k % 2 else 0, bias=False)
        self.bn = nn.BatchNorm2d(cout, eps=1e-3, momentum=0.03)
        self.act = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.bn(self.conv(x)))


class Sppf(nn.Module):
    """Three chained 5x5 stride-1 max-pools, concatenated: a large receptive field from DLA-native pools."""

    def __init__(self, c: int) -> None:
        super().__init__()
        h = c // 2
        self.reduce = ConvBnAct(c, h, 1)
        self.pool = nn.MaxPool2d(5, 1, 2)
        self.fuse = ConvBnAct(4 * h, c, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.reduce(x)
        p1 = self.pool(x)
        p2 = self.pool(p1)
        p3 = self.pool(p2)
        return self.fuse(torch.cat([x, p1, p2, p3], 1))


class ShapesYolo(nn.Module):
    """Patchify stem + backbone + top-down FPN + three raw heads at strides 2, 4 and 8 x ``stem``."""

    def __init__(self, num_classes: int, num_anchors: int = 3, stem: int = 4,
                 stem_channels: int = 32, p2: bool = False, width: float = 1.0) -> None:
        super().__init__()

        def ch(base: int) -> int:  # channel count scaled by ``width``, kept a multiple of 8
            return max(8, round(base * width / 8) * 8)

        c8, c16, c32 = ch(48), ch(96), ch(128)
        self.nc, self.na = num_classes, num_anchors
        self.no = num_anchors * (5 + num_classes)
        # p2: a fourth, finest head on the stem's grid (stride = stem) for the smallest objects
        self.strides = ((stem,) if p2 else ()) + (2 * stem, 4 * stem, 8 * stem)
        # patchify stem (stem x stem conv, stride stem): no full-resolution activations, the costliest part
        # of a 3x3-stride-2 stem on a CPU. With stem 8 on a full-resolution input the stem still sees every
        # pixel while everything after it costs what it did with stem 4 on a half-resolution input (tried:
        # it did not beat the default at equal CPU time, models/README.md). The DLA runs kernels up to
        # 32x32 with strides up to 8.
        self.stem = ConvBnAct(3, stem_channels, stem, stem)                               # /stem
        self.s8 = nn.Sequential(ConvBnAct(stem_channels, c8, 3, 2), ConvBnAct(c8, c8))   # /2stem
        self.s16 = nn.Sequential(ConvBnAct(c8, c16, 3, 2), ConvBnAct(c16, c16))         # /4stem
        self.s32 = nn.Sequential(ConvBnAct(c16, c32, 3, 2), ConvBnAct(c32, c32), Sppf(c32))  # /8stem
        self.up = nn.Upsample(scale_factor=2.0, mode="nearest")
        self.lat32 = ConvBnAct(c32, c32 // 2, 1)
        self.td16 = nn.Sequential(ConvBnAct(c32 // 2 + c16, c16, 1), ConvBnAct(c16, c16))
        self.lat16 = ConvBnAct(c16, c16 // 2, 1)
        self.td8 = nn.Sequential(ConvBnAct(c16 // 2 + c8, c8, 1), ConvBnAct(c8, c8))
        self.p2 = p2
        if p2:
            self.lat8 = ConvBnAct(c8, 32, 1)
            self.td4 = nn.Sequential(ConvBnAct(32 + stem_channels, 32, 1), ConvBnAct(32, 32))
        self.heads = nn.ModuleList([nn.Conv2d(c, self.no, 1) for c in ((32,) if p2 else ()) + (c8, c16, c32)])

    def init_head_bias(self, input_hw: tuple[int, int]) -> None:
        # YOLOv5's prior: ~8 objects per image for objectness, uniform class prior
        for head, s in zip(self.heads, self.strides, strict=True):
            b = head.bias.detach().view(self.na, -1)
            cells = (input_hw[0] / s) * (input_hw[1] / s)
            b[:, 4] = math.log(8 / cells)
            b[:, 5:] = math.log(0.6 / (self.nc - 0.99))
            head.bias = nn.Parameter(b.view(-1).clone())

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        c4 = self.stem(x)
        c8 = self.s8(c4)
        c16 = self.s16(c8)
        c32 = self.s32(c16)
        n16 = self.td16(torch.cat([self.up(self.lat32(c32)), c16], 1))
        n8 = self.td8(torch.cat([self.up(self.lat16(n16)), c8], 1))
        feats: tuple[torch.Tensor, ...] = (n8, n16, c32)
        if self.p2:
            feats = (self.td4(torch.cat([self.up(self.lat8(n8)), c4], 1)), *feats)
        return tuple(h(f) for h, f in zip(self.heads, feats, strict=True))


def fold_batchnorm(model: nn.Module) -> nn.Module:
    """Fold every ConvBnAct's BatchNorm into its convolution (in place); BN becomes Identity."""
    for m in model.modules():
        if isinstance(m, ConvBnAct) and isinstance(m.bn, nn.BatchNorm2d):
            conv, bn = m.conv, m.bn
            w = conv.weight.detach()
            scale = bn.weight.detach() / torch.sqrt(bn.running_var + bn.eps)
            fused = nn.Conv2d(conv.in_channels, conv.out_channels, conv.kernel_size, conv.stride,
                              conv.padding, bias=True)
            fused.weight.data = w * scale.view(-1, 1, 1, 1)
            fused.bias.data = bn.bias.detach() - bn.running_mean * scale
            m.conv = fused
            m.bn = nn.Identity()
    return model


def export_onnx(model: nn.Module, path: str, input_hw: tuple[int, int], output_names: Sequence[str],
                opset: int = 13) -> None:
    """Export batch-1 static-shape ONNX ending at the raw heads (legacy TorchScript exporter)."""
    model.eval()
    dummy = torch.zeros(1, 3, input_hw[0], input_hw[1])
    torch.onnx.export(model, (dummy,), path, input_names=["images"], output_names=list(output_names),
                      opset_version=opset, do_constant_folding=True, dynamo=False)

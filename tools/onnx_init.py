"""A training stage that starts from a shipped ONNX model instead of a checkpoint (``--init X.onnx``).

Checkpoints are training-machine files and get lost; the ONNX file and its metadata are in the repository.
The export folded each BatchNorm into its convolution (W' = W*s, b' = beta - mean*s), which cannot be
undone exactly, but any BN that makes the same eval-mode function is as good a starting point. This one is
chosen so that training mode barely changes it either: the BN's running statistics are the measured
per-channel mean and variance of the folded convolution's output (without its bias) on training scenes,
and its scale and shift cancel them, so eval(x) = W'x + b' exactly and a training batch (normalised by its
own statistics, which are close to the measured ones) starts near the shipped function.

Torch is a training-time dependency only; the package never imports this file.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml
from shapes_model import ConvBnAct, fold_batchnorm
from torch import nn
from verify_onnx import check_inputs


def convs_in_call_order(model: nn.Module, input_hw: tuple[int, int]) -> list[nn.Conv2d]:
    """Every Conv2d in the order a forward pass runs it: the order of the Conv nodes in the exported graph."""
    order: list[nn.Conv2d] = []
    hooks = [m.register_forward_hook(lambda mod, _i, _o: order.append(mod))
             for m in model.modules() if isinstance(m, nn.Conv2d)]
    with torch.no_grad():
        model.eval()(torch.zeros(1, 3, *input_hw))
    for h in hooks:
        h.remove()
    return order


def load_folded_weights(folded: nn.Module, onnx_path: Path, input_hw: tuple[int, int]) -> None:
    """Copy the ONNX graph's Conv weights and biases into a BN-folded ShapesYolo, matched by call order."""
    import onnx
    from onnx import numpy_helper

    graph = onnx.load(str(onnx_path)).graph
    init = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    nodes = [n for n in graph.node if n.op_type == "Conv"]
    convs = convs_in_call_order(folded, input_hw)
    if len(nodes) != len(convs):
        raise SystemExit(f"{onnx_path}: {len(nodes)} Conv nodes, the network built from its metadata has "
                         f"{len(convs)}: not the same architecture (--width/--stem/--p2?)")
    for i, (node, conv) in enumerate(zip(nodes, convs, strict=True)):
        w = init[node.input[1]]
        if tuple(w.shape) != tuple(conv.weight.shape) or len(node.input) < 3:
            raise SystemExit(f"{onnx_path}: Conv #{i} ({node.name}) weight {w.shape} (bias: "
                             f"{len(node.input) > 2}); the network expects {tuple(conv.weight.shape)}")
        conv.weight.data = torch.from_numpy(w.copy())
        conv.bias.data = torch.from_numpy(init[node.input[2]].copy())


def unfold_batchnorm(model: nn.Module, folded: nn.Module, batches: list[torch.Tensor]) -> None:
    """Give ``model`` (unfolded) the function of ``folded``, with BN statistics measured on ``batches``."""
    stats: dict[str, list[torch.Tensor]] = {}

    def recorder(name: str, conv: nn.Conv2d) -> Callable[..., None]:
        def hook(_m: nn.Module, _i: object, out: torch.Tensor) -> None:
            z = (out - conv.bias.view(1, -1, 1, 1)).double()  # W'x, the part the BN would normalise
            s = stats.setdefault(name, [torch.zeros(z.shape[1], dtype=torch.float64) for _ in range(2)]
                                 + [torch.zeros((), dtype=torch.float64)])
            s[0] += z.sum((0, 2, 3))
            s[1] += (z * z).sum((0, 2, 3))
            s[2] += z.shape[0] * z.shape[2] * z.shape[3]
        return hook

    blocks = {n: m for n, m in folded.named_modules() if isinstance(m, ConvBnAct)}
    hooks = [m.conv.register_forward_hook(recorder(n, m.conv)) for n, m in blocks.items()]
    with torch.no_grad():
        folded.eval()
        for x in batches:
            folded(x)
    for h in hooks:
        h.remove()
    targets = dict(model.named_modules())
    with torch.no_grad():
        for name, src in blocks.items():
            dst = targets[name]
            assert isinstance(dst, ConvBnAct) and isinstance(dst.bn, nn.BatchNorm2d)
            total, squares, count = stats[name]
            mean = total / count
            var = (squares / count - mean * mean).clamp_min(0.0)
            bn = dst.bn
            dst.conv.weight.copy_(src.conv.weight)
            bn.running_mean.copy_(mean.float())
            bn.running_var.copy_(var.float())
            bn.weight.copy_(torch.sqrt(var + bn.eps).float())
            bn.bias.copy_(mean.float() + src.conv.bias)
        for name, mod in folded.named_modules():  # the raw heads: plain convolutions in both
            if isinstance(mod, nn.Conv2d) and not isinstance(targets[name.rsplit(".", 1)[0]], ConvBnAct):
                targets[name].weight.copy_(mod.weight)
                targets[name].bias.copy_(mod.bias)


def init_from_onnx(onnx_path: Path, model: nn.Module, batches: list[torch.Tensor],
                   check_path: Path | None) -> dict[str, Any]:
    """Load ``onnx_path`` into ``model`` (a fresh ShapesYolo of the same architecture) and return what a
    checkpoint would give ``--init``: the weights, and anchors and iteration count from the metadata beside
    it."""
    meta_path = onnx_path.with_suffix("").with_suffix(".meta.yaml")
    if not meta_path.is_file():
        raise SystemExit(f"{onnx_path}: no metadata file beside it ({meta_path.name})")
    meta = yaml.safe_load(meta_path.read_text())
    folded = fold_batchnorm(copy.deepcopy(model))
    load_folded_weights(folded, onnx_path, (64, 64))
    unfold_batchnorm(model, folded, batches)
    if check_path is not None and check_path.is_file():  # the export's own outputs: both must reproduce
        ref = np.load(check_path)
        x = torch.from_numpy(check_inputs(ref))
        with torch.no_grad():
            for net, what in ((folded, "ONNX weights"), (model.eval(), "unfolded BatchNorm")):
                outs = net(x[:1])
                worst = max(float((o - torch.from_numpy(ref[f"out0_{j}"])).abs().max()
                                  / (np.abs(ref[f"out0_{j}"]).max() + 1e-6)) for j, o in enumerate(outs))
                print(f"{what}: max relative difference to {check_path.name}: {worst:.2e}", flush=True)
                if worst > 1e-3:
                    raise SystemExit(f"{onnx_path}: the {what} do not reproduce {check_path.name}")
    levels = meta["decoder"]["anchors"]
    anchors = np.asarray(levels, np.float64).reshape(len(levels), -1, 2)
    return {"ema": model.state_dict(), "anchors": anchors, "it": int(meta["training"]["iterations"])}

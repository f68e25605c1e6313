"""Tensor descriptors of a loaded DLA module, checked against the artifact and turned into layouts.

The loadable's descriptors are the truth about memory (``size_`` and the byte strides); the artifact says
what they mean (format, dtype, int8 scale, the model's logical shape). Every disagreement is a
``tensors``-stage error naming the tensor, what the loadable reports and what the artifact expects.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dla_infer_node.artifact.sidecar import Artifact, TensorFacts
from dla_infer_node.backends.cudla_errors import TensorError
from dla_infer_node.core.tensor_layout import LayoutError, TensorLayout


@dataclass(frozen=True)
class BoundTensor:
    """One tensor of the module: its descriptor index, layout (logical C), scale and model shape."""

    index: int
    name: str
    layout: TensorLayout
    scale: float | None
    shape: tuple[int, ...]
    size: int  # descriptor size_: the bytes to allocate, register and copy


def _name(value: Any) -> str:
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).split(b"\0", 1)[0].decode("utf-8", "replace")
    if hasattr(value, "tobytes"):  # an int8 array view of char[81]
        return bytes(value.tobytes()).split(b"\0", 1)[0].decode("utf-8", "replace")
    return str(value).split("\0", 1)[0]


def descriptor_dict(desc: Any) -> dict[str, Any]:
    """A binding ``ModuleTensorDescriptor`` (or a stand-in with the same attributes) as plain data."""
    return {
        "name": _name(desc.name),
        "size": int(desc.size_),
        "n": int(desc.n), "c": int(desc.c), "h": int(desc.h), "w": int(desc.w),
        "data_format": int(desc.data_format), "data_type": int(desc.data_type),
        "data_category": int(desc.data_category), "pixel_format": int(desc.pixel_format),
        "pixel_mapping": int(desc.pixel_mapping),
        "stride": [int(s) for s in desc.stride],
    }


def as4(shape: Sequence[int]) -> tuple[int, int, int, int]:
    """Logical model shape as NCHW: a rank-3 ``[1, N, K]`` head maps to ``(1, N, K, 1)``."""
    s = tuple(int(v) for v in shape) + (1,) * (4 - len(shape))
    return (s[0], s[1], s[2], s[3])


def _bind(side: str, facts: TensorFacts, index: int, d: dict[str, Any]) -> BoundTensor:
    n, c, h, w = as4(facts.shape)
    params = {"tensor": facts.name, "descriptor": {k: d[k] for k in ("n", "c", "h", "w", "size", "stride")},
              "artifact": {"shape": list(facts.shape), "format": facts.format, "dtype": facts.dtype}}
    if (d["n"], d["h"], d["w"]) != (n, h, w) or d["c"] < c or d["c"] - c >= 32:
        got = f"{d['n']},{d['c']},{d['h']},{d['w']}"
        raise TensorError(f"{side} '{facts.name}': loadable reports n,c,h,w = {got} but the "
                          f"artifact/model shape is {list(facts.shape)} (channels may only be padded)",
                          call="check_descriptors", params=params,
                          hint="the sidecar does not describe this loadable: rebuild one of them")
    try:
        # logical C, not the descriptor's (possibly padded) C: pad channels then stay zero / are ignored
        layout = TensorLayout.from_descriptor(facts.format, facts.dtype, n, c, h, w,
                                              d["stride"][:4], d["size"])
    except LayoutError as exc:
        raise TensorError(f"{side} '{facts.name}': the descriptor's strides/size do not fit "
                          f"{facts.dtype}:{facts.format}: {exc.detail}",
                          call="check_descriptors", params=params,
                          hint="the io formats in the sidecar differ from the ones the loadable was built "
                               "with (trtexec --inputIOFormats/--outputIOFormats)") from exc
    return BoundTensor(index, facts.name, layout, facts.scale, tuple(facts.shape), int(d["size"]))


def bind_tensors(artifact: Artifact, in_descs: Sequence[Any], out_descs: Sequence[Any],
                 ) -> tuple[list[BoundTensor], list[BoundTensor]]:
    """Inputs in descriptor order; outputs in the MODEL METADATA order (each with its descriptor index)."""
    ins = [descriptor_dict(x) for x in in_descs]
    outs = [descriptor_dict(x) for x in out_descs]
    for side, descs, facts in (("inputs", ins, artifact.inputs), ("outputs", outs, artifact.outputs)):
        if len(descs) != len(facts):
            raise TensorError(f"loadable has {len(descs)} {side}, the artifact declares {len(facts)}",
                              call="check_descriptors",
                              params={"loadable": [x["name"] for x in descs],
                                      "artifact": [f.name for f in facts]})
    by_name_out = {x["name"]: i for i, x in enumerate(outs)}
    bound_in: list[BoundTensor] = []
    for i, f in enumerate(artifact.inputs):
        bound_in.append(_bind("input", f, i, ins[i]))
    bound_out: list[BoundTensor] = []
    facts_by_name = {f.name: f for f in artifact.outputs}
    for spec in artifact.metadata.outputs:
        f = facts_by_name[spec.name]
        if spec.name not in by_name_out:
            raise TensorError(f"model output '{spec.name}' is not among the loadable's outputs",
                              call="check_descriptors", params={"loadable": list(by_name_out)})
        idx = by_name_out[spec.name]
        bound_out.append(_bind("output", f, idx, outs[idx]))
    return bound_in, bound_out

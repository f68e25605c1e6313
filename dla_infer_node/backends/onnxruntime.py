"""ONNX Runtime backend: CPU letterbox -> ``InferenceSession.run`` -> raw heads; the default, runs anywhere.

onnxruntime is imported inside the constructor so that importing the package (or choosing the cuDLA
backend on a Jetson without onnxruntime) never needs it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dla_infer_node.core.backend import RawOutputs
from dla_infer_node.core.errors import BackendError, DlaInferError, ModelError
from dla_infer_node.core.model_meta import ModelMetadata, class_names_from_onnx_metadata
from dla_infer_node.core.preprocess import Preprocessor

# model input type -> the dtype the preprocessed float32 tensor is cast to (an fp16 export takes fp16)
INPUT_TYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16}


def _dims_match(actual: Sequence[Any], expected: Sequence[int]) -> bool:
    """Static dims must be equal; a symbolic/unknown dim (str or None) in the model accepts any value."""
    if len(actual) != len(expected):
        return False
    return all(not isinstance(a, int) or a == e for a, e in zip(actual, expected, strict=True))


class OnnxRuntimeBackend:
    """Loads an ONNX model, checks it against the metadata, runs frames. Construction = load."""

    name = "onnxruntime"
    preprocess_device = "cpu"  # always: the input tensor is made on the host

    def __init__(
        self,
        model_path: str | Path,
        metadata: ModelMetadata,
        providers: Sequence[str] = ("CPUExecutionProvider",),
        threads: int = 0,
    ) -> None:
        self.model_path = Path(model_path)
        self.metadata = metadata
        self._session: Any = None
        self._input_dtype: type[np.generic] = np.float32
        params = {"model": str(self.model_path)}
        if not self.model_path.is_file():
            raise ModelError("ONNX model file not found", call="OnnxRuntimeBackend", params=params,
                             stage="model_load")
        try:
            import onnxruntime as ort
        except ImportError as exc:
            raise BackendError(f"onnxruntime is not importable: {exc}", call="import onnxruntime",
                               stage="backend_import", hint="pip install onnxruntime") from exc
        available = ort.get_available_providers()
        missing = [p for p in providers if p not in available]
        if not providers or missing:
            raise BackendError(f"execution provider(s) {missing or list(providers)} not available; "
                               f"this onnxruntime offers {available}", call="ort.InferenceSession",
                               params={"providers": list(providers)}, stage="backend_init")
        opts = ort.SessionOptions()
        if threads:
            opts.intra_op_num_threads = int(threads)
        # ORT's pool threads spin between runs by default; in a node that takes camera frames on another
        # thread, on a robot's few cores, that spinning starves the receive path and frames are lost in
        # the subscription's queue (seen on a 2-core machine: 56 of 60 1080p frames at 30 Hz)
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        opts.log_severity_level = 3  # errors only: ORT's warnings would otherwise reach the node's stderr
        try:
            self._session = ort.InferenceSession(str(self.model_path), sess_options=opts,
                                                 providers=list(providers))
        except Exception as exc:  # ORT raises its own Fail/InvalidGraph/... types; keep one family
            raise ModelError(f"onnxruntime cannot load the model: {exc}", call="ort.InferenceSession",
                             params={**params, "providers": list(providers)}, stage="model_load") from exc
        self._check_against_metadata()
        if self._input_dtype is np.float16:
            # An fp16-typed graph is a DLA artifact being checked, not a CPU deployment. ONNX Runtime's
            # graph optimizations rewrite fp16 Q/DQ graphs wrongly (ORT 1.32, measured on calibrate's
            # output: heads correlate 0.74 with the fp32 Q/DQ graph optimized, 0.9999 unoptimized).
            opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
            self._session = ort.InferenceSession(str(self.model_path), sess_options=opts,
                                                 providers=list(providers))
        self._input_name = metadata.input.name
        self._output_names = [o.name for o in metadata.outputs]
        self._pre = Preprocessor(metadata.input)

    def _check_against_metadata(self) -> None:
        """Input/outputs (names, shapes) of the loaded graph must be what the metadata promises."""
        meta = self.metadata
        where = {"model": str(self.model_path), "metadata": str(meta.path)}
        inputs = self._session.get_inputs()
        expected_in = [1, 3, meta.input.height, meta.input.width]
        if len(inputs) != 1:
            self.close()
            raise ModelError(f"model has {len(inputs)} inputs {[i.name for i in inputs]}; expected exactly 1 "
                             f"named {meta.input.name!r} shaped {expected_in}", call="check_model",
                             params=where, stage="model_check")
        inp = inputs[0]
        shape_ok = _dims_match(inp.shape, expected_in)
        if inp.name != meta.input.name or not shape_ok or inp.type not in INPUT_TYPES:
            self.close()
            raise ModelError(f"model input is {inp.name!r} {inp.shape} {inp.type}; metadata expects "
                             f"{meta.input.name!r} {expected_in} {' or '.join(INPUT_TYPES)}",
                             call="check_model", params=where, stage="model_check")
        self._input_dtype = INPUT_TYPES[inp.type]
        outs = {o.name: o for o in self._session.get_outputs()}
        for spec in meta.outputs:
            got = outs.get(spec.name)
            if got is None:
                self.close()
                raise ModelError(f"model has no output {spec.name!r} (it has {sorted(outs)}); "
                                 f"metadata expects {spec.name!r} {list(spec.shape)}", call="check_model",
                                 params=where, stage="model_check")
            if not _dims_match(got.shape, spec.shape):
                self.close()
                raise ModelError(f"output {spec.name!r} is {got.shape}; metadata expects {list(spec.shape)}",
                                 call="check_model", params=where, stage="model_check")

    def infer(self, image: np.ndarray, encoding: str) -> RawOutputs:
        if self._session is None:
            raise BackendError("backend is closed", call="OnnxRuntimeBackend.infer", stage="backend_infer")
        tensor, lb = self._pre(image, encoding)  # InputError for bad frames, before ORT sees anything
        if self._input_dtype is not np.float32:
            tensor = tensor.astype(self._input_dtype)
        try:
            outs = self._session.run(self._output_names, {self._input_name: tensor})
        except DlaInferError:
            raise
        except Exception as exc:
            raise BackendError(f"onnxruntime run failed: {exc}", call="InferenceSession.run",
                               params={"model": str(self.model_path), "input_shape": tensor.shape},
                               stage="backend_infer") from exc
        # fp16 outputs become float32 here: the decoders compute in float32
        return RawOutputs([np.asarray(o, dtype=np.float32) for o in outs], lb)

    def model_class_names(self) -> tuple[str, ...]:
        """Class names the ONNX file's own metadata holds (ultralytics' ``names``); () when it has none."""
        if self._session is None:
            raise BackendError("backend is closed", call="OnnxRuntimeBackend.model_class_names",
                               stage="model_check")
        text = self._session.get_modelmeta().custom_metadata_map.get("names")
        return class_names_from_onnx_metadata(text) if text else ()

    def close(self) -> None:
        # the session owns all ORT memory; dropping the last reference releases it
        self._session = None

    def __enter__(self) -> OnnxRuntimeBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

"""One place that turns backend settings into an opened backend plus its model metadata.

Settings are validated here (``ParameterError`` naming the setting, its value and what is allowed) so the
node, the ``detect`` command and benchmarks share one set of rules. Each backend imports its library
(onnxruntime, cuda.bindings) only when opened: neither need be installed for the other backend.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from dla_infer_node.backends.onnxruntime import OnnxRuntimeBackend
from dla_infer_node.core.backend import Backend
from dla_infer_node.core.errors import BackendError, DlaInferError, ParameterError
from dla_infer_node.core.model_meta import ModelMetadata, load_metadata, with_class_names
from dla_infer_node.core.resources import default_model_metadata, metadata_for_model

BACKENDS = ("onnxruntime", "cudla")
RUNTIME_MODES = ("hybrid",)
PREPROCESS_DEVICES = ("cpu", "gpu")
MAX_DLA_CORE = 1  # AGX Orin has DLA cores 0 and 1


@dataclass(frozen=True)
class BackendSettings:
    backend: str = "onnxruntime"
    model_path: str = ""
    metadata_path: str = ""
    loadable_path: str = ""
    artifact_path: str = ""
    runtime_mode: str = "hybrid"
    dla_core: int = 0
    ort_providers: tuple[str, ...] = ("CPUExecutionProvider",)
    ort_threads: int = 0
    preprocess_device: str = "cpu"

    def validate(self) -> BackendSettings:
        """Check every value; returns ``self`` so calls can chain. Raises :class:`ParameterError`."""
        if self.backend not in BACKENDS:
            raise ParameterError("backend", self.backend, f"one of {BACKENDS}")
        if self.runtime_mode not in RUNTIME_MODES:
            raise ParameterError("runtime_mode", self.runtime_mode,
                                 "'hybrid' (a --buildDLAStandalone loadable runs in cuDLA hybrid mode; the "
                                 "standalone runtime mode is not supported by cuda.bindings.cudla)")
        if self.preprocess_device not in PREPROCESS_DEVICES:
            raise ParameterError("preprocess_device", self.preprocess_device, f"one of {PREPROCESS_DEVICES}")
        if self.backend == "onnxruntime" and self.preprocess_device != "cpu":
            raise ParameterError("preprocess_device", self.preprocess_device,
                                 "'cpu' with backend 'onnxruntime' ('gpu' needs backend 'cudla')")
        if isinstance(self.dla_core, bool) or not isinstance(self.dla_core, int) or not (
                0 <= self.dla_core <= MAX_DLA_CORE):
            raise ParameterError("dla_core", self.dla_core, f"an integer in [0, {MAX_DLA_CORE}]")
        if isinstance(self.ort_threads, bool) or not isinstance(self.ort_threads, int) or not (
                0 <= self.ort_threads <= 256):
            raise ParameterError("ort_threads", self.ort_threads, "an integer in [0, 256] (0: ORT's default)")
        providers = self.ort_providers
        if isinstance(providers, str) or not isinstance(providers, Sequence) or not providers or not all(
                isinstance(p, str) and p for p in providers):
            raise ParameterError("ort_providers", providers,
                                 "a non-empty list of provider names, e.g. ['CPUExecutionProvider']")
        # only the files this backend reads must exist: a config written for the other backend (the Orin
        # file's loadable paths, with backend:=onnxruntime) still starts
        used = ("model_path", "metadata_path") if self.backend == "onnxruntime" else (
            "model_path", "metadata_path", "loadable_path", "artifact_path")
        for name in ("model_path", "metadata_path", "loadable_path", "artifact_path"):
            value = getattr(self, name)
            if not isinstance(value, str):
                raise ParameterError(name, value, "a path string ('' for the default)")
            if name in used and value and not Path(value).is_file():
                raise ParameterError(name, value, "an existing file; not found")
        if self.backend == "cudla" and not self.loadable_path:
            raise ParameterError("loadable_path", "", "the path of a DLA loadable when backend is 'cudla'")
        return self

    def resolved_metadata_path(self) -> Path:
        """Explicit metadata; else ``<model stem>.meta.yaml`` next to the model; else the shipped model's."""
        if self.metadata_path:
            return Path(self.metadata_path)
        if self.model_path:
            p = metadata_for_model(self.model_path)
            if not p.is_file():
                raise ParameterError("metadata_path", "", f"an existing metadata YAML (looked for {p})")
            return p
        return default_model_metadata()

    def resolved_model_path(self, metadata: ModelMetadata) -> Path:
        """Explicit model; else the ``onnx`` file the metadata names; else ``<metadata stem>.onnx``."""
        if self.model_path:
            return Path(self.model_path)
        named = metadata.extra.get("onnx")
        if named:
            return metadata.resolve(str(named))
        name = metadata.path.name
        stem = name[: -len(".meta.yaml")] if name.endswith(".meta.yaml") else metadata.path.stem
        return metadata.path.with_name(stem + ".onnx")


def open_backend(settings: BackendSettings) -> tuple[Backend, ModelMetadata]:
    """Validate ``settings``, load the metadata and open the chosen backend (construction = load)."""
    settings.validate()
    if settings.backend == "cudla":
        try:
            # imported when chosen: a broken cuDLA install becomes the BackendError below, and the
            # onnxruntime backend never loads the cuDLA module chain
            from dla_infer_node.backends.cudla import open_cudla_backend
        except ImportError as exc:
            raise BackendError(f"cannot import the cuDLA backend: {exc}",
                               call="import dla_infer_node.backends.cudla", stage="backend_import",
                               hint="install cuda-python (cuda-bindings >= 13.3) on the Jetson") from exc
        return open_cudla_backend(settings)
    metadata = load_metadata(settings.resolved_metadata_path())
    backend = OnnxRuntimeBackend(settings.resolved_model_path(metadata), metadata,
                                 providers=tuple(settings.ort_providers), threads=settings.ort_threads)
    if not metadata.classes:  # the YAML gave none: the names ultralytics writes into the ONNX metadata
        try:
            metadata = with_class_names(metadata, backend.model_class_names(), str(backend.model_path))
        except DlaInferError:
            backend.close()
            raise
    return backend, metadata

"""One place that turns backend settings into an opened backend plus its model metadata.

Settings are validated here by the rows of the settings table (:mod:`dla_infer_node.core.settings`, the
node's parameters): the node, the ``detect`` / ``evaluate`` commands and benchmarks share one set of rules
and one wording (``ParameterError`` naming the setting, its value and what is allowed). Each backend
imports its library (onnxruntime, cuda.bindings) only when opened: neither need be installed for the other
backend.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from dla_infer_node.backends.onnxruntime import OnnxRuntimeBackend
from dla_infer_node.core.backend import Backend
from dla_infer_node.core.errors import BackendError, DlaInferError, ParameterError
from dla_infer_node.core.model_meta import ModelMetadata, load_metadata, with_class_names
from dla_infer_node.core.resources import default_model_metadata, metadata_for_model
from dla_infer_node.core.settings import resolve_preprocess_device, validate_value


@dataclass(frozen=True)
class BackendSettings:
    backend: str = "onnxruntime"
    model_path: str = ""
    metadata_path: str = ""
    loadable_path: str = ""
    artifact_path: str = ""
    runtime_mode: str = "hybrid"
    dla_core: int = 0
    frames_in_flight: int = 2
    ort_providers: tuple[str, ...] = ("CPUExecutionProvider",)
    ort_threads: int = 0
    preprocess_device: str = "cpu"

    def validate(self) -> BackendSettings:
        """Check every value by its row of the settings table (and the files this backend reads); returns
        the settings with ``preprocess_device`` resolved. Raises :class:`ParameterError`."""
        for name in ("backend", "runtime_mode", "dla_core", "frames_in_flight", "ort_threads",
                     "ort_providers"):
            validate_value(name, getattr(self, name))
        device = resolve_preprocess_device(self.backend, str(validate_value("preprocess_device",
                                                                            self.preprocess_device)))
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
        return replace(self, preprocess_device=device)

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
    settings = settings.validate()
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

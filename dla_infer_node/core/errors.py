"""One error family for the whole package.

Every message names the *stage* that failed, the *call* that failed and its parameters, so that a log
line alone is enough to start debugging (record the failing call before changing anything).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class DlaInferError(Exception):
    """Base class: ``[stage] call(k=v, ...): detail``."""

    stage: str = "general"
    # set by the node when startup fails, so the one-line report carries its namespaced logger name
    logger_name: str | None = None

    def __init__(
        self,
        detail: str,
        *,
        call: str | None = None,
        params: Mapping[str, Any] | None = None,
        stage: str | None = None,
        hint: str | None = None,
    ) -> None:
        if stage is not None:
            self.stage = stage
        self.detail = detail
        self.call = call
        self.params = dict(params or {})
        self.hint = hint
        super().__init__(self._format())

    def _format(self) -> str:
        where = ""
        if self.call:
            args = ", ".join(f"{k}={v!r}" for k, v in self.params.items())
            where = f" {self.call}({args}):"
        text = f"[{self.stage}]{where} {self.detail}"
        if self.hint:
            text += f" (hint: {self.hint})"
        return text


class ParameterError(DlaInferError):
    """A configuration value is invalid: names the parameter, its value and what is allowed."""

    stage = "parameters"

    def __init__(self, name: str, value: Any, allowed: str) -> None:
        self.name = name
        self.value = value
        self.allowed = allowed
        super().__init__(f"parameter '{name}' = {value!r} is invalid: allowed {allowed}")

    def _format(self) -> str:  # one line, no call part: this is what the node prints at startup
        return f"[{self.stage}] {self.detail}"


class InputError(DlaInferError):
    """An image/frame cannot be used (encoding, size, dtype, truncated data, undecodable bytes)."""

    stage = "input"


class ModelError(DlaInferError):
    """The model/artifact files or their metadata are missing, malformed or disagree with each other."""

    stage = "model"


class BackendError(DlaInferError):
    """A backend failed; cuDLA subclasses refine the stage (runtime library, device, loadable, ...)."""

    stage = "backend"

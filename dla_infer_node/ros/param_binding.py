"""The parameter table (:mod:`params`) bound to an rclpy node: descriptors, declaration, live updates.

Parameters are validated as a whole before anything is declared, so a bad configuration ends the node
with one line; the declared values are the validated, resolved ones (``ros2 param get`` shows what is
used). Live changes go through the same per-parameter validation and are applied by a callback.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from rcl_interfaces.msg import (
    FloatingPointRange,
    IntegerRange,
    ParameterDescriptor,
    ParameterType,
    SetParametersResult,
)
from rclpy.node import Node
from rclpy.parameter import Parameter

from dla_infer_node.core.errors import ParameterError
from dla_infer_node.core.yaml_file import read_yaml
from dla_infer_node.ros.params import (
    CAMERA_SPECS,
    PARAMETERS,
    SPECS,
    NodeConfig,
    ParamSpec,
    camera_spec,
    validate_config,
    validate_value,
)

# parameters rclpy or ROS tooling may set on any node; not ours, so not worth a warning
_FOREIGN_PARAMETERS = ("use_sim_time", "start_type_description_service", "qos_overrides")
_ROS_TYPES = {"string": ParameterType.PARAMETER_STRING, "integer": ParameterType.PARAMETER_INTEGER,
              "double": ParameterType.PARAMETER_DOUBLE, "bool": ParameterType.PARAMETER_BOOL,
              "string_array": ParameterType.PARAMETER_STRING_ARRAY,
              "integer_array": ParameterType.PARAMETER_INTEGER_ARRAY}


def descriptor(spec: ParamSpec) -> ParameterDescriptor:
    """The rclpy descriptor of a table row: type, description, range, read-only."""
    # dynamic_typing: rclpy's own type check would refuse a wrong type before our callback, with its enum
    # codes ("expected '3' got '2'" on Python 3.11); ours names the type and the allowed range, and applies
    # the startup rule (an integer for a double is widened) to live sets too
    d = ParameterDescriptor(name=spec.name, type=_ROS_TYPES[spec.type], description=spec.description,
                            additional_constraints=spec.allowed(), read_only=spec.read_only,
                            dynamic_typing=True)
    if spec.type == "double" and spec.min is not None and spec.max is not None:
        d.floating_point_range = [FloatingPointRange(from_value=float(spec.min), to_value=float(spec.max),
                                                     step=0.0)]
    elif spec.type == "integer" and spec.min is not None and spec.max is not None:
        d.integer_range = [IntegerRange(from_value=int(spec.min), to_value=int(spec.max), step=1)]
    return d


def declare_parameters(node: Node, *, check_files: bool,
                       on_change: Callable[[dict[str, Any]], None]) -> NodeConfig:
    """Validate the node's given parameters, declare every one, and route live changes to ``on_change``.

    ``on_change`` receives the validated changed values of our parameters; a rejected value never
    reaches it (the set is refused with the one-line reason).
    """
    # rclpy keeps the -p / params-file values here until a parameter is declared (Humble..Kilted);
    # reading them first lets the whole set be validated, with one clear line, before declaring
    overrides = getattr(node, "_parameter_overrides", {})
    given = {name: p.value for name, p in overrides.items() if name in SPECS or camera_spec(name)}
    config = validate_config(given, check_files=check_files)
    cameras = {f"{c.name}.{key}": c for c in config.camera_configs for key in CAMERA_SPECS}
    unknown = sorted(n for n in overrides
                     if n not in SPECS and n not in cameras and not n.startswith(_FOREIGN_PARAMETERS))
    if unknown:
        node.get_logger().warning(f"ignoring unknown parameter(s) {unknown}; known: {sorted(SPECS)} and, for "
                                  f"each name in cameras, <name>.{{{','.join(CAMERA_SPECS)}}}")

    def on_set(parameters: list[Parameter]) -> SetParametersResult:
        values: dict[str, Any] = {}
        for p in parameters:
            if p.name in SPECS or camera_spec(p.name):
                try:
                    values[p.name] = validate_value(p.name, p.value)
                except ParameterError as exc:
                    given = p.type_.name.lower() if p.type_ is not None else "unknown"
                    reason = f"{exc} (given a value of type {given})"
                    return SetParametersResult(successful=False, reason=reason)
        on_change(values)
        return SetParametersResult(successful=True)

    def widen(parameters: list[Parameter]) -> list[Parameter]:
        # the stored value of a double parameter stays a double when an integer is set (as at startup)
        return [Parameter(p.name, Parameter.Type.DOUBLE, float(p.value))
                if p.name in SPECS and SPECS[p.name].type == "double" and p.type_ == Parameter.Type.INTEGER
                else p for p in parameters]

    if hasattr(node, "add_pre_set_parameters_callback"):  # Iron and later; on Humble on_set widens
        node.add_pre_set_parameters_callback(widen)
    node.add_on_set_parameters_callback(on_set)
    for spec in PARAMETERS:
        value = getattr(config, spec.name)
        # declared with the validated, resolved value (e.g. the shipped model's absolute path, a
        # threshold given as the integer 1 widened to 1.0), so `ros2 param get` shows what is used
        node.declare_parameter(spec.name, list(value) if isinstance(value, tuple) else value,
                               descriptor(spec), ignore_override=True)
    for name, camera in cameras.items():  # each camera's own, with what it resolved to
        spec = replace(CAMERA_SPECS[name.rpartition(".")[2]], name=name)
        node.declare_parameter(name, getattr(camera, spec.name.rpartition(".")[2]), descriptor(spec),
                               ignore_override=True)
    return config


def params_file_problem(argv: Sequence[str]) -> str | None:
    """One line (file, line, column) for the first ``--params-file`` in ``argv`` that is not valid YAML."""
    for i, arg in enumerate(argv[:-1]):
        if arg == "--params-file":
            try:
                read_yaml(Path(argv[i + 1]))
            except ValueError as exc:
                return f"parameters file {argv[i + 1]!r}: {exc}"
    return None


def given_value(node: Node, name: str) -> Any:
    """The validated value given for ``name`` at start (``-p``/params file), or its default, before any
    parameter is declared: what a process-level choice (the executor) needs before the node configures."""
    override = getattr(node, "_parameter_overrides", {}).get(name)
    return validate_value(name, override.value) if override is not None else SPECS[name].default

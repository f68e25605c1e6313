"""The parameter table (:mod:`params`) bound to an rclpy node: descriptors, declaration, live updates.

Parameters are validated as a whole before anything is declared, so a bad configuration ends the node
with one line; the declared values are the validated, resolved ones (``ros2 param get`` shows what is
used). Live changes go through the same per-parameter validation and are applied by a callback.
"""

from __future__ import annotations

from collections.abc import Callable
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
from dla_infer_node.ros.params import (
    PARAMETERS,
    SPECS,
    NodeConfig,
    ParamSpec,
    validate_config,
    validate_value,
)

# parameters rclpy or ROS tooling may set on any node; not ours, so not worth a warning
_FOREIGN_PARAMETERS = ("use_sim_time", "start_type_description_service", "qos_overrides")
_ROS_TYPES = {"string": ParameterType.PARAMETER_STRING, "integer": ParameterType.PARAMETER_INTEGER,
              "double": ParameterType.PARAMETER_DOUBLE, "bool": ParameterType.PARAMETER_BOOL,
              "string_array": ParameterType.PARAMETER_STRING_ARRAY}


def descriptor(spec: ParamSpec) -> ParameterDescriptor:
    """The rclpy descriptor of a table row: type, description, range, read-only."""
    d = ParameterDescriptor(name=spec.name, type=_ROS_TYPES[spec.type], description=spec.description,
                            additional_constraints=spec.allowed(), read_only=spec.read_only)
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
    given = {name: p.value for name, p in overrides.items() if name in SPECS}
    unknown = sorted(n for n in overrides if n not in SPECS and not n.startswith(_FOREIGN_PARAMETERS))
    if unknown:
        node.get_logger().warning(f"ignoring unknown parameter(s) {unknown}; known: {sorted(SPECS)}")
    config = validate_config(given, check_files=check_files)

    def on_set(parameters: list[Parameter]) -> SetParametersResult:
        values: dict[str, Any] = {}
        for p in parameters:
            if p.name in SPECS:
                try:
                    values[p.name] = validate_value(p.name, p.value)
                except ParameterError as exc:
                    return SetParametersResult(successful=False, reason=str(exc))
        on_change(values)
        return SetParametersResult(successful=True)

    node.add_on_set_parameters_callback(on_set)
    for spec in PARAMETERS:
        value = getattr(config, spec.name)
        # declared with the validated, resolved value (e.g. the shipped model's absolute path, a
        # threshold given as the integer 1 widened to 1.0), so `ros2 param get` shows what is used
        node.declare_parameter(spec.name, list(value) if isinstance(value, tuple) else value,
                               descriptor(spec), ignore_override=True)
    return config


def given_value(node: Node, name: str) -> Any:
    """The validated value given for ``name`` at start (``-p``/params file), or its default, before any
    parameter is declared: what a process-level choice (the executor) needs before the node configures."""
    override = getattr(node, "_parameter_overrides", {}).get(name)
    return validate_value(name, override.value) if override is not None else SPECS[name].default

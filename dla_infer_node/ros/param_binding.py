"""The settings table (:mod:`dla_infer_node.core.settings`) bound to an rclpy node: descriptors,
declaration, live updates.

The plain node validates its parameters as a whole before anything is declared, so a bad configuration
ends it with one line; its declared values are the validated, resolved ones (``ros2 param get`` shows
what is used). The managed node declares the given values at start and validates them at configure, so a
bad one can be set right. Live changes go through the same per-parameter validation and are applied by a
callback.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
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
from dla_infer_node.core.settings import (
    CAMERA_SPECS,
    PARAMETERS,
    SPECS,
    ParamSpec,
    camera_spec,
    validate_value,
)
from dla_infer_node.core.yaml_file import read_yaml
from dla_infer_node.ros.node_config import NodeConfig, validate_config

# parameters rclpy or ROS tooling may set on any node; not ours, so not worth a warning
_FOREIGN_PARAMETERS = ("use_sim_time", "start_type_description_service", "qos_overrides")
_ROS_TYPES = {"string": ParameterType.PARAMETER_STRING, "integer": ParameterType.PARAMETER_INTEGER,
              "double": ParameterType.PARAMETER_DOUBLE, "bool": ParameterType.PARAMETER_BOOL,
              "string_array": ParameterType.PARAMETER_STRING_ARRAY,
              "integer_array": ParameterType.PARAMETER_INTEGER_ARRAY}


def descriptor(spec: ParamSpec, read_only: bool | None = None, ranged: bool = True) -> ParameterDescriptor:
    """The rclpy descriptor of a table row: type, description, range (unless not ``ranged``), read-only
    (the row's unless given)."""
    # dynamic_typing: rclpy's own type check would refuse a wrong type before our callback, with its enum
    # codes ("expected '3' got '2'" on Python 3.11); ours names the type and the allowed range, and applies
    # the startup rule (an integer for a double is widened) to live sets too
    d = ParameterDescriptor(name=spec.name, type=_ROS_TYPES[spec.type], description=spec.description,
                            additional_constraints=spec.allowed(),
                            read_only=spec.read_only if read_only is None else read_only, dynamic_typing=True)
    if not ranged:
        return d
    if spec.type == "double" and spec.min is not None and spec.max is not None:
        d.floating_point_range = [FloatingPointRange(from_value=float(spec.min), to_value=float(spec.max),
                                                     step=0.0)]
    elif spec.type == "integer" and spec.min is not None and spec.max is not None:
        d.integer_range = [IntegerRange(from_value=int(spec.min), to_value=int(spec.max), step=1)]
    return d


def given_parameters(node: Node) -> dict[str, Any]:
    """The values given for our parameters (``-p`` / params file), not yet validated; unknown names are
    warned about and ignored."""
    # rclpy keeps the -p / params-file values here until a parameter is declared (Humble..Kilted);
    # reading them first lets the whole set be validated, with one clear line, before declaring
    overrides = getattr(node, "_parameter_overrides", {})
    given = overrides.get("cameras")
    cameras = set(given.value) if given is not None and isinstance(given.value, (list, tuple)) else set()
    ours = {n for n in overrides if n in SPECS or (camera_spec(n) and n.rpartition(".")[0] in cameras)}
    unknown = sorted(n for n in overrides if n not in ours and not n.startswith(_FOREIGN_PARAMETERS))
    if unknown:
        node.get_logger().warning(f"ignoring unknown parameter(s) {unknown}; known: {sorted(SPECS)} and, for "
                                  f"each name in cameras, <name>.{{{','.join(CAMERA_SPECS)}}}")
    return {name: overrides[name].value for name in ours}


def declared_values(node: Node) -> dict[str, Any]:
    """The current values of our declared parameters, the cameras' own included (what configure reads)."""
    return {name: p.value for name, p in node._parameters.items() if name in SPECS or camera_spec(name)}


def declare_parameters(node: Node, *, check_files: bool,
                       on_change: Callable[[dict[str, Any]], None]) -> NodeConfig:
    """The plain node's way: validate the given parameters as a whole (a bad one raises), declare every
    one with its validated, resolved value, and route live changes to ``on_change``."""
    config = validate_config(given_parameters(node), check_files=check_files)
    # declared with the validated, resolved value (e.g. the shipped model's absolute path, a threshold
    # given as the integer 1 widened to 1.0, a camera's topic and core): `ros2 param get` shows what is used
    values = {spec.name: getattr(config, spec.name) for spec in PARAMETERS}
    values.update({f"{c.name}.{key}": getattr(c, key) for c in config.camera_configs for key in CAMERA_SPECS})
    _declare(node, values, on_change, descriptor)
    return config


def declare_for_configure(node: Node, *, on_change: Callable[[dict[str, Any]], None],
                          refuse: Callable[[str], str | None]) -> None:
    """The managed node's way: declare every parameter with its given value, unvalidated (configure
    validates), so that a bad one can be set right with ``ros2 param set`` and configure retried. Only
    ``executor`` (chosen once per process) is read-only; ``refuse(name)`` may refuse a set with a reason
    (the managed node refuses what configure reads while it is configured)."""
    given = given_parameters(node)
    # no ranges in the descriptors: rclpy would refuse to declare a value out of range, which then
    # could not be seen or set right; every set is still checked against the row's range (on_set)
    values = {spec.name: given.get(spec.name, spec.default) for spec in PARAMETERS}
    values.update({name: value for name, value in given.items() if camera_spec(name)})  # the given cameras'
    _declare(node, values, on_change,
             lambda spec: descriptor(spec, read_only=spec.name == "executor", ranged=False), refuse)


def _declare(node: Node, values: Mapping[str, Any], on_change: Callable[[dict[str, Any]], None],
             describe: Callable[[ParamSpec], ParameterDescriptor],
             refuse: Callable[[str], str | None] = lambda _: None) -> None:
    """Declare every table row with ``values``; then validate each set by its row (and ``refuse``) and
    hand the validated changes to ``on_change``; a rejected value never reaches it."""
    def on_set(parameters: list[Parameter]) -> SetParametersResult:
        changed: dict[str, Any] = {}
        for p in parameters:
            if p.name in SPECS or camera_spec(p.name):
                reason = refuse(p.name)
                if reason:
                    return SetParametersResult(successful=False, reason=reason)
                try:
                    changed[p.name] = validate_value(p.name, p.value)
                except ParameterError as exc:
                    given = p.type_.name.lower() if p.type_ is not None else "unknown"
                    reason = f"{exc} (given a value of type {given})"
                    return SetParametersResult(successful=False, reason=reason)
        on_change(changed)
        return SetParametersResult(successful=True)

    def widen(parameters: list[Parameter]) -> list[Parameter]:
        # the stored value of a double parameter stays a double when an integer is set (as at startup)
        return [Parameter(p.name, Parameter.Type.DOUBLE, float(p.value))
                if p.name in SPECS and SPECS[p.name].type == "double" and p.type_ == Parameter.Type.INTEGER
                else p for p in parameters]

    for name, value in values.items():  # the table's rows, then the cameras' own ("<camera>.<key>")
        spec = SPECS.get(name) or replace(CAMERA_SPECS[name.rpartition(".")[2]], name=name)
        node.declare_parameter(name, list(value) if isinstance(value, tuple) else value, describe(spec),
                               ignore_override=True)
    # after declaring: rclpy runs these callbacks for declarations too, which are no changes
    if hasattr(node, "add_pre_set_parameters_callback"):  # Iron and later; on Humble on_set widens
        node.add_pre_set_parameters_callback(widen)
    node.add_on_set_parameters_callback(on_set)


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

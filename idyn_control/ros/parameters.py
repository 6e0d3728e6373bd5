"""The node's parameter declarations: :data:`idyn_control.config.PARAMETERS` → rclpy.

The table, its validation and what it builds live in :mod:`idyn_control.config` (ROS-free,
shared with ``idyn-control check-config``); this module only turns each row into a
``declare_parameter`` call with a :class:`ParameterDescriptor` and reads values back.
"""

from __future__ import annotations

from typing import Any

from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor
from rclpy.exceptions import ParameterUninitializedException
from rclpy.node import Node
from rclpy.parameter import Parameter

from .. import config
from ..config import ParamSpec

_TYPES = {
    config.BOOL: Parameter.Type.BOOL,
    config.INT: Parameter.Type.INTEGER,
    config.DOUBLE: Parameter.Type.DOUBLE,
    config.STRING: Parameter.Type.STRING,
    config.DOUBLE_ARRAY: Parameter.Type.DOUBLE_ARRAY,
    config.STRING_ARRAY: Parameter.Type.STRING_ARRAY,
    config.INT_ARRAY: Parameter.Type.INTEGER_ARRAY,
    config.BOOL_ARRAY: Parameter.Type.BOOL_ARRAY,
}


def descriptor(spec: ParamSpec) -> ParameterDescriptor:
    """The ROS descriptor of one table row: type, description, range, read-only."""
    d = ParameterDescriptor(
        name=spec.name, type=_TYPES[spec.type].value, description=spec.description,
        read_only=spec.read_only)
    if spec.choices is not None:
        d.additional_constraints = "one of: " + ", ".join(spec.choices)
    if spec.range is not None:
        if spec.type == config.DOUBLE:
            d.floating_point_range = [FloatingPointRange(
                from_value=float(spec.range[0]), to_value=float(spec.range[1]), step=0.0)]
        elif spec.type == config.INT:
            d.integer_range = [IntegerRange(from_value=int(spec.range[0]), to_value=int(spec.range[1]), step=0)]
        else:  # arrays: rclpy has no element ranges; the node's callback checks them
            d.additional_constraints = f"each element in [{spec.range[0]:g}, {spec.range[1]:g}]"
    return d


def declare(node: Node, spec: ParamSpec) -> None:
    """Declare one parameter; a value from the params file / launch wins over the default.

    An empty-list default is declared as a typed, not-set parameter (rclpy would infer
    byte_array from ``[]``); :func:`value` returns the table default for it.
    """
    if isinstance(spec.default, (list, tuple)) and len(spec.default) == 0:
        node.declare_parameter(spec.name, _TYPES[spec.type], descriptor(spec))
    else:
        node.declare_parameter(spec.name, spec.default, descriptor(spec))


def declare_all(node: Node, formulation_specs: tuple[ParamSpec, ...] = ()) -> None:
    """Declare every parameter of the table, then the formulation's options."""
    for spec in config.PARAMETERS:
        declare(node, spec)
    for spec in formulation_specs:
        declare(node, spec)


def value(node: Node, spec: ParamSpec) -> Any:
    """The parameter's current value (lists for arrays; the default when not set)."""
    try:
        v = node.get_parameter(spec.name).value
    except ParameterUninitializedException:
        return list(spec.default) if isinstance(spec.default, (list, tuple)) else spec.default
    if v is None:
        return list(spec.default) if isinstance(spec.default, (list, tuple)) else spec.default
    return list(v) if spec.type.endswith("_array") else v


def read_all(node: Node, specs) -> dict[str, Any]:
    """Flat ``{name: value}`` of the given specs."""
    return {spec.name: value(node, spec) for spec in specs}


def python_value(param: Parameter) -> Any:
    """A Parameter's value as plain Python (lists for arrays)."""
    v = param.value
    return list(v) if isinstance(v, (list, tuple)) or hasattr(v, "tolist") else v

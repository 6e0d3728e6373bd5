"""One exception hierarchy; every error carries the offending values.

Callers catch :class:`IdynError` to handle anything this package raises on bad input.
"""

from __future__ import annotations

from typing import Iterable


class IdynError(Exception):
    """Base class of every error raised by idyn_control."""


class ModelError(IdynError):
    """The robot description cannot be turned into a model (malformed URDF, missing file)."""


class UnknownNameError(IdynError, KeyError):
    """A name (frame, joint, formulation, solver) is not one of the valid ones."""

    def __init__(self, kind: str, name: object, valid: Iterable[str]):
        self.kind = kind
        self.name = name
        self.valid = tuple(valid)
        super().__init__(f"unknown {kind} {name!r}; valid: {', '.join(self.valid) or '(none)'}")

    def __str__(self) -> str:  # KeyError would quote the message otherwise
        return self.args[0]


class ShapeError(IdynError, ValueError):
    """An array has the wrong shape."""

    def __init__(self, name: str, shape: tuple, expected: tuple):
        self.name = name
        self.shape = tuple(shape)
        self.expected = tuple(expected)
        super().__init__(f"{name} has shape {self.shape}, expected {self.expected}")


class NonFiniteError(IdynError, ValueError):
    """An input contains NaN or inf."""

    def __init__(self, name: str, indices: Iterable[int]):
        self.name = name
        self.indices = tuple(int(i) for i in indices)
        super().__init__(f"{name} has non-finite entries at indices {list(self.indices)}")


class ConfigError(IdynError, ValueError):
    """A configuration value is invalid."""

    def __init__(self, key: str, value: object, reason: str):
        self.key = key
        self.value = value
        super().__init__(f"{key}={value!r}: {reason}")

"""Inverse-dynamics formulations, selected by name.

    >>> from idyn_control import formulations
    >>> formulations.names()
    >>> f = formulations.make("qp_coulomb", model, dt=1e-3)
    >>> result = f.solve(q, v, qdd_des, active_contacts=["FL_FOOT", ...])

An unknown name raises :class:`idyn_control.errors.UnknownNameError` listing valid ones.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from ..errors import UnknownNameError
from ..model import RobotModel
from .base import Formulation, Result

#: name → "module:Class"; modules are imported on first use
_REGISTRY: dict[str, str] = {
    "rnea": "rnea:Rnea",
    "contact_lstsq": "contact_lstsq:ContactLstsq",
    "projected": "projected:Projected",
    "qp_coulomb": "qp_contact:QpCoulomb",
    "qp_noslip": "qp_contact:QpNoSlip",
    "lcp_noslip": "lcp_noslip:LcpNoSlip",
    "lcp_coulomb": "lcp_coulomb:LcpCoulomb",
    "wbc_qp": "wbc_qp:WbcQp",
    "pid": "pid:Pid",
    "pidc_qp": "pidc_qp:PidcQp",
    "pidc_qp_howsm": "pidc_qp:PidcQpHowsm",
    "pidcwcu": "pidc_qp:Pidcwcu",
    "sensed": "sensed:Sensed",
}


def register(name: str, target: str) -> None:
    """Register ``"module:Class"`` (module relative to this package) under ``name``."""
    _REGISTRY[name] = target


def names() -> tuple[str, ...]:
    """Names of every registered formulation."""
    return tuple(_REGISTRY)


def get(name: str) -> type[Formulation]:
    """The class registered under ``name``."""
    try:
        module, cls = _REGISTRY[name].split(":")
    except KeyError:
        raise UnknownNameError("formulation", name, _REGISTRY) from None
    return getattr(import_module(f".{module}", __name__), cls)


def has_compiled_backend(name: str) -> bool:
    """Whether formulation ``name`` can run compiled (it has the ``backend`` option); the
    others run in Python only."""
    return "backend" in get(name).defaults


def make(name: str, model: RobotModel, *, dt: float = 1e-3, **options: Any) -> Formulation:
    """Create formulation ``name`` for ``model`` with time step ``dt`` [s] and options."""
    return get(name)(model, dt=dt, **options)


__all__ = ["Formulation", "Result", "get", "make", "names", "register"]

"""Shared fixtures: real robots from the project's urdf/ and example-robot-data."""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import pytest

from idyn_control import robots

FLOATING = ("quadruped", "solo12", "anymal_c", "go2")
FIXED = ("panda", "ur5")
ALL_ROBOTS = FLOATING + FIXED


@lru_cache(maxsize=None)
def _load(name: str):
    return robots.load(name)


@pytest.fixture
def load_robot():
    """Return a function name → RobotModel (cached: models are read-only)."""
    return _load


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def random_state(model, rng, *, scale_v=1.0, scale_a=2.0):
    """A random (q, v, q̈_des) inside joint limits."""
    q = model.random_configuration(rng)
    v = rng.normal(0.0, scale_v, model.nv)
    a = rng.normal(0.0, scale_a, model.nv)
    return q, v, a


def standing_state(name, model):
    """Standing configuration of a legged robot, zero velocity and acceleration."""
    q = robots.standing_configuration(model, name)
    return q, np.zeros(model.nv), np.zeros(model.nv)

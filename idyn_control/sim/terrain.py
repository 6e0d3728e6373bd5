"""Rough terrain of seed 000 §7.5: a rigid height map with smooth bumps and per-patch friction.

"We also test the controllers on a rigid height map terrain with non-vertical surface
normals and varied surface friction [...] limiting bumps to 3 cm in height [...] Friction
values were selected [...] μ ~ U(0.1, 1.5)" (seed 000 §7.5, Fig. 13, Fig. 16).

:class:`HeightMap` is the ground truth both sides read: MuJoCo builds its ground from it
(:func:`~idyn_control.sim.mujoco_model.build_mujoco` ``terrain=``) and the controller gets
the local normal and μ under each stance foot from :meth:`HeightMap.surface_at`, as in
the paper ("controllers had access to identical data: [...] friction coefficients at
points of contact", §7.4). One MuJoCo geom has one friction, so the ground is tiled into
square patches, each a height-field geom with its own μ; the tiles share their edge
samples, so the surface is continuous across patches.

Heights are a sum of Gaussian bumps drawn from the seed, scaled so that the highest point
is ``bump_height_m`` above the flat level z = 0 (lower when it lies within ``border_m`` of
the edge), and faded to flat within
``flat_radius_m`` of the origin (where the robot stands up: :func:`heightmap_config` widens
it to the robot's feet, and the map with it). Between grid samples the
height is bilinear; the normal is constant per grid cell (from the cell's mean slope).

The map is ``size_m`` square; flat ground with μ = ``outside_mu`` surrounds it at z = 0,
and the bumps fade out over the last ``border_m`` before its edge (the fade is applied
after the scaling, so the map's inside does not depend on it). A robot that walks off the
map walks on; without the surrounding ground it fell off the world's edge (a straight trot
at 0.2 m/s reaches it in 5 s).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from ..errors import ConfigError, UnknownNameError
from ..robots import standing_configuration

TERRAINS = ("plane", "heightmap", "ramp", "block", "stairs")
#: the ramp's slope [°] by default, and the range the bridge, the demo and the CLI take
RAMP_SLOPE_DEG = 10.0
RAMP_SLOPE_RANGE_DEG = (1.0, 30.0)
#: the flat start reaches this far beyond the farthest foot [m] (foot spheres are ≤ 4 cm)
START_CLEARANCE_M = 0.07
#: the block's height by default, as a fraction of the robot's standing base height (terrain
#: "block": :class:`Block`)
BLOCK_HEIGHT_FRACTION = 0.15
#: the stairs' steps up (and as many down) by default, and each tread's length at least [m]
#: (terrain "stairs": :class:`Stairs`)
STAIR_STEPS = 3
STAIR_TREAD_M = 0.25
#: each stair's rise by default, as a fraction of the robot's standing base height
STAIR_RISE_FRACTION = 0.10
_UP = np.array([0.0, 0.0, 1.0])
_UP.flags.writeable = False


@dataclass(frozen=True)
class HeightMapConfig:
    """Parameters of a seeded height map (defaults: seed 000 §7.5).

    Attributes:
        size_m: side of the square terrain centred on the origin [m].
        spacing_m: grid spacing of the height samples [m].
        patch_m: side of a friction patch (one MuJoCo geom) [m]; a multiple of spacing_m.
        bump_height_m: highest point above the flat level [m] (seed 000: 3 cm).
        bump_sigma_m: range of the bumps' standard deviations [m].
        bumps_per_m2: bump density [1/m²].
        flat_radius_m: fully flat within this distance of the origin [m]; the bumps fade
            in over ``ramp_m`` beyond it.
        mu_range: Coulomb friction of a patch, uniform in [low, high] (seed 000: 0.1, 1.5).
        border_m: the bumps fade to flat over this distance before the map's edge [m].
        outside_mu: Coulomb friction of the flat ground around the map.
    """

    size_m: float = 2.0
    spacing_m: float = 0.01
    patch_m: float = 0.1
    bump_height_m: float = 0.03
    bump_sigma_m: tuple[float, float] = (0.05, 0.10)
    bumps_per_m2: float = 12.0
    flat_radius_m: float = 0.22
    ramp_m: float = 0.08
    mu_range: tuple[float, float] = (0.1, 1.5)
    border_m: float = 0.2
    outside_mu: float = 0.8

    def validate(self) -> None:
        for key in ("size_m", "spacing_m", "patch_m", "bump_height_m", "bumps_per_m2", "ramp_m", "border_m",
                    "outside_mu"):
            value = getattr(self, key)
            if not (np.isfinite(value) and value > 0.0):
                raise ConfigError(key, value, "must be finite and > 0")
        cells = self.patch_m / self.spacing_m
        if abs(cells - round(cells)) > 1e-9 or abs(self.size_m / self.patch_m - round(self.size_m / self.patch_m)) > 1e-9:
            raise ConfigError("patch_m", self.patch_m, "must be a multiple of spacing_m and divide size_m")
        lo, hi = self.mu_range
        if not (0.0 < lo <= hi and np.isfinite(hi)):
            raise ConfigError("mu_range", self.mu_range, "must satisfy 0 < low ≤ high < ∞")


class HeightMap:
    """A seeded rigid height map with per-patch friction (world frame, z up, [m]).

    Attributes:
        config: the :class:`HeightMapConfig`.
        seed: the seed it was drawn from (same seed → same terrain).
        heights: (n, n) samples [m], row i at y = y0 + i·spacing, column j at x = x0 + j·spacing.
        mu: (p, p) friction per patch, row along y, column along x.
        origin: (x0, y0), the corner of the grid [m].
    """

    def __init__(self, config: HeightMapConfig | None = None, seed: int = 0):
        c = config or HeightMapConfig()
        self.seed = int(seed)
        rng = np.random.default_rng(self.seed)
        X, Y = self._set_grid(c)
        half = 0.5 * c.size_m
        n_bumps = max(1, int(round(c.bumps_per_m2 * c.size_m**2)))
        centres = rng.uniform(-half, half, size=(n_bumps, 2))
        sigmas = rng.uniform(*c.bump_sigma_m, size=n_bumps)
        amplitudes = rng.uniform(0.5, 1.0, size=n_bumps)
        h = np.zeros_like(X)
        for (cx, cy), s, a in zip(centres, sigmas, amplitudes):
            h += a * np.exp(-((X - cx) ** 2 + (Y - cy) ** 2) / (2.0 * s * s))
        r = np.hypot(X, Y)
        fade = np.clip((r - c.flat_radius_m) / c.ramp_m, 0.0, 1.0)
        h *= fade * fade * (3.0 - 2.0 * fade)  # smoothstep: flat start, no kink
        self.heights = h * (c.bump_height_m / h.max())
        edge = np.clip((half - np.maximum(np.abs(X), np.abs(Y))) / c.border_m, 0.0, 1.0)
        self.heights *= edge * edge * (3.0 - 2.0 * edge)  # flat at the edge: the ground around is z = 0
        self.mu = rng.uniform(*c.mu_range, size=(self.n_patches, self.n_patches))
        self._set_normals()

    def _set_grid(self, config: HeightMapConfig) -> tuple[np.ndarray, np.ndarray]:
        """Validate ``config``, take it and its grid's sizes; the samples' (X, Y) [m]."""
        config.validate()
        self.config = c = config
        n = int(round(c.size_m / c.spacing_m)) + 1
        self.n_samples = n
        self.n_patches = int(round(c.size_m / c.patch_m))
        self.cells_per_patch = int(round(c.patch_m / c.spacing_m))
        half = 0.5 * c.size_m
        self.origin = (-half, -half)
        axis = np.linspace(-half, half, n)
        return np.meshgrid(axis, axis)  # X[i, j] = axis[j], Y[i, j] = axis[i]

    @property
    def label(self) -> str:
        """What the terrain is, for a log line."""
        return f"height map (seed {self.seed})"

    def _set_normals(self) -> None:
        # per grid cell: mean slope → unit normal (constant over the cell)
        s = self.config.spacing_m
        dhdx = 0.5 * (np.diff(self.heights, axis=1)[:-1] + np.diff(self.heights, axis=1)[1:]) / s
        dhdy = 0.5 * (np.diff(self.heights, axis=0)[:, :-1] + np.diff(self.heights, axis=0)[:, 1:]) / s
        normals = np.stack((-dhdx, -dhdy, np.ones_like(dhdx)), axis=-1)
        self.cell_normals = normals / np.linalg.norm(normals, axis=-1, keepdims=True)

    # ------------------------------------------------------------------ queries
    def _cell(self, x: float, y: float) -> tuple[int, int, float, float]:
        s = self.config.spacing_m
        u = (x - self.origin[0]) / s
        w = (y - self.origin[1]) / s
        last = self.n_samples - 2
        j = min(max(int(math.floor(u)), 0), last)
        i = min(max(int(math.floor(w)), 0), last)
        return i, j, min(max(u - j, 0.0), 1.0), min(max(w - i, 0.0), 1.0)

    def inside(self, x: float, y: float) -> bool:
        """Whether (x, y) is on the map (else on the flat ground around it)."""
        half = 0.5 * self.config.size_m
        return abs(x) <= half and abs(y) <= half

    def height(self, x: float, y: float) -> float:
        """Ground height at (x, y) [m] (bilinear between samples; 0 off the map)."""
        if not self.inside(x, y):
            return 0.0
        i, j, fu, fw = self._cell(x, y)
        h = self.heights
        return float((1 - fw) * ((1 - fu) * h[i, j] + fu * h[i, j + 1])
                     + fw * ((1 - fu) * h[i + 1, j] + fu * h[i + 1, j + 1]))

    def normal(self, x: float, y: float) -> np.ndarray:
        """Unit surface normal at (x, y), world frame (constant per grid cell)."""
        if not self.inside(x, y):
            return _UP
        i, j, _, _ = self._cell(x, y)
        return self.cell_normals[i, j]

    def patch(self, x: float, y: float) -> tuple[int, int]:
        """(row, column) of the friction patch containing (x, y)."""
        c = self.config
        p = self.n_patches - 1
        col = min(max(int(math.floor((x - self.origin[0]) / c.patch_m)), 0), p)
        row = min(max(int(math.floor((y - self.origin[1]) / c.patch_m)), 0), p)
        return row, col

    def friction(self, x: float, y: float) -> float:
        """Coulomb μ of the patch containing (x, y) (``outside_mu`` off the map)."""
        if not self.inside(x, y):
            return float(self.config.outside_mu)
        return float(self.mu[self.patch(x, y)])

    def surface_at(self, x: float, y: float) -> tuple[np.ndarray, float]:
        """(unit normal, μ) at (x, y): what the controller is told about a contact there.

        Both are piecewise constant (grid cell, patch), so a planted foot's values do not
        change from tick to tick and the controller's friction rows are rarely rebuilt.
        """
        return self.normal(x, y), self.friction(x, y)

    def tiles(self):
        """Yield (row, col, centre_xy, heights (m, m), μ) of every patch: one MuJoCo geom each."""
        c, m = self.config, self.cells_per_patch
        for row in range(self.n_patches):
            for col in range(self.n_patches):
                block = self.heights[row * m:row * m + m + 1, col * m:col * m + m + 1]
                centre = (self.origin[0] + (col + 0.5) * c.patch_m, self.origin[1] + (row + 0.5) * c.patch_m)
                yield row, col, centre, block, float(self.mu[row, col])


def _require_positive(**values: float) -> None:
    """A :class:`ConfigError` for the first of ``values`` that is not finite and > 0."""
    for key, value in values.items():
        if not (np.isfinite(value) and value > 0.0):
            raise ConfigError(key, value, "must be finite and > 0")


class Ramp(HeightMap):
    """A ramp to walk up and down (x forward from the start): flat within ``start_m`` of the
    origin, up at ``slope_deg`` over ``climb_m`` [m], a flat top of ``top_m``, down as
    steeply, then flat at z = 0 again; μ = ``mu`` everywhere. A :class:`HeightMap` (one
    height field per 0.5 m patch), so MuJoCo, the controller's surface data and the fall
    test read it as they read the rough map. Across the map the ramp fades to z = 0 over
    the last ``border_m``; the robot walks along its middle."""

    def __init__(self, slope_deg: float = RAMP_SLOPE_DEG, start_m: float = 0.3, climb_m: float = 0.6,
                 top_m: float = 0.4, mu: float = 0.8, border_m: float = 0.2):
        _require_positive(slope_deg=slope_deg, start_m=start_m, climb_m=climb_m, top_m=top_m, mu=mu)
        if slope_deg >= 45.0:
            raise ConfigError("slope_deg", slope_deg, "must be below 45°")
        patch = 0.5
        end = start_m + 2.0 * climb_m + top_m + 0.5  # [m] the far foot of the ramp, and room to walk on
        size = 2.0 * patch * math.ceil(end / patch)
        grade = math.tan(math.radians(slope_deg))
        rise = climb_m * grade
        self.slope_deg, self.start_m, self.climb_m, self.top_m, self.rise_m = slope_deg, start_m, climb_m, top_m, rise
        X, Y = self._set_grid(HeightMapConfig(size_m=size, patch_m=patch, bump_height_m=rise, flat_radius_m=start_m,
                                              mu_range=(mu, mu), border_m=border_m, outside_mu=mu))
        half = 0.5 * size
        top = start_m + climb_m + top_m
        h = np.clip(X - start_m, 0.0, climb_m) * grade - np.clip(X - top, 0.0, climb_m) * grade
        edge = np.clip((half - np.abs(Y)) / border_m, 0.0, 1.0)
        self.heights = h * (edge * edge * (3.0 - 2.0 * edge))
        self.mu = np.full((self.n_patches, self.n_patches), float(mu))
        self._set_normals()

    @property
    def label(self) -> str:
        return "ramp"


class Block(HeightMap):
    """A block to step onto and off (x forward from the start): flat within ``start_m`` of
    the origin, a vertical step up by ``rise_m`` [m], a flat top of ``top_m``, a vertical
    step down to z = 0; μ = ``mu`` everywhere. A :class:`HeightMap` like :class:`Ramp` (its
    faces are one grid spacing, 1 cm, wide); across the map the block ends ``border_m``
    before the map's edge, where the ground is flat. The robot walks along its middle."""

    def __init__(self, rise_m: float = 0.05, start_m: float = 0.3, top_m: float = 0.6, mu: float = 0.8,
                 border_m: float = 0.2):
        _require_positive(rise_m=rise_m, start_m=start_m, top_m=top_m, mu=mu)
        patch = 0.5
        end = start_m + top_m + 1.0  # [m] the far face, and room to walk on
        size = 2.0 * patch * math.ceil(end / patch)
        self.start_m, self.top_m, self.rise_m = start_m, top_m, rise_m
        X, Y = self._set_grid(HeightMapConfig(size_m=size, patch_m=patch, bump_height_m=rise_m, flat_radius_m=start_m,
                                              mu_range=(mu, mu), border_m=border_m, outside_mu=mu))
        on_top = (X >= start_m) & (X <= start_m + top_m) & (np.abs(Y) <= 0.5 * size - border_m)
        self.heights = np.where(on_top, rise_m, 0.0)
        self.mu = np.full((self.n_patches, self.n_patches), float(mu))
        self._set_normals()

    @property
    def label(self) -> str:
        return f"block ({100.0 * self.rise_m:.1f} cm)"


class Stairs(HeightMap):
    """A flight of stairs up and down (x forward from the start): flat within ``start_m`` of
    the origin, ``steps`` vertical steps up by ``rise_m`` [m] each ``tread_m`` apart, a
    landing of ``landing_m``, as many steps down, then flat at z = 0; μ = ``mu``
    everywhere. A :class:`HeightMap` like :class:`Block`; across the map the stairs end
    ``border_m`` before its edge. The robot walks along their middle."""

    def __init__(self, rise_m: float = 0.04, tread_m: float = STAIR_TREAD_M, steps: int = STAIR_STEPS,
                 start_m: float = 0.3, landing_m: float = 0.6, mu: float = 0.8, border_m: float = 0.2):
        _require_positive(rise_m=rise_m, tread_m=tread_m, start_m=start_m, landing_m=landing_m, mu=mu)
        if int(steps) != steps or steps < 1:
            raise ConfigError("steps", steps, "must be a whole number ≥ 1")
        patch = 0.5
        self.steps, self.tread_m, self.rise_m = int(steps), tread_m, rise_m
        self.start_m, self.landing_m = start_m, landing_m
        flight = (self.steps - 1) * tread_m  # [m] from the first face to the last one up
        self.top_end_m = start_m + flight + landing_m  # [m] the landing's far edge
        end = self.top_end_m + flight + 1.0  # [m] the last face down, and room to walk on
        size = 2.0 * patch * math.ceil(end / patch)
        X, Y = self._set_grid(HeightMapConfig(size_m=size, patch_m=patch, bump_height_m=self.steps * rise_m,
                                              flat_radius_m=start_m, mu_range=(mu, mu), border_m=border_m,
                                              outside_mu=mu))
        up = np.floor((X - start_m) / tread_m + 1e-9) + 1.0
        down = np.floor((self.top_end_m + flight - X) / tread_m + 1e-9) + 1.0
        level = np.clip(np.minimum(up, down), 0.0, self.steps)
        self.heights = np.where(np.abs(Y) <= 0.5 * size - border_m, level * rise_m, 0.0)
        self.mu = np.full((self.n_patches, self.n_patches), float(mu))
        self._set_normals()

    @property
    def label(self) -> str:
        return f"stairs ({self.steps} × {100.0 * self.rise_m:.1f} cm)"

    @property
    def faces_m(self) -> list[float]:
        """The x of every face [m]: the steps up, then the steps down."""
        flight = (self.steps - 1) * self.tread_m
        up = [self.start_m + k * self.tread_m for k in range(self.steps)]
        return up + [self.top_end_m + flight - k * self.tread_m for k in reversed(range(self.steps))]


def block_height(model, ref, height_m: float | None = None, terrain: str = "block") -> float:
    """Terrain "block"'s height, or each stair's rise on terrain "stairs" [m]: ``height_m``,
    or None: ``BLOCK_HEIGHT_FRACTION`` (``STAIR_RISE_FRACTION``) of the standing base height
    of the robot ``model`` of ``ref`` (its file or spec; 0.05 m for a robot without a
    floating base, which walks nowhere)."""
    if height_m is not None:
        return float(height_m)
    if not model.floating_base:
        return 0.05
    fraction = STAIR_RISE_FRACTION if terrain == "stairs" else BLOCK_HEIGHT_FRACTION
    return round(fraction * float(standing_configuration(model, ref)[2]), 4)


def heightmap_config(footprint_m: float = 0.0) -> HeightMapConfig:
    """Seed 000's map for a robot whose feet stand within ``footprint_m`` [m] of the origin
    (:func:`~idyn_control.robots.footprint_radius`): the flat start covers them with
    ``START_CLEARANCE_M`` to spare, and the map grows by as much on every side, so the rough
    ring between the start and the border is as wide as the paper's. The project
    quadruped's feet (0.15 m) fit the default's 0.22 m: its maps are seed 000's. Before, the
    feet of larger robots started inside the bumps (HyQ's 29 mm deep on seed 0, ANYmal C's
    15 mm, B1's 16 mm), MuJoCo pushed them out sideways, and HyQ fell at 2.6 s."""
    base = HeightMapConfig()
    if not (np.isfinite(footprint_m) and footprint_m >= 0.0):
        raise ConfigError("footprint_m", footprint_m, "must be finite and ≥ 0 [m]")
    grow = footprint_m + START_CLEARANCE_M - base.flat_radius_m
    if grow <= 0.0:
        return base
    patches = math.ceil((base.size_m + 2.0 * grow) / base.patch_m - 1e-9)
    return replace(base, flat_radius_m=base.flat_radius_m + grow, size_m=round(patches * base.patch_m, 9))


def make_terrain(name: str, seed: int = 0, footprint_m: float = 0.0,
                 slope_deg: float = RAMP_SLOPE_DEG, rise_m: float = 0.05) -> HeightMap | None:
    """``"plane"`` → None (the flat ground plane); ``"heightmap"`` → a seeded :class:`HeightMap`
    whose flat start holds feet within ``footprint_m`` [m] of the origin (:func:`heightmap_config`);
    ``"ramp"`` → a :class:`Ramp` up and down at ``slope_deg``, starting ``START_CLEARANCE_M`` beyond
    those feet, its climb and top at least as long as the robot (twice ``footprint_m``):
    ANYmal C's feet spanned the default's whole climb and top at once, and with ``wbc_qp``
    it fell at the crest (``seed`` unused); ``"block"`` → :class:`Block`, ``rise_m``
    [m] high, its near face ``2 START_CLEARANCE_M`` beyond those feet, its top long enough for
    all four feet at once (2.5 ``footprint_m``, at least 0.6 m); ``"stairs"`` → :class:`Stairs`,
    ``STAIR_STEPS`` steps of ``rise_m`` up and down, placed as the block, each tread as long
    as the robot's reach (``footprint_m``, at least ``STAIR_TREAD_M``) and a landing as the
    block's top."""
    if name == "plane":
        return None
    if name == "heightmap":
        return HeightMap(heightmap_config(footprint_m), seed=seed)
    if name == "ramp":
        reach = max(footprint_m, 0.0)
        return Ramp(slope_deg=slope_deg, start_m=reach + START_CLEARANCE_M, climb_m=max(0.6, 2.0 * reach),
                    top_m=max(0.4, 2.0 * reach))
    if name == "block":
        reach = max(footprint_m, 0.0)
        return Block(rise_m=rise_m, start_m=reach + 2.0 * START_CLEARANCE_M, top_m=max(0.6, 2.5 * reach))
    if name == "stairs":
        reach = max(footprint_m, 0.0)
        return Stairs(rise_m=rise_m, tread_m=max(STAIR_TREAD_M, reach), start_m=reach + 2.0 * START_CLEARANCE_M,
                      landing_m=max(0.6, 2.5 * reach))
    raise UnknownNameError("terrain", name, TERRAINS)

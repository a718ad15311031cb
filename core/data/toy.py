"""Seeded synthetic datasets: 1-D regression with gaps, two moons, two spirals.

The 1-D sets carry a dense grid beyond the training range plus the noiseless
function on it, for drawing predictive bands and seeing in-between/outside
uncertainty.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from core.data.dataset import Dataset, make_dataset
from core.data.params import interval_list, merge_params, non_negative_float, point_count
from core.errors import DataError

# ---------------------------------------------------------------- 1-D regression

SINE_GAPS_DEFAULTS = {
    "n": 40,
    "n_pool": 500,
    "noise": 0.02,
    "gaps": ((0.25, 0.45), (0.65, 0.8)),
    "n_test": 200,
    "n_grid": 400,
}
SINE_RANGE = (0.0, 1.0)
SINE_GRID = (-0.5, 1.5)

CUBIC_DEFAULTS = {"n": 40, "noise": 3.0, "intervals": ((-4.0, -2.0), (2.0, 4.0)), "n_test": 200, "n_grid": 400}
CUBIC_RANGE = (-6.0, 6.0)  # also the grid span

HETERO_DEFAULTS = {"n": 200, "noise": 0.05, "noise_slope": 0.1, "n_test": 200, "n_grid": 400}
HETERO_RANGE = (-4.0, 4.0)
HETERO_GRID = (-6.0, 6.0)


def sine_function(x: np.ndarray, eps: np.ndarray | float = 0.0) -> np.ndarray:
    """x + 0.3 sin(2 pi (x+e)) + 0.3 sin(4 pi (x+e)) + e; e=0 is the noiseless curve."""
    shifted = x + eps
    return x + 0.3 * np.sin(2 * np.pi * shifted) + 0.3 * np.sin(4 * np.pi * shifted) + eps


def _outside(x: np.ndarray, intervals: list) -> np.ndarray:
    mask = np.ones(x.shape, dtype=bool)
    for a, b in intervals:
        mask &= ~((x >= a) & (x <= b))
    return mask


def _regression_1d(name: str, x_train, y_train, x_test, y_test, grid, grid_mean, params: dict) -> Dataset:
    return make_dataset(
        name=name,
        task="regression",
        x_train=x_train[:, None],
        y_train=y_train,
        x_test=x_test[:, None],
        y_test=y_test,
        source="generated",
        input_shape=(1,),
        params=params,
        x_grid=grid[:, None].astype(np.float32),
        y_grid_mean=grid_mean.astype(np.float32),
    )


def _sine_gaps_params(given: dict) -> tuple:
    name = "toy-sine-gaps"
    p = merge_params(name, SINE_GAPS_DEFAULTS, given)
    return (
        p,
        point_count(name, "n", p["n"]),
        point_count(name, "n_pool", p["n_pool"]),
        non_negative_float(name, "noise", p["noise"]),
        interval_list(name, "gaps", p["gaps"], *SINE_RANGE),
        point_count(name, "n_test", p["n_test"]),
        point_count(name, "n_grid", p["n_grid"], minimum=2),
    )


def make_sine_gaps(seed: int = 0, **given: Any) -> Dataset:
    name = "toy-sine-gaps"
    p, n, n_pool, noise, gaps, n_test, n_grid = _sine_gaps_params(given)
    rng = np.random.default_rng(seed)
    # A pool of points on [0, 1]; the gaps are emptied and n points kept from the rest.
    pool = rng.uniform(*SINE_RANGE, size=n_pool)
    pool = pool[_outside(pool, gaps)]
    if len(pool) < n:
        raise DataError(
            f"{name}: only {len(pool)} of n_pool={n_pool} points fall outside the "
            f"gaps {gaps}; lower n ({n}) or raise n_pool"
        )
    x_train = np.sort(rng.choice(pool, size=n, replace=False))
    y_train = sine_function(x_train, rng.normal(0.0, noise, size=n))
    x_test = rng.uniform(*SINE_RANGE, size=n_test)  # fresh points, gaps included
    y_test = sine_function(x_test, rng.normal(0.0, noise, size=n_test))
    grid = np.linspace(*SINE_GRID, n_grid)
    params = {**p, "gaps": [list(g) for g in gaps]}
    return _regression_1d(name, x_train, y_train, x_test, y_test, grid, sine_function(grid), params)


def _cubic_params(given: dict) -> tuple:
    name = "toy-cubic"
    p = merge_params(name, CUBIC_DEFAULTS, given)
    return (
        p,
        point_count(name, "n", p["n"]),
        non_negative_float(name, "noise", p["noise"]),
        interval_list(name, "intervals", p["intervals"], *CUBIC_RANGE),
        point_count(name, "n_test", p["n_test"]),
        point_count(name, "n_grid", p["n_grid"], minimum=2),
    )


def make_cubic(seed: int = 0, **given: Any) -> Dataset:
    name = "toy-cubic"
    p, n, noise, intervals, n_test, n_grid = _cubic_params(given)
    rng = np.random.default_rng(seed)
    # Split n over the intervals in proportion to their lengths.
    lengths = np.array([b - a for a, b in intervals])
    per_interval = np.floor(n * lengths / lengths.sum()).astype(int)
    per_interval[: n - per_interval.sum()] += 1
    x_train = np.sort(np.concatenate([rng.uniform(a, b, size=k) for (a, b), k in zip(intervals, per_interval)]))
    y_train = x_train**3 + rng.normal(0.0, noise, size=n)
    # Test points span the training hull, so the gap between intervals is tested too.
    hull = (intervals[0][0], intervals[-1][1])
    x_test = rng.uniform(*hull, size=n_test)
    y_test = x_test**3 + rng.normal(0.0, noise, size=n_test)
    grid = np.linspace(*CUBIC_RANGE, n_grid)
    params = {**p, "intervals": [list(i) for i in intervals]}
    return _regression_1d(name, x_train, y_train, x_test, y_test, grid, grid**3, params)


def _hetero_params(given: dict) -> tuple:
    name = "toy-hetero"
    p = merge_params(name, HETERO_DEFAULTS, given)
    return (
        p,
        point_count(name, "n", p["n"]),
        non_negative_float(name, "noise", p["noise"]),
        non_negative_float(name, "noise_slope", p["noise_slope"]),
        point_count(name, "n_test", p["n_test"]),
        point_count(name, "n_grid", p["n_grid"], minimum=2),
    )


def make_hetero(seed: int = 0, **given: Any) -> Dataset:
    """sin(x) with noise std = noise + noise_slope * |x|: uncertainty that grows with |x|."""
    name = "toy-hetero"
    p, n, noise, slope, n_test, n_grid = _hetero_params(given)
    rng = np.random.default_rng(seed)

    def sample(count: int) -> tuple:
        x = rng.uniform(*HETERO_RANGE, size=count)
        return x, np.sin(x) + rng.normal(0.0, 1.0, size=count) * (noise + slope * np.abs(x))

    x_train, y_train = sample(n)
    order = np.argsort(x_train)
    x_test, y_test = sample(n_test)
    grid = np.linspace(*HETERO_GRID, n_grid)
    return _regression_1d(name, x_train[order], y_train[order], x_test, y_test, grid, np.sin(grid), p)


def hetero_noise_std(
    x: np.ndarray, noise: float = HETERO_DEFAULTS["noise"], noise_slope: float = HETERO_DEFAULTS["noise_slope"]
) -> np.ndarray:
    """The true noise std of toy-hetero at x (for comparing predicted bands)."""
    return noise + noise_slope * np.abs(x)


# ---------------------------------------------------------------- 2-D classification

CLASSIFICATION_2D_DEFAULTS = {"n": 500, "noise": 0.1, "n_test": 500}


def _balanced_counts(total: int) -> tuple[int, int]:
    return total - total // 2, total // 2


def _moons(count: int, noise: float, rng: np.random.Generator) -> tuple:
    n_outer, n_inner = _balanced_counts(count)
    t_outer = rng.uniform(0.0, np.pi, size=n_outer)
    t_inner = rng.uniform(0.0, np.pi, size=n_inner)
    outer = np.stack([np.cos(t_outer), np.sin(t_outer)], axis=1)
    inner = np.stack([1.0 - np.cos(t_inner), 0.5 - np.sin(t_inner)], axis=1)
    x = np.concatenate([outer, inner]) + rng.normal(0.0, noise, size=(count, 2))
    y = np.concatenate([np.zeros(n_outer), np.ones(n_inner)]).astype(np.int64)
    order = rng.permutation(count)
    return x[order], y[order]


def _spirals(count: int, noise: float, rng: np.random.Generator) -> tuple:
    """Two interleaved arms; the second is the first rotated by pi. Scaled to about [-1, 1]."""
    counts = _balanced_counts(count)
    xs, ys = [], []
    for label, k in enumerate(counts):
        # sqrt spreads points evenly along the arm instead of crowding the centre
        turn = np.sqrt(rng.uniform(0.0, 1.0, size=k)) * 3.0 * np.pi
        radius = turn / (3.0 * np.pi)
        angle = turn + label * np.pi
        xs.append(np.stack([radius * np.cos(angle), radius * np.sin(angle)], axis=1))
        ys.append(np.full(k, label, dtype=np.int64))
    x = np.concatenate(xs) + rng.normal(0.0, noise, size=(count, 2))
    y = np.concatenate(ys)
    order = rng.permutation(count)
    return x[order], y[order]


def _2d_params(name: str, given: dict) -> tuple:
    p = merge_params(name, CLASSIFICATION_2D_DEFAULTS, given)
    return (
        p,
        point_count(name, "n", p["n"], minimum=2),
        point_count(name, "n_test", p["n_test"], minimum=2),
        non_negative_float(name, "noise", p["noise"]),
    )


def _make_2d(name: str, sampler, seed: int, given: dict) -> Dataset:
    p, n, n_test, noise = _2d_params(name, given)
    rng = np.random.default_rng(seed)
    x_train, y_train = sampler(n, noise, rng)
    x_test, y_test = sampler(n_test, noise, rng)
    return make_dataset(
        name=name,
        task="classification",
        x_train=x_train,
        y_train=y_train,
        x_test=x_test,
        y_test=y_test,
        source="generated",
        input_shape=(2,),
        n_classes=2,
        class_names=("0", "1"),
        params=p,
    )


def make_two_moons(seed: int = 0, **given: Any) -> Dataset:
    return _make_2d("two-moons", _moons, seed, given)


def make_two_spirals(seed: int = 0, **given: Any) -> Dataset:
    return _make_2d("two-spirals", _spirals, seed, given)


GENERATORS = {
    "toy-sine-gaps": make_sine_gaps,
    "toy-cubic": make_cubic,
    "toy-hetero": make_hetero,
    "two-moons": make_two_moons,
    "two-spirals": make_two_spirals,
}
# Each generator's rules on its parameters, applied without generating anything (check_params).
PARAMETER_RULES = {
    "toy-sine-gaps": _sine_gaps_params,
    "toy-cubic": _cubic_params,
    "toy-hetero": _hetero_params,
    "two-moons": lambda given: _2d_params("two-moons", given),
    "two-spirals": lambda given: _2d_params("two-spirals", given),
}


def check_params(name: str, given: dict) -> None:
    """DataError when the generator `name` would refuse `given` (an unknown name listing the valid ones,
    a wrong type, a value out of range), found before anything is drawn: a form checks what is typed.
    A rule that needs the draws (toy-sine-gaps: enough pool points outside the gaps) is checked by the
    generator only."""
    if name not in PARAMETER_RULES:
        raise DataError(f"{name!r} takes no generator parameters; only {', '.join(PARAMETER_RULES)} do")
    PARAMETER_RULES[name](dict(given))


# Each generator's default parameters (what a set is when nothing is given).
GENERATOR_DEFAULTS = {
    "toy-sine-gaps": SINE_GAPS_DEFAULTS,
    "toy-cubic": CUBIC_DEFAULTS,
    "toy-hetero": HETERO_DEFAULTS,
    "two-moons": CLASSIFICATION_2D_DEFAULTS,
    "two-spirals": CLASSIFICATION_2D_DEFAULTS,
}
GENERATED_SIZES = {
    "toy-sine-gaps": (SINE_GAPS_DEFAULTS["n"], SINE_GAPS_DEFAULTS["n_test"]),
    "toy-cubic": (CUBIC_DEFAULTS["n"], CUBIC_DEFAULTS["n_test"]),
    "toy-hetero": (HETERO_DEFAULTS["n"], HETERO_DEFAULTS["n_test"]),
    "two-moons": (CLASSIFICATION_2D_DEFAULTS["n"], CLASSIFICATION_2D_DEFAULTS["n_test"]),
    "two-spirals": (CLASSIFICATION_2D_DEFAULTS["n"], CLASSIFICATION_2D_DEFAULTS["n_test"]),
}

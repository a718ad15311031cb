"""Generated datasets: seeding, gaps, grids, parameter validation, 2-D sets."""

from __future__ import annotations

import numpy as np
import pytest

from core.data import load_dataset
from core.data.toy import sine_function
from core.errors import DataError

TOY_1D = ["toy-sine-gaps", "toy-cubic", "toy-hetero"]
TOY_2D = ["two-moons", "two-spirals"]


@pytest.mark.parametrize("name", TOY_1D + TOY_2D)
def test_same_seed_same_data_different_seed_different(name):
    a, b, c = (load_dataset(name, seed=s) for s in (0, 0, 1))
    np.testing.assert_array_equal(a.x_train, b.x_train)
    np.testing.assert_array_equal(a.y_test, b.y_test)
    assert a.fingerprint == b.fingerprint != c.fingerprint
    assert not np.array_equal(a.x_train, c.x_train)
    assert a.source == "generated" and a.x_train.dtype == np.float32


@pytest.mark.parametrize("name", TOY_1D)
def test_1d_sets_have_grid_beyond_training_range(name):
    ds = load_dataset(name)
    assert ds.task == "regression" and ds.input_shape == (1,) and ds.x_train.shape[1] == 1
    assert ds.x_grid.shape[1] == 1 and ds.y_grid_mean.shape == (len(ds.x_grid),)
    assert ds.x_grid.min() < ds.x_train.min() and ds.x_grid.max() > ds.x_train.max()
    assert np.all(np.diff(ds.x_grid[:, 0]) > 0)
    assert ds.target_mean == 0.0 and ds.target_std == 1.0


def test_sine_gaps_have_no_training_points_and_grid_covers_them():
    gaps = [(0.1, 0.3), (0.6, 0.9)]
    ds = load_dataset("toy-sine-gaps", gaps=gaps, n=30, seed=3)
    x = ds.x_train[:, 0]
    assert len(x) == 30 and x.min() >= 0.0 and x.max() <= 1.0
    for a, b in gaps:
        assert not np.any((x >= a) & (x <= b))
        grid = ds.x_grid[:, 0]
        assert np.sum((grid > a) & (grid < b)) >= 10
    # The default gaps are respected too.
    default = load_dataset("toy-sine-gaps")
    for a, b in [(0.25, 0.45), (0.65, 0.8)]:
        assert not np.any((default.x_train >= a) & (default.x_train <= b))


def test_sine_grid_mean_is_noiseless_function():
    ds = load_dataset("toy-sine-gaps")
    np.testing.assert_allclose(ds.y_grid_mean, sine_function(ds.x_grid[:, 0]), atol=1e-6)
    noiseless = load_dataset("toy-sine-gaps", noise=0.0)
    np.testing.assert_allclose(noiseless.y_train, sine_function(noiseless.x_train[:, 0]), atol=1e-5)


def test_cubic_training_points_in_two_intervals():
    ds = load_dataset("toy-cubic")
    x = ds.x_train[:, 0]
    assert np.all(((x >= -4) & (x <= -2)) | ((x >= 2) & (x <= 4)))
    assert np.sum(x < 0) == np.sum(x > 0) == 20
    assert ds.x_grid.min() == -6 and ds.x_grid.max() == 6
    np.testing.assert_allclose(ds.y_grid_mean, ds.x_grid[:, 0] ** 3, rtol=1e-5)


def test_hetero_noise_grows_with_distance_from_zero():
    ds = load_dataset("toy-hetero", n=4000)
    x, residual = ds.x_train[:, 0], ds.y_train - np.sin(ds.x_train[:, 0])
    inner, outer = residual[np.abs(x) < 1], residual[np.abs(x) > 3]
    assert outer.std() > 2 * inner.std()


@pytest.mark.parametrize(
    "params, fragment",
    [
        ({"n": 0}, "n must be"),
        ({"noise": -1.0}, "noise"),
        ({"gaps": [(0.5, 1.4)]}, "gaps"),
        ({"gaps": [(0.2, 0.5), (0.4, 0.6)]}, "overlap"),
        ({"n": 480}, "n_pool"),
        ({"bogus": 1}, "bogus"),
    ],
)
def test_sine_gap_params_validated(params, fragment):
    with pytest.raises(DataError, match=fragment):
        load_dataset("toy-sine-gaps", **params)


def test_params_rejected_for_non_generated_sets():
    with pytest.raises(DataError, match="no generator parameters"):
        load_dataset("mnist-small", n=10)


@pytest.mark.parametrize("name", TOY_2D)
def test_2d_sets_shapes_and_balance(name):
    ds = load_dataset(name, n=301, n_test=100, noise=0.05)
    assert ds.x_train.shape == (301, 2) and ds.x_test.shape == (100, 2)
    assert ds.n_classes == 2 and ds.y_train.dtype == np.int64
    assert np.bincount(ds.y_train).tolist() == [151, 150]
    assert np.bincount(ds.y_test).tolist() == [50, 50]
    assert np.abs(ds.x_train).max() < 3


def test_two_moons_noiseless_points_lie_on_arcs():
    ds = load_dataset("two-moons", noise=0.0)
    outer = ds.x_train[ds.y_train == 0]
    inner = ds.x_train[ds.y_train == 1]
    np.testing.assert_allclose(np.hypot(*outer.T), 1.0, atol=1e-5)
    np.testing.assert_allclose(np.hypot(inner[:, 0] - 1.0, inner[:, 1] - 0.5), 1.0, atol=1e-5)


def test_two_spirals_arms_are_point_symmetric():
    ds = load_dataset("two-spirals", noise=0.0, n=2000)
    radius = np.hypot(*ds.x_train.T)
    assert radius.max() <= 1.0 + 1e-6
    # Each class-1 point is a class-0 arm point rotated by pi: same radius-angle relation.
    for label, offset in ((0, 0.0), (1, np.pi)):
        pts = ds.x_train[ds.y_train == label]
        r = np.hypot(*pts.T)
        expected_angle = r * 3 * np.pi + offset
        diff = np.angle(np.exp(1j * (np.arctan2(pts[:, 1], pts[:, 0]) - expected_angle)))
        assert np.abs(diff[r > 0.05]).max() < 1e-3


@pytest.mark.parametrize("name", ["toy-sine-gaps", "toy-cubic", "toy-hetero", "two-moons", "two-spirals"])
@pytest.mark.parametrize(
    "given",
    [
        {},
        {"bogus": 3},
        {"noise": "abc"},
        {"n": -5},
        {"n": 2.5},
        {"n_test": 0},
        {"noise": -1.0},
        {"n": 30, "noise": 0.2},
        {"gaps": [[0.5, 0.2]]},
        {"intervals": "x"},
    ],
)
def test_check_params_refuses_exactly_what_the_generator_refuses(name, given):
    """The Train form checks generator parameters as they are typed with the generator's own rules."""
    from core.data import toy
    from core.errors import DataError

    try:
        toy.GENERATORS[name](seed=0, **given)
    except DataError as exc:
        with pytest.raises(DataError) as caught:
            toy.check_params(name, given)
        assert str(caught.value) == str(exc)
    else:
        toy.check_params(name, given)


def test_check_params_draws_nothing():
    import tracemalloc

    from core.data import toy

    # Generating these would need terabytes (100,000 points: megabytes): each is refused by its count
    # limit, or checked, with nothing allocated. Memory, not a wall clock, so a loaded machine cannot
    # fail it. One call first, so the modules it imports on first use are not counted.
    toy.check_params("two-moons", {"n": 10})
    tracemalloc.start()
    try:
        with pytest.raises(DataError, match="BNN_MAX_GENERATED_POINTS"):
            toy.check_params("two-moons", {"n": 10**12})
        toy.check_params("two-moons", {"n": 100_000})  # at the limit: checked, not generated
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 100_000  # 100,000 two-moons points alone are 1.6 MB

"""Out-of-distribution inputs."""

from __future__ import annotations

import numpy as np
import pytest

from core.data import OOD_SYNTHETIC, load_dataset, load_ood, ood_pairs
from core.errors import DataError


@pytest.fixture(scope="module")
def mnist_small():
    return load_dataset("mnist-small")


def test_other_dataset_gives_its_test_inputs(mnist_small):
    fashion = load_dataset("fashion-mnist-small")
    ood = load_ood(mnist_small, "fashion-mnist-small")
    assert ood.dtype == np.float32 and ood.shape == (2000, 784)
    np.testing.assert_array_equal(ood, fashion.x_test)
    subset = load_ood(mnist_small, "fashion-mnist-small", n=100, seed=3)
    assert subset.shape == (100, 784)
    assert all(any(np.array_equal(r, f) for f in fashion.x_test[:2000]) for r in subset[:3])


def test_inverted_and_rotated_images(mnist_small):
    inverted = load_ood(mnist_small, "inverted")
    np.testing.assert_allclose(inverted, 1.0 - mnist_small.x_test)
    rotated = load_ood(mnist_small, "rotated").reshape(-1, 28, 28)
    original = mnist_small.x_test.reshape(-1, 28, 28)
    # rot90 counter-clockwise: new[i, j] = old[j, 27 - i]
    assert rotated[5, 3, 10] == original[5, 10, 27 - 3]
    np.testing.assert_array_equal(rotated[7], np.rot90(original[7]))
    assert not np.array_equal(rotated, original)


def test_uniform_noise_in_input_range(mnist_small):
    noise = load_ood(mnist_small, "uniform-noise", n=500, seed=1)
    assert noise.shape == (500, 784) and noise.dtype == np.float32
    assert noise.min() >= 0.0 and noise.max() <= 1.0 and noise.std() > 0.2
    again = load_ood(mnist_small, "uniform-noise", n=500, seed=1)
    np.testing.assert_array_equal(noise, again)
    tabular = load_dataset("two-moons")
    tab_noise = load_ood(tabular, "uniform-noise", n=200)
    assert tab_noise.shape == (200, 2)
    assert np.all(tab_noise >= tabular.x_train.min(axis=0) - 1e-6)
    assert np.all(tab_noise <= tabular.x_train.max(axis=0) + 1e-6)


def test_dimension_mismatch_names_both_shapes(mnist_small):
    moons = load_dataset("two-moons")
    with pytest.raises(DataError, match=r"\(2,\).*\(28, 28\)"):
        load_ood(mnist_small, "two-moons")
    with pytest.raises(DataError, match="image dataset"):
        load_ood(moons, "rotated")


def test_unknown_ood_name_lists_synthetic(mnist_small):
    with pytest.raises(DataError, match="uniform-noise"):
        load_ood(mnist_small, "fashion-mnst-small")
    assert OOD_SYNTHETIC == ("uniform-noise", "inverted", "rotated")


def test_too_many_requested(mnist_small):
    with pytest.raises(DataError, match="only 2000"):
        load_ood(mnist_small, "inverted", n=5000)


def test_ood_pairs_standard(isolated_data_env):
    pairs = ood_pairs()
    assert ("mnist", "fashion-mnist") in pairs and ("fashion-mnist-small", "mnist-small") in pairs
    assert not any("kmnist" in pair for pair in pairs)

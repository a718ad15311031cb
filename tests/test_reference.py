"""The NUTS reference posterior (core.reference): exactness on a closed-form posterior, diagnostics,
the cache (round trip, corruption), the CLI, and the message when Pyro is missing.

Pyro is optional (requirements-reference.txt): without it these tests skip, except under CI=true,
where they fail.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
import torch

from core.cli import main
from core.data.dataset import make_dataset
from core.reference import (
    PyroMissingError,
    ReferenceConfig,
    ReferenceStore,
    ReferenceStoreError,
    compute_reference,
    diagnostic_warnings,
    require_pyro,
    run_nuts,
)
from core.reference.posterior import split_rhat_and_ess
from tests.support import require_module


@pytest.fixture
def pyro_installed():
    require_module("pyro", "pip install -r requirements-reference.txt")


def linear_dataset(n=30, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 2))
    y = x @ np.array([1.5, -0.7]) + 0.3 + 0.5 * rng.normal(size=n)
    return make_dataset(
        name="linear", task="regression", x_train=x, y_train=y, x_test=x[:5], y_test=y[:5], source="generated"
    )


@pytest.mark.slow  # NUTS chains: 11 s CPU
def test_nuts_matches_the_closed_form_posterior_of_bayesian_linear_regression(pyro_installed):
    # No hidden layer and a fixed noise std: the posterior of [w1, w2, b] is Gaussian in closed form.
    dataset = linear_dataset()
    noise, prior_var = 0.5, 2.0
    config = ReferenceConfig(
        dataset="linear",
        hidden=(),
        noise_std=noise,
        prior_variance=prior_var,
        samples=300,
        warmup=100,
        chains=2,
        seed=1,
    )
    posterior = run_nuts(config, dataset, progress=None)
    phi = np.concatenate([dataset.x_train, np.ones((dataset.n_train, 1))], axis=1).astype(np.float64)
    precision = phi.T @ phi / noise**2 + np.eye(3) / prior_var
    cov = np.linalg.inv(precision)
    mean = cov @ phi.T @ dataset.y_train.astype(np.float64) / noise**2
    draws = posterior.weights[0][:, 0, :]  # (S, 3)
    assert draws.shape == (600, 3)
    ess = split_rhat_and_ess(draws.reshape(2, 300, 3))[1]
    stderr = np.sqrt(np.diag(cov) / ess)
    assert np.all(np.abs(draws.mean(axis=0) - mean) < 4 * stderr)
    assert np.allclose(np.cov(draws.T), cov, rtol=0.25, atol=0.1 * np.sqrt(np.outer(np.diag(cov), np.diag(cov))).max())
    # The predictive bands are the mixture of N(f_s(x), noise^2): at any x, mean phi^T m, var phi^T S phi + noise^2.
    x = np.array([[0.5, -1.0]])
    bands = posterior.bands(x, (0.05, 0.95))
    phi_x = np.array([0.5, -1.0, 1.0])
    sd = np.sqrt(phi_x @ cov @ phi_x + noise**2)
    assert bands["mean"][0] == pytest.approx(phi_x @ mean, abs=4 * sd / np.sqrt(ess.min()))
    assert bands["q0.95"][0] - bands["q0.05"][0] == pytest.approx(2 * 1.6449 * sd, rel=0.08)
    assert posterior.diagnostics["noise_rhat"] is None
    assert posterior.diagnostics["function_rhat_max"] < 1.05


def test_rhat_and_ess_flag_chains_that_disagree(pyro_installed):
    rng = np.random.default_rng(0)
    mixed = rng.normal(size=(2, 400, 3))
    rhat, ess = split_rhat_and_ess(mixed)
    assert np.all(rhat < 1.02) and np.all(ess > 400)
    stuck = mixed + np.array([0.0, 3.0])[:, None, None]  # the two chains in different places
    assert np.all(split_rhat_and_ess(stuck)[0] > 1.5)
    good = {"function_rhat_max": 1.01, "function_ess_min": 500.0, "noise_rhat": 1.0, "noise_ess": 800.0}
    assert diagnostic_warnings(good) == []
    poor = dict(good, function_rhat_max=1.5, noise_ess=20.0)
    messages = diagnostic_warnings(poor)
    assert any("R-hat 1.500" in m for m in messages) and any("ESS 20" in m for m in messages)


TINY = dict(
    dataset="toy-cubic", dataset_params={"n": 12}, hidden=(3,), samples=20, warmup=10, chains=1, max_tree_depth=4
)


@pytest.mark.slow  # NUTS chains: 5 s CPU
def test_cache_round_trip_and_corruption(pyro_installed, tmp_path):
    messages = []
    config = ReferenceConfig(**TINY)
    first, cached = compute_reference(config, cache_dir=tmp_path, progress=messages.append)
    assert not cached and first.reference_id and any("chain 1/1" in m for m in messages)
    again, cached = compute_reference(config, cache_dir=tmp_path, progress=messages.append)
    assert cached
    for a, b in zip(first.weights, again.weights):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(first.log_noise, again.log_noise)
    assert again.diagnostics == json.loads(json.dumps(first.diagnostics))
    # A different request is a different id.
    other, _ = compute_reference(ReferenceConfig(**dict(TINY, seed=1)), cache_dir=tmp_path, progress=None)
    assert other.reference_id != first.reference_id
    # Corrupt the samples: a clear error on reading, a recompute on asking again.
    store = ReferenceStore(tmp_path)
    path = store.path(first.reference_id) / "samples.safetensors"
    data = bytearray(path.read_bytes())
    data[-3] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(ReferenceStoreError, match="checksum"):
        store.read(first.reference_id)
    messages.clear()
    redone, cached = compute_reference(config, cache_dir=tmp_path, progress=messages.append)
    assert not cached and any("checksum" in m and "recomputing" in m for m in messages)
    np.testing.assert_array_equal(store.read(first.reference_id).log_noise, redone.log_noise)
    # The dashboard finds it by the dataset's fingerprint.
    fingerprint = config.load_dataset().fingerprint
    assert store.find_for_dataset(fingerprint, hidden=(3,)) in (first.reference_id, other.reference_id)
    assert store.find_for_dataset("no-such-data") is None


@pytest.mark.slow  # NUTS chains through the CLI: 4 s CPU
def test_cli_reference_prints_diagnostics_and_warns(pyro_installed, tmp_path, capsys):
    args = [
        "reference",
        "toy-cubic",
        "--hidden",
        "2",
        "--samples",
        "20",
        "--warmup",
        "10",
        "--chains",
        "2",
        "--max-tree-depth",
        "4",
        "--cache-dir",
        str(tmp_path),
    ]
    assert main(args) == 0
    out, err = capsys.readouterr()
    assert "function_rhat_max" in out and "noise_ess" in out and "from_cache           False" in out
    assert "chain 2/2 sample 20/20" in err
    assert "warning: few effective samples" in err  # 40 draws cannot reach ESS 100
    assert main(args + ["--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["from_cache"] is True and result["chains"] == 2 and result["hidden"] == [2]
    assert main(["reference", "two-moons", "--samples", "10", "--warmup", "0", "--cache-dir", str(tmp_path)]) == 2
    assert "regression" in capsys.readouterr().err
    assert main(["reference", "toy-cubic", "--chains", "0", "--cache-dir", str(tmp_path)]) == 2
    assert "chains" in capsys.readouterr().err


def test_missing_pyro_names_the_requirements_file(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "pyro", None)  # import pyro now raises ImportError
    with pytest.raises(PyroMissingError, match="requirements-reference.txt"):
        require_pyro()
    assert main(["reference", "toy-cubic", "--cache-dir", str(tmp_path)]) == 2
    assert "pip install -r requirements-reference.txt" in capsys.readouterr().err


def test_config_validation():
    from core.errors import ConfigError

    with pytest.raises(ConfigError, match="prior"):
        ReferenceConfig(dataset="toy-cubic", prior="laplace")
    with pytest.raises(ConfigError, match="samples"):
        ReferenceConfig(dataset="toy-cubic", samples=0)
    with pytest.raises(ConfigError, match="hidden"):
        ReferenceConfig(dataset="toy-cubic", hidden="a,b")
    assert ReferenceConfig(dataset="toy-cubic", hidden="8,4").hidden == (8, 4)


def test_relaxed_spike_and_slab_prior_gates_the_weights(pyro_installed):
    torch.manual_seed(0)
    dataset = linear_dataset(n=20)
    config = ReferenceConfig(
        dataset="linear",
        hidden=(),
        prior="spike-slab-relaxed",
        prior_inclusion=0.2,
        temperature=0.3,
        noise_std=0.5,
        samples=30,
        warmup=20,
        chains=1,
        max_tree_depth=5,
    )
    posterior = run_nuts(config, dataset, progress=None)
    assert posterior.weights[0].shape == (30, 1, 3) and np.all(np.isfinite(posterior.weights[0]))

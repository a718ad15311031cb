"""The NumPyro sampler of the NUTS reference (the default of `python -m core reference` on the 1-D toys):
the same closed-form truth as tests/test_reference.py, agreement with the Pyro model's log density,
and the defaults and thresholds a converged reference is judged by.

NumPyro/JAX are optional (requirements-reference.txt): without them these tests skip, except under
CI=true, where a missing sampler fails."""

from __future__ import annotations

import numpy as np
import pytest

from core.errors import ConfigError
from core.reference import (
    ReferenceConfig,
    default_config,
    diagnostic_warnings,
    run_nuts,
)
from core.reference.posterior import (
    DEFAULT_HIDDEN,
    ESS_LIMIT,
    RHAT_LIMIT,
    split_rhat_and_ess,
)
from tests.support import require_module
from tests.test_reference import linear_dataset


@pytest.fixture
def numpyro_installed():
    # split R-hat and ESS come from Pyro's diagnostics; a missing one skips, or fails under CI=true
    for name in ("jax", "numpyro", "pyro"):
        require_module(name, 'pip install -e ".[reference]"')


@pytest.mark.slow  # 14 s: NUTS through JAX's compile
def test_numpyro_nuts_matches_the_closed_form_posterior_of_bayesian_linear_regression(numpyro_installed):
    dataset = linear_dataset()
    noise, prior_var = 0.5, 2.0
    config = ReferenceConfig(
        dataset="linear",
        hidden=(),
        noise_std=noise,
        prior_variance=prior_var,
        samples=400,
        warmup=200,
        chains=2,
        seed=3,
        sampler="numpyro",
    )
    posterior = run_nuts(config, dataset, progress=None)
    phi = np.concatenate([dataset.x_train, np.ones((dataset.n_train, 1))], axis=1).astype(np.float64)
    cov = np.linalg.inv(phi.T @ phi / noise**2 + np.eye(3) / prior_var)
    mean = cov @ phi.T @ dataset.y_train.astype(np.float64) / noise**2
    draws = posterior.weights[0][:, 0, :]
    assert draws.shape == (800, 3) and draws.dtype == np.float64
    ess = split_rhat_and_ess(draws.reshape(2, 400, 3))[1]
    assert np.all(np.abs(draws.mean(axis=0) - mean) < 4 * np.sqrt(np.diag(cov) / ess))
    scale = np.sqrt(np.outer(np.diag(cov), np.diag(cov))).max()
    assert np.allclose(np.cov(draws.T), cov, rtol=0.25, atol=0.1 * scale)
    # two chains from different keys: not the same draws
    assert not np.allclose(draws[:400], draws[400:])


@pytest.mark.slow  # 4 s: JAX's compile
def test_numpyro_and_pyro_models_have_the_same_log_density(numpyro_installed):
    """At the same weights and noise, both models' log joint densities agree (same prior, same likelihood),
    for a tanh net with a sampled noise scale."""
    import jax
    import torch
    from numpyro.infer.util import log_density as numpyro_log_density
    from pyro.poutine import trace

    from core.reference.posterior import _jax_activation, _pyro_model, layer_shapes

    jax.config.update("jax_enable_x64", True)
    dataset = linear_dataset(n=9, seed=2)
    config = ReferenceConfig(dataset="linear", hidden=(3,), activation="tanh", prior_variance=1.7, sampler="numpyro")
    shapes = layer_shapes(config, 2)
    rng = np.random.default_rng(0)
    values = {f"w{i}": rng.normal(size=shape) for i, shape in enumerate(shapes)}
    values["log_noise"] = np.array(-0.4)

    x, y = dataset.x_train.astype(np.float64), dataset.y_train.astype(np.float64)
    model = _pyro_model(config, shapes, torch.nn.Tanh())
    conditioned = {k: torch.as_tensor(v) for k, v in values.items()}
    import pyro

    tr = trace(pyro.condition(model, data=conditioned)).get_trace(torch.as_tensor(x), torch.as_tensor(y))
    pyro_value = float(tr.log_prob_sum())

    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    activation = _jax_activation("tanh")

    def np_model(x, y):  # what _sample_numpyro samples, rebuilt from its pieces
        h = x
        for index, shape in enumerate(shapes):
            w = numpyro.sample(f"w{index}", dist.Normal(jnp.zeros(shape), np.sqrt(1.7)).to_event(2))
            h = h @ w[:, :-1].T + w[:, -1]
            if index < len(shapes) - 1:
                h = activation(h)
        log_noise = numpyro.sample("log_noise", dist.Normal(config.noise_loc, config.noise_scale))
        numpyro.sample("y", dist.Normal(h[:, 0], jnp.exp(log_noise)).to_event(1), obs=y)

    np_value, _ = numpyro_log_density(
        np_model, (jnp.asarray(x), jnp.asarray(y)), {}, {k: jnp.asarray(v) for k, v in values.items()}
    )
    assert float(np_value) == pytest.approx(pyro_value, rel=1e-10)


def test_the_toy_defaults_and_the_thresholds_a_reference_must_meet():
    for name in DEFAULT_HIDDEN:
        config = default_config(name)
        assert config.sampler == "numpyro" and config.chains >= 4 and config.hidden == (16,)
        assert config.samples * config.chains >= 2000 and config.max_tree_depth == 10
    assert default_config("toy-sine-gaps").activation == "tanh"
    assert default_config("toy-cubic").activation == "relu"  # its raw targets reach +-64
    assert default_config("toy-cubic", chains=2).chains == 2  # a flag still overrides
    assert default_config("two-moons").sampler is None  # elsewhere: the earlier (Pyro) defaults
    assert (RHAT_LIMIT, ESS_LIMIT) == (1.01, 400.0)
    good = {"function_rhat_max": 1.009, "function_ess_min": 401.0, "noise_rhat": 1.0, "noise_ess": 900.0}
    assert diagnostic_warnings(good) == []
    assert len(diagnostic_warnings(dict(good, function_rhat_max=1.02, noise_ess=399.0))) == 2
    with pytest.raises(ConfigError, match="sampler"):
        ReferenceConfig(dataset="toy-cubic", sampler="stan")


def test_a_config_without_a_sampler_keeps_its_earlier_reference_id():
    from core.reference.store import reference_id

    old = ReferenceConfig(dataset="toy-cubic", hidden=(64,))
    assert "sampler" not in {k for k, v in old.to_dict().items() if v is not None}
    assert reference_id(old, "f" * 16) != reference_id(
        ReferenceConfig(dataset="toy-cubic", hidden=(64,), sampler="numpyro"), "f" * 16
    )

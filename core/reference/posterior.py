"""A reference posterior for small regression MLPs by NUTS (Pyro), and its predictive bands.

The model is the `bnn` family's: an MLP of the run's widths and activation,
every weight and bias a priori N(0, prior_variance), Gaussian likelihood on the
dataset's targets as the network sees them. The `bnn` family point-estimates
the noise scale; the reference samples it, with log sigma ~ N(noise_loc,
noise_scale^2) (broad by default: e^{-1 +- 4} covers the toy sets' noise).

The spike-and-slab families (lbbnn, lbbnn-lfmvn) put discrete inclusion
indicators gamma on the weights, which NUTS cannot move, and summing them out
is 2^(number of weights) terms (2^193 for 1-64-1): out of reach. Their
reference is `prior="spike-slab-relaxed"`: gamma replaced by its concrete
relaxation sigmoid((logit psi + u) / temperature), u ~ Logistic(0, 1), a
continuous density NUTS can sample; it tends to the spike-and-slab posterior as
the temperature goes to 0 (and mixes worse). By default every family is judged
against the Gaussian-prior posterior (the predictive a Bayesian 1-hidden-layer
net with that prior gives).

Diagnostics: weight-space R-hat is meaningless for neural networks (hidden
units can be permuted, so chains sit in symmetric modes); the convergence
check is on what the bands use: the network function at `DIAGNOSTIC_POINTS`
points across the dataset's grid, and the noise scale.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Mapping

import numpy as np
import torch

from core.errors import ConfigError

PRIORS = ("gaussian", "spike-slab-relaxed")
# NUTS implementations: Pyro's (tree building in Python, ~2 ms a leapfrog step on one CPU core for a
# 1-64-1 net) and NumPyro's (the whole trajectory compiled by JAX, ~40 us a step): only the second
# reaches ESS >= 400 on the toy sets within minutes. Both sample the same model.
SAMPLERS = ("pyro", "numpyro")
REQUIREMENTS_FILE = "requirements-reference.txt"
DIAGNOSTIC_POINTS = 25
# What a reference must reach before it is quoted as truth (split R-hat and bulk ESS of the function
# values at DIAGNOSTIC_POINTS inputs and of the noise scale; Vehtari et al. 2021's thresholds).
RHAT_LIMIT = 1.01
ESS_LIMIT = 400.0
JIT_MIN_WEIGHTS = 100

# The default reference per 1-D toy set: a 1-16-1 net, 4 chains of 1000 warm-up + 500 kept draws, NumPyro's
# NUTS with tree depth 10. Smaller than the runs it is compared with (the app trains 16-16 nets, the
# benchmarks 1-64-1): a 1-64-1 relu net's chains sat in different function modes (R-hat 1.12, ESS 10 with
# Pyro, 2 x 300 draws). tanh where the targets are O(1); toy-cubic's raw targets reach +-64, beyond what
# 16 tanh units with N(0, 1) output weights can fit, so it keeps relu. benchmarks/references.py
# measures these; the page says which net.
DEFAULT_HIDDEN = {"toy-sine-gaps": (16,), "toy-cubic": (16,), "toy-hetero": (16,)}
DEFAULT_ACTIVATION = {"toy-sine-gaps": "tanh", "toy-cubic": "relu", "toy-hetero": "tanh"}
DEFAULT_SETTINGS = {"chains": 4, "samples": 500, "warmup": 1000, "max_tree_depth": 10, "sampler": "numpyro"}
TOY_DATASETS = tuple(DEFAULT_HIDDEN)


class PyroMissingError(ConfigError):
    pass


def require_pyro() -> None:
    try:
        import pyro  # noqa: F401
    except ImportError:
        raise PyroMissingError(
            f"the NUTS reference needs Pyro, an optional dependency: pip install -r {REQUIREMENTS_FILE}"
        ) from None


def require_numpyro() -> None:
    try:
        import jax  # noqa: F401
        import numpyro  # noqa: F401
    except ImportError:
        raise PyroMissingError(
            f"the NUTS reference (sampler numpyro) needs NumPyro and JAX, optional "
            f"dependencies: pip install -r {REQUIREMENTS_FILE}"
        ) from None


def _positive_int(name: str, value: Any, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value or value < minimum:
        raise ConfigError(f"{name}: must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _positive_float(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value > 0):
        raise ConfigError(f"{name}: must be a positive number, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class ReferenceConfig:
    """What determines a reference posterior (with the dataset's fingerprint: its id)."""

    dataset: str
    dataset_params: Mapping[str, Any] = field(default_factory=dict)
    data_seed: int = 0
    hidden: tuple[int, ...] = (64,)
    activation: str = "relu"
    prior: str = "gaussian"
    prior_variance: float = 1.0
    prior_inclusion: float = math.exp(-2.0)  # psi of the relaxed spike-and-slab (lbbnn's default)
    temperature: float = 0.5
    noise_loc: float = -1.0  # prior of log sigma
    noise_scale: float = 2.0
    noise_std: float | None = None  # a fixed noise std instead of the prior (e.g. for a closed-form check)
    samples: int = 300
    warmup: int = 300
    chains: int = 2
    max_tree_depth: int = 8
    seed: int = 0
    sampler: str | None = None  # None: "pyro" (left out of the id, so earlier references keep theirs)

    def __post_init__(self) -> None:
        from core.models.network import ACTIVATIONS

        put = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731
        hidden = self.hidden
        if isinstance(hidden, str):
            hidden = [h for h in hidden.replace(" ", "").split(",") if h]
        try:
            hidden = tuple(int(h) for h in hidden)
        except (TypeError, ValueError):
            raise ConfigError(f"hidden: give layer widths such as 64 or 32,32, got {self.hidden!r}") from None
        if any(h < 1 for h in hidden):
            raise ConfigError(f"hidden: widths must be >= 1, got {self.hidden!r}")
        put("hidden", hidden)
        put("dataset_params", dict(self.dataset_params))
        if self.activation not in ACTIVATIONS:
            raise ConfigError(f"activation: unknown {self.activation!r}; choose one of {', '.join(ACTIVATIONS)}")
        if self.sampler is not None and self.sampler not in SAMPLERS:
            raise ConfigError(f"sampler: unknown {self.sampler!r}; choose one of {', '.join(SAMPLERS)}")
        if self.prior not in PRIORS:
            raise ConfigError(f"prior: unknown {self.prior!r}; choose one of {', '.join(PRIORS)}")
        for name in ("prior_variance", "temperature", "noise_scale"):
            put(name, _positive_float(name, getattr(self, name)))
        if not 0 < self.prior_inclusion < 1:
            raise ConfigError(f"prior_inclusion: must lie in (0, 1), got {self.prior_inclusion!r}")
        if self.noise_std is not None:
            put("noise_std", _positive_float("noise_std", self.noise_std))
        if not math.isfinite(self.noise_loc):
            raise ConfigError(f"noise_loc: must be finite, got {self.noise_loc!r}")
        put("samples", _positive_int("samples", self.samples, 10))
        put("warmup", _positive_int("warmup", self.warmup, 0))
        put("chains", _positive_int("chains", self.chains))
        put("max_tree_depth", _positive_int("max_tree_depth", self.max_tree_depth))
        put("seed", _positive_int("seed", self.seed, 0))
        put("data_seed", _positive_int("data_seed", self.data_seed, 0))

    def to_dict(self) -> dict[str, Any]:
        values = asdict(self)
        values["hidden"] = list(self.hidden)
        values["dataset_params"] = dict(self.dataset_params)
        return values

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> "ReferenceConfig":
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(f"reference config: unknown field(s) {', '.join(unknown)}")
        return cls(**dict(values))

    def load_dataset(self, data_dir=None):
        from core.data import load_dataset

        return load_dataset(self.dataset, data_dir=data_dir, seed=self.data_seed, **dict(self.dataset_params))


def default_config(dataset: str, **changes: Any) -> ReferenceConfig:
    """The reference `python -m core reference DATASET` samples: DEFAULT_SETTINGS on the 1-D toys."""
    changes = {k: v for k, v in changes.items() if v is not None}
    changes.setdefault("hidden", DEFAULT_HIDDEN.get(dataset, (64,)))
    if dataset in DEFAULT_HIDDEN:
        changes.setdefault("activation", DEFAULT_ACTIVATION[dataset])
        for key, value in DEFAULT_SETTINGS.items():
            changes.setdefault(key, value)
    return ReferenceConfig(dataset=dataset, **changes)


# --- the network and the Pyro model -------------------------------------------------------------


def layer_shapes(config: ReferenceConfig, in_features: int) -> list[tuple[int, int]]:
    """(out, in+1) per layer: the augmented weight matrices of core.models (bias as the last column)."""
    widths = [in_features, *config.hidden, 1]
    return [(widths[i + 1], widths[i] + 1) for i in range(len(widths) - 1)]


def network_outputs(weights: list[torch.Tensor], x: torch.Tensor, activation: Callable) -> torch.Tensor:
    """f(x) for weights (S, out, in+1) per layer and x (n, d): (S, n)."""
    h = x.unsqueeze(0)
    for i, w in enumerate(weights):
        h = h @ w[..., :-1].transpose(-1, -2) + w[..., -1].unsqueeze(-2)
        if i < len(weights) - 1:
            h = activation(h)
    return h[..., 0]


def _pyro_model(config: ReferenceConfig, shapes: list[tuple[int, int]], activation: Callable):
    import pyro
    import pyro.distributions as dist

    prior_std = math.sqrt(config.prior_variance)
    logit_psi = math.log(config.prior_inclusion / (1 - config.prior_inclusion))

    def model(x: torch.Tensor, y: torch.Tensor) -> None:
        weights = []
        for index, shape in enumerate(shapes):
            zeros = torch.zeros(shape, dtype=x.dtype)
            w = pyro.sample(f"w{index}", dist.Normal(zeros, prior_std).to_event(2))
            if config.prior == "spike-slab-relaxed":
                u = pyro.sample(f"u{index}", dist.Logistic(zeros, 1.0).to_event(2))
                w = w * torch.sigmoid((logit_psi + u) / config.temperature)
            weights.append(w)
        if config.noise_std is None:
            log_noise = pyro.sample(
                "log_noise", dist.Normal(torch.tensor(config.noise_loc, dtype=x.dtype), config.noise_scale)
            )
        else:
            log_noise = torch.tensor(math.log(config.noise_std), dtype=x.dtype)
        f = network_outputs([w.unsqueeze(0) for w in weights], x, activation)[0]
        pyro.sample("y", dist.Normal(f, log_noise.exp()).to_event(1), obs=y)

    return model


@dataclass
class ReferencePosterior:
    """Posterior draws (chains x samples, flattened chain-major) of the network weights and noise scale."""

    config: ReferenceConfig
    weights: list[np.ndarray]  # per layer (S, out, in+1), effective weights (relaxed gates applied)
    log_noise: np.ndarray  # (S,)
    diagnostics: dict[str, Any]
    dataset_fingerprint: str
    target_mean: float = 0.0
    target_std: float = 1.0
    seconds: float = 0.0
    reference_id: str = ""

    @property
    def n_samples(self) -> int:
        return int(self.log_noise.shape[0])

    def function_samples(self, x: np.ndarray) -> np.ndarray:
        """f_s(x) in the network's (standardised) units, (S, n)."""
        from core.models.network import ACTIVATIONS

        activation = ACTIVATIONS[self.config.activation]()
        with torch.no_grad():
            out = network_outputs(
                [torch.from_numpy(w) for w in self.weights],
                torch.as_tensor(np.asarray(x), dtype=torch.float64),
                activation,
            )
        return out.numpy()

    def predictive(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Means (S, n) and noise stds (S, n) of the S Gaussians whose mixture is p(y | x), original units."""
        means = self.function_samples(x) * self.target_std + self.target_mean
        stds = np.broadcast_to(np.exp(self.log_noise)[:, None] * self.target_std, means.shape)
        return means, np.ascontiguousarray(stds)

    def bands(self, x: np.ndarray, levels: tuple[float, ...] = (0.05, 0.95)) -> dict[str, np.ndarray]:
        """Predictive mean and quantiles on x, original units."""
        from core.predict.collapsed import gaussian_mixture_quantiles

        means, stds = self.predictive(x)
        result = {"mean": means.mean(axis=0), "function_std": means.std(axis=0)}
        for level, values in zip(levels, gaussian_mixture_quantiles(means, stds, levels)):
            result[f"q{level:g}"] = values
        return result


# --- sampling ---------------------------------------------------------------------------------

ProgressCallback = Callable[[str], None]


def stderr_progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _sample_pyro(config: ReferenceConfig, dataset, shapes, report) -> list[dict[str, Any]]:
    import pyro
    from pyro.infer import MCMC, NUTS

    from core.models.network import ACTIVATIONS

    activation = ACTIVATIONS[config.activation]()
    x = torch.as_tensor(dataset.x_train, dtype=torch.float64)
    y = torch.as_tensor(dataset.y_train, dtype=torch.float64)
    model = _pyro_model(config, shapes, activation)
    # Tracing costs seconds per chain; it pays off for the 1-64-1 nets, not for tiny ones.
    jit = sum(a * b for a, b in shapes) >= JIT_MIN_WEIGHTS
    per_chain = []
    for chain in range(config.chains):
        pyro.clear_param_store()
        pyro.set_rng_seed(config.seed * 1000 + chain)

        def hook(kernel, params, stage, i, chain=chain):
            warm = stage.lower() == "warmup"
            report(chain, stage.lower(), i, config.warmup if warm else config.samples)

        kernel = NUTS(model, jit_compile=jit, ignore_jit_warnings=True, max_tree_depth=config.max_tree_depth)
        mcmc = MCMC(
            kernel,
            num_samples=config.samples,
            warmup_steps=config.warmup,
            num_chains=1,
            disable_progbar=True,
            hook_fn=hook,
        )
        with torch.random.fork_rng(devices=[]):
            mcmc.run(x, y)
        per_chain.append({k: v.detach() for k, v in mcmc.get_samples().items()})
    return per_chain


_JAX_ACTIVATIONS = {"relu": "relu", "sigmoid": "sigmoid", "elu": "elu", "leaky-relu": "leaky_relu"}


def _jax_activation(name: str):
    import jax
    import jax.numpy as jnp

    if name == "tanh":
        return jnp.tanh
    if name == "gelu":  # torch's default GELU is the exact (erf) one
        return lambda v: jax.nn.gelu(v, approximate=False)
    if name not in _JAX_ACTIVATIONS:
        raise ConfigError(f"activation {name!r}: not available with sampler numpyro; use sampler pyro")
    return getattr(jax.nn, _JAX_ACTIVATIONS[name])


def _sample_numpyro(config: ReferenceConfig, dataset, shapes, report) -> list[dict[str, Any]]:
    """The same model as _pyro_model, in NumPyro; float64 (JAX's x64 mode is switched on process-wide)."""
    import jax

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist
    from numpyro.infer import MCMC, NUTS

    activation = _jax_activation(config.activation)
    prior_std = math.sqrt(config.prior_variance)
    logit_psi = math.log(config.prior_inclusion / (1 - config.prior_inclusion))

    def model(x, y):
        h = x
        for index, shape in enumerate(shapes):
            zeros = jnp.zeros(shape)
            w = numpyro.sample(f"w{index}", dist.Normal(zeros, prior_std).to_event(2))
            if config.prior == "spike-slab-relaxed":
                u = numpyro.sample(f"u{index}", dist.Logistic(zeros, 1.0).to_event(2))
                w = w * jax.nn.sigmoid((logit_psi + u) / config.temperature)
            h = h @ w[:, :-1].T + w[:, -1]
            if index < len(shapes) - 1:
                h = activation(h)
        if config.noise_std is None:
            log_noise = numpyro.sample("log_noise", dist.Normal(config.noise_loc, config.noise_scale))
        else:
            log_noise = math.log(config.noise_std)
        numpyro.sample("y", dist.Normal(h[:, 0], jnp.exp(log_noise)).to_event(1), obs=y)

    x = jnp.asarray(np.asarray(dataset.x_train, dtype=np.float64))
    y = jnp.asarray(np.asarray(dataset.y_train, dtype=np.float64))
    per_chain = []
    for chain in range(config.chains):
        # A dense mass matrix (adapted in warm-up): the weights of a small net are strongly correlated
        # a posteriori, and a diagonal one left NUTS at ~700 leapfrog steps per draw on toy-sine-gaps.
        kernel = NUTS(model, max_tree_depth=config.max_tree_depth, dense_mass=True)
        mcmc = MCMC(kernel, num_warmup=config.warmup, num_samples=config.samples, num_chains=1, progress_bar=False)
        mcmc.run(jax.random.PRNGKey(config.seed * 1000 + chain), x, y)
        report(chain, "sample", config.samples - 1, config.samples)
        per_chain.append({k: np.asarray(v, dtype=np.float64) for k, v in mcmc.get_samples().items()})
    return per_chain


def run_nuts(
    config: ReferenceConfig, dataset, progress: ProgressCallback | None = stderr_progress
) -> ReferencePosterior:
    """Sample the posterior with NUTS (config.sampler: Pyro's or NumPyro's), chains one after the other
    (chain c seeded by seed * 1000 + c)."""
    require_pyro()  # the diagnostics (split R-hat, ESS) are Pyro's, whichever sampler runs
    if config.sampler == "numpyro":
        require_numpyro()
    if dataset.task != "regression":
        raise ConfigError(
            f"reference: {dataset.name} is a {dataset.task} set; the NUTS reference is for "
            "regression (toy-sine-gaps, toy-cubic, toy-hetero)"
        )
    shapes = layer_shapes(config, dataset.in_features)
    start = time.perf_counter()

    def report(chain: int, stage: str, i: int, total: int) -> None:
        if progress is not None and ((i + 1) % max(1, total // 5) == 0 or i + 1 == total):
            progress(
                f"reference {config.dataset}: chain {chain + 1}/{config.chains} {stage} "
                f"{i + 1}/{total} ({time.perf_counter() - start:.0f} s)"
            )

    sample = _sample_numpyro if config.sampler == "numpyro" else _sample_pyro
    per_chain = [
        {k: v if isinstance(v, torch.Tensor) else torch.from_numpy(np.array(v)) for k, v in chain.items()}
        for chain in sample(config, dataset, shapes, report)
    ]
    seconds = time.perf_counter() - start
    weights = []
    for index in range(len(shapes)):
        w = torch.cat([c[f"w{index}"] for c in per_chain])
        if config.prior == "spike-slab-relaxed":
            logit_psi = math.log(config.prior_inclusion / (1 - config.prior_inclusion))
            u = torch.cat([c[f"u{index}"] for c in per_chain])
            w = w * torch.sigmoid((logit_psi + u) / config.temperature)
        weights.append(w.numpy())
    if config.noise_std is None:
        log_noise = torch.cat([c["log_noise"] for c in per_chain]).numpy()
    else:
        log_noise = np.full(config.chains * config.samples, math.log(config.noise_std))
    posterior = ReferencePosterior(
        config=config,
        weights=weights,
        log_noise=log_noise,
        diagnostics={},
        dataset_fingerprint=dataset.fingerprint,
        target_mean=float(dataset.target_mean),
        target_std=float(dataset.target_std),
        seconds=seconds,
    )
    posterior.diagnostics = diagnose(posterior, dataset)
    return posterior


# --- diagnostics ------------------------------------------------------------------------------


def diagnostic_inputs(dataset) -> np.ndarray:
    source = dataset.x_grid if dataset.x_grid is not None else dataset.x_test
    index = np.linspace(0, len(source) - 1, DIAGNOSTIC_POINTS).round().astype(int)
    return np.asarray(source)[np.unique(index)]


def split_rhat_and_ess(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Split R-hat and effective sample size per column of values (chains, samples, k)."""
    from pyro.ops.stats import effective_sample_size, split_gelman_rubin

    tensor = torch.as_tensor(values, dtype=torch.float64)
    return (
        split_gelman_rubin(tensor, chain_dim=0, sample_dim=1).numpy(),
        effective_sample_size(tensor, chain_dim=0, sample_dim=1).numpy(),
    )


def diagnose(posterior: ReferencePosterior, dataset) -> dict[str, Any]:
    config = posterior.config
    chains, per_chain = config.chains, config.samples
    f = posterior.function_samples(diagnostic_inputs(dataset)).reshape(chains, per_chain, -1)
    f_rhat, f_ess = split_rhat_and_ess(f)
    if config.noise_std is None:
        n_rhat, n_ess = split_rhat_and_ess(posterior.log_noise.reshape(chains, per_chain, 1))
    else:  # fixed: nothing to diagnose
        n_rhat, n_ess = [None], [None]
    w_rhat, _ = split_rhat_and_ess(
        np.concatenate([w.reshape(chains, per_chain, -1) for w in posterior.weights], axis=2)
    )
    result = {
        "function_rhat_max": float(np.nanmax(f_rhat)),
        "function_ess_min": float(np.nanmin(f_ess)),
        "function_ess_median": float(np.nanmedian(f_ess)),
        "noise_rhat": None if n_rhat[0] is None else float(n_rhat[0]),
        "noise_ess": None if n_ess[0] is None else float(n_ess[0]),
        "noise_std_mean": float(np.exp(posterior.log_noise).mean() * posterior.target_std),
        "weight_rhat_median": float(np.nanmedian(w_rhat)),
        "draws": int(chains * per_chain),
        "chains": int(chains),
    }
    result["warnings"] = diagnostic_warnings(result)
    return result


def diagnostic_warnings(d: Mapping[str, Any]) -> list[str]:
    warnings = []
    rhat = max(v for v in (d["function_rhat_max"], d.get("noise_rhat")) if v is not None)
    ess = min(v for v in (d["function_ess_min"], d.get("noise_ess")) if v is not None)
    if not math.isfinite(rhat) or rhat > RHAT_LIMIT:
        warnings.append(
            f"poor convergence: R-hat {rhat:.3f} > {RHAT_LIMIT} (function values or noise); "
            "raise --warmup/--samples or --chains"
        )
    if not math.isfinite(ess) or ess < ESS_LIMIT:
        warnings.append(
            f"few effective samples: ESS {ess:.0f} < {ESS_LIMIT:.0f}; the bands' quantiles are noisy, raise --samples"
        )
    return warnings

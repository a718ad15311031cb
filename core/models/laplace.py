"""`laplace`: a MAP network with a linearised Laplace posterior over all of its weights.

Mean-field posteriors cannot widen their bands between clusters of data (Foong et al. 2019, 2020);
a Laplace approximation with the full generalised Gauss-Newton (GGN) matrix and the network
linearised about its mode can (Immer et al. 2021; Daxberger et al. 2021, "Laplace Redux").

Training is MAP: the layers are point weights whose "KL" is the negative log of a N(0, 1/delta_0)
prior (up to constants), so the project's objective, NLL + kl_weight * KL / N, is a MAP objective
with prior precision kl_weight * delta_0. After training (core.train calls `fit`), with w* the MAP
weights and J the Jacobian of the outputs at the training inputs,

    posterior  N(w*, Sigma),  Sigma^-1 = delta I + GGN,  GGN = sum_n J_n^T Lambda_n J_n,

Lambda_n the Hessian of -log p(y_n | f) in f: 1/sigma^2 (Gaussian, sigma the run's noise sd),
p (1 - p) (Bernoulli), diag(p) - p p^T (softmax). delta is tuned by maximising the Laplace
marginal likelihood over a grid of log delta (MacKay 1992), with w* held at the MAP:

    log p(D | delta) ~ log p(D | w*) - delta/2 |w*|^2 - 1/2 sum_i log(1 + e_i / delta),

e_i the GGN's eigenvalues; it is exact for a linear-Gaussian model when w* is its mode.

The GGN has rank at most N*K (N points, K outputs), so it is kept as its eigendecomposition
U diag(e) U^T (U: P x k, k = min(P, N K)), the full GGN with nothing dropped: a 1-64-64-1 net on
40 points (P = 4353) stores 4353 x 40 numbers instead of 4353^2, and the fit is one eigh of a 40 x 40
kernel. Draws: w = w* + z / sqrt(delta) + U ((1/sqrt(delta + e) - 1/sqrt(delta)) * U^T z).

Predictions ("bma", "mpm") are draws of the linearised network f(x; w*) + J(x)(w - w*), computed as
a Jacobian-vector product (one forward-mode pass per draw): Immer et al. (2021) show that pushing
Laplace draws through the nonlinear net underfits, and on toy-sine-gaps it does (bma RMSE 18 against
0.12 for the MAP, measured on a 1-16-16-1 net). "mean" is the MAP network.

Measured (benchmarks/results/laplace_gaps*.md, seeds 0-2, default 1-64-64-1 nets, fit 3-11 ms): with
tanh the band in the gaps is 4.9-6.6 times its width near the data on toy-sine-gaps (bma RMSE
0.09-0.10) and 7.9-10.8 on toy-cubic; with relu 1.9, 5.4 and 0.9 on toy-sine-gaps: a ReLU unit
active only between two nearby training points has unconstrained weights, and its narrow spikes
raise the band's mean near the data (seed 2: mean 0.52, median 0.09). Hence tanh is the family's
default on the small regression sets (`small_regression_activation`; `--activation relu` still
gives relu), and benchmarks/laplace_gaps.py with no flags measures that default.

Why not the `laplace-torch` package: `pip install --dry-run laplace-torch` (0.3) would replace this
project's CPU torch with torch 2.14.1 and pull the CUDA 13 wheels, backpack and curvlinops; and it
works on nn.Linear-style modules and its own curvature
backends; this project's layers hold augmented (out, in + 1) matrices, masks and their own draws, and
its stores must round-trip through safetensors, so a small implementation (Jacobian by hand, one
eigh) is simpler than adapting it.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable, Sequence

import torch
from torch import Tensor, nn

from core.errors import ConfigError, PredictionError
from core.models.base import Keep, LayerOptions, SparseLayer, StatisticSpec, augmented_linear, require
from core.settings import Setting, register

# 5000 admits the default 1-64-64-1 net of the 1-D toys (4353 weights); the fit there takes milliseconds
# since the GGN's rank is at most the 40 training points, but a classifier on N K > P rows needs a P x P eigh.
MAX_WEIGHTS = register(
    Setting(
        "BNN_LAPLACE_MAX_WEIGHTS",
        "whole",
        5000,
        "largest network (weights and biases) the `laplace` family fits: its covariance needs up to "
        "weights^2 numbers and an eigendecomposition of that size",
        low=1,
        high=100_000,
    )
)

# Grid of log10 delta searched for the marginal likelihood's maximum (then refined once around it).
LOG10_PRIOR_PRECISION_RANGE = (-4.0, 4.0)
GRID_POINTS = 81
# Eigenvalues below this fraction of the largest are numerically zero (directions the data does not see).
EIGENVALUE_FLOOR = 1e-10


@dataclass(frozen=True)
class LaplaceOptions(LayerOptions):
    """prior_precision: delta_0 of the MAP's N(0, 1/delta_0) prior (before the objective's kl_weight),
    and the fit's delta when tune_prior is off. tune_prior: choose delta by the marginal likelihood."""

    prior_precision: float = 1.0
    tune_prior: bool = True

    def validate(self) -> None:
        value = self.prior_precision
        require(
            isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0,
            "prior_precision",
            f"must be a positive number, got {value!r}",
        )
        require(isinstance(self.tune_prior, bool), "tune_prior", f"must be true or false, got {self.tune_prior!r}")


class LaplaceLayer(SparseLayer):
    """One layer's MAP weights and, after the fit, its marginal posterior sd (for coef and pruning)."""

    family = "laplace"
    # |w*| / marginal sd: the same signal-to-noise statistic as `bnn`; 0 keeps every weight.
    spec = StatisticSpec("signal-to-noise", Keep.ABOVE, 0.0, 0.0, math.inf)
    Options = LaplaceOptions
    # The activation a run of this family gets on the 1-D/2-D regression toys unless one is given
    # (core.runs.config.default_activation): with relu the gap ratio failed toy-sine-gaps seed 2
    # (0.92, benchmarks/results/laplace_gaps.md); with tanh every seed meets the targets.
    small_regression_activation = "tanh"

    def __init__(
        self, in_features: int, out_features: int, options: LaplaceOptions | None = None, is_output: bool = False
    ):
        super().__init__(in_features, out_features, options, is_output)
        self.weight = self.initial_weights()
        self.register_buffer("prior_precision", torch.tensor(float(self.options.prior_precision)))
        # Marginal posterior sd of each weight; zero until the network's Laplace fit sets it.
        self.register_buffer("posterior_std", torch.zeros(self.shape))

    def forward(self, x: Tensor) -> Tensor:
        return augmented_linear(x, self.masked(self.weight))

    def mean_weights(self) -> Tensor:
        return self.weight * self.fixed_mask

    def conditional_normal(self) -> tuple[Tensor, Tensor]:
        return self.mean_weights(), self.posterior_std * self.fixed_mask

    def sample_weights(self, n: int, generator: torch.Generator | None = None) -> Tensor:
        """Draws of this layer's marginal (the network's joint draws come from LaplacePosterior)."""
        mean, std = self.conditional_normal()
        noise = torch.randn((n, *self.shape), generator=generator, device=mean.device, dtype=mean.dtype)
        return mean + std * noise

    def kl(self) -> Tensor:
        """-log N(w; 0, 1/delta_0) up to its constant: what makes the training objective MAP."""
        weight = self.masked(self.weight)
        return 0.5 * self.prior_precision * (weight * weight).sum()

    def prior_hyperparameters(self) -> dict[str, float]:
        return {"prior_precision": float(self.prior_precision)}

    def native_statistic(self) -> Tensor:
        mean, std = self.conditional_normal()
        # Before the fit (std 0) every nonzero weight is infinitely sure: kept at any threshold.
        return torch.where(std > 0, mean.abs() / std.clamp_min(1e-30), torch.where(mean != 0, math.inf, 0.0))

    def load_point_estimate(self, weight: Tensor) -> None:
        self.weight.data.copy_(weight)

    def parameter_groups(self) -> dict[str, list[nn.Parameter]]:
        return {"weights": [self.weight]}


# --- Jacobians and curvature ---------------------------------------------------------------------
def activation_derivative(activation: Callable[[Tensor], Tensor], z: Tensor) -> Tensor:
    """d act(z) / dz elementwise (every activation of core.models.network acts elementwise)."""
    with torch.enable_grad():
        z = z.detach().requires_grad_(True)
        (grad,) = torch.autograd.grad(activation(z).sum(), z)
    return grad


def output_jacobian(
    x: Tensor, weights: Sequence[Tensor], activation: Callable[[Tensor], Tensor]
) -> tuple[Tensor, Tensor]:
    """Outputs f (n, K) and their Jacobian J (n, K, P) in the flattened augmented weights
    (layer by layer, each (out, in + 1) row-major), by backpropagating the K output directions by hand."""
    inputs, pre = [x], []
    a = x
    for index, weight in enumerate(weights):
        z = augmented_linear(a, weight)
        pre.append(z)
        a = activation(z) if index < len(weights) - 1 else z
        inputs.append(a)
    n, k = a.shape
    delta = torch.eye(k, dtype=x.dtype, device=x.device).expand(n, k, k)  # d f / d z_L
    blocks: list[Tensor] = []
    for index in range(len(weights) - 1, -1, -1):
        below = inputs[index]
        augmented = torch.cat([below, torch.ones_like(below[:, :1])], dim=1)
        blocks.append(torch.einsum("nko,ni->nkoi", delta, augmented).reshape(n, k, -1))
        if index > 0:
            delta = (delta @ weights[index][:, :-1]) * activation_derivative(activation, pre[index - 1]).unsqueeze(1)
    return a, torch.cat(blocks[::-1], dim=2)


def curvature_factor(likelihood: nn.Module, outputs: Tensor, jacobian: Tensor) -> Tensor:
    """B (n K, P) with B^T B = sum_n J_n^T Lambda_n J_n, the GGN of the likelihood."""
    name = getattr(likelihood, "name", "")
    if name == "gaussian":
        sigma = float(likelihood.log_noise_std.detach().exp())
        return jacobian[:, 0, :] / sigma
    if name == "bernoulli":
        p = torch.sigmoid(outputs[:, 0])
        return jacobian[:, 0, :] * (p * (1 - p)).sqrt().unsqueeze(1)
    if name == "categorical":
        p = torch.softmax(outputs, dim=1)
        root = p.sqrt()
        # Lambda = diag(p) - p p^T = L L^T with L = diag(sqrt p) - p sqrt(p)^T, so B_n = L^T J_n.
        factor = torch.diag_embed(root) - root.unsqueeze(2) * p.unsqueeze(1)
        return (factor @ jacobian).reshape(-1, jacobian.shape[2])
    raise ConfigError(
        f"laplace: no Laplace fit for the {name or type(likelihood).__name__!r} likelihood; "
        "use gaussian, bernoulli or categorical"
    )


def ggn_eigen(factor: Tensor) -> tuple[Tensor, Tensor]:
    """Eigenvalues e (k) and orthonormal eigenvectors U (P, k) of B^T B with e > 0, through the
    smaller of B B^T (n K square) and B^T B (P square)."""
    rows, columns = factor.shape
    if rows < columns:
        values, vectors = torch.linalg.eigh(factor @ factor.T)
        keep = values > EIGENVALUE_FLOOR * values.max().clamp_min(1e-300)
        values, vectors = values[keep], vectors[:, keep]
        return values, (factor.T @ vectors) / values.sqrt()
    values, vectors = torch.linalg.eigh(factor.T @ factor)
    keep = values > EIGENVALUE_FLOOR * values.max().clamp_min(1e-300)
    return values[keep], vectors[:, keep]


def log_marginal_likelihood(
    log_likelihood: float, weight_norm2: float, eigenvalues: Tensor, prior_precision: float | Tensor
) -> Tensor:
    """The Laplace evidence log p(D | delta) at the mode (see the module docstring)."""
    # on the eigenvalues' device: a grid made on the CPU meets a GPU fit's eigenvalues here (the GPU check)
    delta = torch.as_tensor(prior_precision, dtype=eigenvalues.dtype, device=eigenvalues.device)
    return log_likelihood - 0.5 * delta * weight_norm2 - 0.5 * torch.log1p(eigenvalues / delta.unsqueeze(-1)).sum(-1)


def tune_prior_precision(log_likelihood: float, weight_norm2: float, eigenvalues: Tensor) -> float:
    """delta maximising the marginal likelihood: the best of a log grid, then a finer grid around it."""
    low, high = LOG10_PRIOR_PRECISION_RANGE
    grid = torch.logspace(low, high, GRID_POINTS, dtype=torch.float64)
    best = int(log_marginal_likelihood(log_likelihood, weight_norm2, eigenvalues, grid).argmax())
    step = (high - low) / (GRID_POINTS - 1)
    centre = math.log10(float(grid[best]))
    fine = torch.logspace(centre - step, centre + step, 41, dtype=torch.float64)
    return float(fine[int(log_marginal_likelihood(log_likelihood, weight_norm2, eigenvalues, fine).argmax())])


# --- the network-level posterior -----------------------------------------------------------------
class LaplacePosterior(nn.Module):
    """N(w*, (delta I + U diag(e) U^T)^-1) over the network's flattened weights (see the module docstring).

    Its tensors are buffers, so the fit round-trips through a run's safetensors with the weights;
    their sizes depend on the fit, and loading resizes them to what was stored.
    """

    def __init__(self, shapes: Sequence[tuple[int, int]], options: LaplaceOptions):
        super().__init__()
        self.shapes = [tuple(int(s) for s in shape) for shape in shapes]
        self.sizes = [a * b for a, b in self.shapes]
        self.n_weights = sum(self.sizes)
        limit = int(MAX_WEIGHTS.read())
        if self.n_weights > limit:
            raise ConfigError(
                f"method laplace: the network has {self.n_weights} weights, above the limit of {limit} "
                f"for a full-GGN Laplace fit (its covariance needs up to {self.n_weights}^2 numbers); use "
                f"narrower hidden layers or raise {MAX_WEIGHTS.variable}"
            )
        self.tune_prior = bool(options.tune_prior)
        self.register_buffer("eigenvectors", torch.zeros(self.n_weights, 0, dtype=torch.float64))
        self.register_buffer("eigenvalues", torch.zeros(0, dtype=torch.float64))
        self.register_buffer("prior_precision", torch.tensor(float(options.prior_precision), dtype=torch.float64))
        # 0 until fitted (`fitted` says which): a NaN would make two identical models' states unequal.
        self.register_buffer("log_evidence", torch.tensor(0.0, dtype=torch.float64))
        self.register_buffer("fit_seconds", torch.tensor(0.0, dtype=torch.float64))
        self.register_buffer("fitted", torch.tensor(False))
        # The weights the posterior covers: all, or a pruned network's kept ones (the rest are exactly 0).
        self.register_buffer("kept", torch.ones(self.n_weights, dtype=torch.bool))

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        for name in ("eigenvectors", "eigenvalues", "kept"):
            stored = state_dict.get(prefix + name)
            if stored is not None:
                setattr(self, name, torch.empty_like(stored, device=getattr(self, name).device))
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    @property
    def is_fitted(self) -> bool:
        return bool(self.fitted)

    def flatten(self, weights: Sequence[Tensor]) -> Tensor:
        return torch.cat([w.reshape(*w.shape[:-2], -1) for w in weights], dim=-1)

    def unflatten(self, flat: Tensor) -> list[Tensor]:
        return [
            part.reshape(*flat.shape[:-1], *shape)
            for part, shape in zip(torch.split(flat, self.sizes, dim=-1), self.shapes)
        ]

    # --- fitting ----------------------------------------------------------------------------------
    @torch.no_grad()
    def fit(
        self,
        weights: Sequence[Tensor],
        activation: Callable[[Tensor], Tensor],
        likelihood: nn.Module,
        x: Tensor,
        y: Tensor,
        masks: Sequence[Tensor] | None = None,
    ) -> dict[str, float]:
        """Fit at the weights `weights` (the MAP) on the training set; returns what the fit found.
        With `masks` the posterior covers the kept weights only (the pruned ones stay exactly 0)."""
        started = time.perf_counter()
        weights = [w.detach().to(torch.float64) for w in weights]
        kept = (
            torch.ones(self.n_weights, dtype=torch.bool, device=weights[0].device)
            if masks is None
            else self.flatten([m.to(device=weights[0].device) for m in masks]).bool()
        )
        if masks is not None:
            weights = [w * m.to(w) for w, m in zip(weights, masks)]
        x = x.to(device=weights[0].device, dtype=torch.float64)
        outputs, jacobian = output_jacobian(x, weights, activation)
        factor = curvature_factor(likelihood, outputs, jacobian[..., kept] if masks is not None else jacobian)
        values, vectors = ggn_eigen(factor)
        if masks is not None:  # back to all P coordinates, zero on the pruned ones
            full = vectors.new_zeros((self.n_weights, vectors.shape[1]))
            full[kept] = vectors
            vectors = full
        self.kept = kept
        flat = self.flatten(weights)
        norm2 = float(flat @ flat)
        log_lik = float(likelihood.log_prob(outputs.to(torch.float32), y.to(outputs.device)).double().sum())
        delta = tune_prior_precision(log_lik, norm2, values) if self.tune_prior else float(self.prior_precision)
        self.eigenvectors = vectors.contiguous()
        self.eigenvalues = values.contiguous()
        self.prior_precision.fill_(delta)
        self.log_evidence.fill_(float(log_marginal_likelihood(log_lik, norm2, values, delta)))
        self.fitted.fill_(True)
        self.fit_seconds.fill_(time.perf_counter() - started)
        return self.report()

    def report(self) -> dict[str, float]:
        if not self.is_fitted:
            return {}
        return {
            "laplace_prior_precision": float(self.prior_precision),
            "laplace_log_evidence": float(self.log_evidence),
            "laplace_fit_seconds": float(self.fit_seconds),
            "laplace_ggn_rank": float(self.eigenvalues.numel()),
        }

    def _require_fit(self) -> None:
        if not self.is_fitted:
            raise PredictionError("laplace: the posterior has not been fitted (train the run to fit it)")

    # --- the posterior ----------------------------------------------------------------------------
    def covariance(self) -> Tensor:
        """Sigma (P, P) in float64; for tests and small nets."""
        self._require_fit()
        delta, u = float(self.prior_precision), self.eigenvectors
        scale = 1.0 / (delta + self.eigenvalues) - 1.0 / delta
        return torch.diag(self.kept.to(u.dtype)) / delta + (u * scale) @ u.T

    def marginal_std(self) -> list[Tensor]:
        """Per layer, the marginal posterior sd of each weight (out, in + 1)."""
        self._require_fit()
        delta, u = float(self.prior_precision), self.eigenvectors
        scale = 1.0 / (delta + self.eigenvalues) - 1.0 / delta
        variance = self.kept.to(u.dtype) / delta + (u * u * scale).sum(dim=1)
        return self.unflatten(variance.clamp_min(0).sqrt())

    def noise(self, n: int, seed_of: Callable[[int], int], start: int, device: torch.device) -> Tensor:
        """Sigma^(1/2) z for draws start .. start+n-1, draw r from its own generator seeded seed_of(r).
        Before the fit the posterior is a point mass at the weights (as for an untrained `fnn`): zeros."""
        if not self.is_fitted:
            return torch.zeros((n, self.n_weights), dtype=self.eigenvectors.dtype, device=device)
        delta, u = float(self.prior_precision), self.eigenvectors
        shrink = 1.0 / (delta + self.eigenvalues).sqrt() - 1.0 / math.sqrt(delta)
        out = torch.empty((n, self.n_weights), dtype=u.dtype, device=device)
        for offset, draw in enumerate(range(start, start + n)):
            generator = torch.Generator(device=device).manual_seed(int(seed_of(draw)))
            z = torch.randn(self.n_weights, generator=generator, dtype=u.dtype, device=device)
            z = z * self.kept.to(z.dtype)
            out[offset] = z / math.sqrt(delta) + u @ (shrink * (u.T @ z))
        return out

    def predictive_variance(
        self, x: Tensor, weights: Sequence[Tensor], activation: Callable[[Tensor], Tensor]
    ) -> tuple[Tensor, Tensor]:
        """The linearised predictive's mean f(x; w*) (n, K) and variance diag(J Sigma J^T) (n, K)."""
        self._require_fit()
        weights = [w.detach().to(torch.float64) for w in weights]
        outputs, jacobian = output_jacobian(x.to(device=weights[0].device, dtype=torch.float64), weights, activation)
        delta, u = float(self.prior_precision), self.eigenvectors
        scale = 1.0 / (delta + self.eigenvalues) - 1.0 / delta
        projected = jacobian @ u  # (n, K, k)
        variance = (jacobian * jacobian * self.kept.to(u.dtype)).sum(-1) / delta + (projected * projected * scale).sum(
            -1
        )
        return outputs, variance.clamp_min(0)


def linearised_forward(
    x: Tensor, centre: Sequence[Tensor], tangent: Sequence[Tensor], activation: Callable[[Tensor], Tensor]
) -> Tensor:
    """f(x; centre) + J(x) tangent: the network linearised about `centre`, one forward-mode pass."""
    from torch.func import jvp

    def network(*weights: Tensor) -> Tensor:
        a = x
        for index, weight in enumerate(weights):
            a = augmented_linear(a, weight)
            if index < len(weights) - 1:
                a = activation(a)
        return a

    value, change = jvp(network, tuple(centre), tuple(tangent))
    return value + change


LaplaceLayer.network_posterior = LaplacePosterior


def fit_laplace(
    model: nn.Module,
    x: Tensor,
    y: Tensor,
    masks: Sequence[Tensor] | None = None,
    prior_precision: float = 1.0,
    tune_prior: bool = True,
) -> LaplacePosterior:
    """A Laplace posterior fitted post hoc at any family's network (a BayesianMLP): at its posterior-mean
    weights, or with `masks` at its pruned network (conditional means, kept weights only). The model is
    not changed; `posterior.predictive_variance(x, weights, model.activation)` with the same weights
    gives the linearised band (what the Uncertainty page can set beside the family's own)."""
    with torch.no_grad():
        weights = model.mean_weights() if masks is None else model.conditional_mean_weights(masks)
    posterior = LaplacePosterior(
        [tuple(w.shape) for w in weights], LaplaceOptions(prior_precision=prior_precision, tune_prior=tune_prior)
    )
    posterior.fit(weights, model.activation, model.likelihood, x, y, masks)
    return posterior.to(weights[0].device)

"""Likelihoods: the map from network outputs to p(y | output).

Outputs may carry leading sample dimensions (R, B, K); every method works
elementwise over them. Regression targets are standardised by the data layer;
metrics undo that with the dataset's target_mean / target_std.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Mapping

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from core.enums import Task
from core.errors import ConfigError

LOG_2PI = math.log(2 * math.pi)


class Likelihood(nn.Module):
    name: ClassVar[str]
    task: ClassVar[Task]
    # Whether `probabilities` of one draw's outputs equal, bit for bit, that draw's slice of the probabilities
    # of a stack of draws (a draw cache may then keep them per draw). Categorical's softmax over the last
    # dimension computes each row alone; an elementwise function (Bernoulli's sigmoid) is not such: torch
    # takes an element by its vectorised loop or by its scalar tail depending on where the tensor ends, and
    # the two differ in the last bit (tests/test_draw_cache.py).
    probabilities_by_row: ClassVar[bool] = False

    def n_outputs(self, n_classes: int | None) -> int:
        raise NotImplementedError

    def log_prob(self, output: Tensor, y: Tensor) -> Tensor:
        """log p(y | output) per example (shape of output without the last dim)."""
        raise NotImplementedError

    def parameter_groups(self) -> dict[str, list[nn.Parameter]]:
        params = [p for p in self.parameters() if p.requires_grad]
        return {"likelihood": params} if params else {}

    def kl(self) -> Tensor | None:
        """The likelihood's own KL / negative log prior term of the ELBO; None when it has none."""
        return None

    def initialise_from_data(self, x: Tensor, y: Tensor) -> None:
        """Data-dependent initialisation before training (none by default)."""


class Categorical(Likelihood):
    name = "categorical"
    task = Task.CLASSIFICATION

    def n_outputs(self, n_classes: int | None) -> int:
        if not n_classes or n_classes < 2:
            raise ConfigError(f"likelihood: categorical needs at least 2 classes, got {n_classes}")
        return int(n_classes)

    def log_prob(self, output: Tensor, y: Tensor) -> Tensor:
        log_probs = F.log_softmax(output, dim=-1)
        index = y.long().expand(output.shape[:-1]).unsqueeze(-1)
        return log_probs.gather(-1, index).squeeze(-1)

    probabilities_by_row = True

    def probabilities(self, output: Tensor) -> Tensor:
        return F.softmax(output, dim=-1)


class Bernoulli(Likelihood):
    name = "bernoulli"
    task = Task.CLASSIFICATION

    def n_outputs(self, n_classes: int | None) -> int:
        if n_classes not in (None, 2):
            raise ConfigError(f"likelihood: bernoulli is for 2 classes, got {n_classes}")
        return 1

    def log_prob(self, output: Tensor, y: Tensor) -> Tensor:
        logit = output.squeeze(-1)
        return -F.binary_cross_entropy_with_logits(logit, y.to(logit.dtype).expand_as(logit), reduction="none")

    def probabilities(self, output: Tensor) -> Tensor:
        p1 = torch.sigmoid(output)
        return torch.cat([1 - p1, p1], dim=-1)


NOISE_MODES = ("point", "fixed", "variational")
NOISE_INITS = ("value", "data")
PRECISION_PRIORS = ("none", "gamma")


@dataclass(frozen=True)
class GaussianOptions:
    """The noise model of the homoscedastic Gaussian likelihood (noise sd in standardised target units).

    noise: "point" learns one noise sd by maximising the ELBO (with precision_prior="gamma" the
    Gamma prior on the precision tau = 1/sd^2 is added: a MAP / empirical-Bayes update);
    "fixed" keeps it at its initial value; "variational" gives tau a Gamma prior and a Gamma
    posterior q(tau) learned with the network (Hernandez-Lobato & Adams 2015 use Gamma(6, 6)).
    noise_init: "value" starts at noise_std; "data" at the residual sd of a least-squares linear
    fit to the training set (computed when training starts).
    """

    noise: str = "point"
    noise_std: float = 0.5
    noise_init: str = "value"
    precision_prior: str = "none"
    precision_a: float = 6.0
    precision_b: float = 6.0

    def __post_init__(self) -> None:
        def check(ok: bool, name: str, message: str) -> None:
            if not ok:
                raise ConfigError(f"likelihood_options.{name}: {message}")

        check(self.noise in NOISE_MODES, "noise", f"must be one of {', '.join(NOISE_MODES)}, got {self.noise!r}")
        check(
            self.noise_init in NOISE_INITS,
            "noise_init",
            f"must be one of {', '.join(NOISE_INITS)}, got {self.noise_init!r}",
        )
        check(
            self.precision_prior in PRECISION_PRIORS,
            "precision_prior",
            f"must be one of {', '.join(PRECISION_PRIORS)}, got {self.precision_prior!r}",
        )
        for name in ("noise_std", "precision_a", "precision_b"):
            value = getattr(self, name)
            check(
                isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0,
                name,
                f"must be a positive number, got {value!r}",
            )
        check(
            self.noise != "variational" or self.precision_prior == "gamma",
            "noise",
            "variational noise needs precision_prior=gamma (a prior to update against)",
        )

    @classmethod
    def from_dict(cls, values: Mapping[str, Any] | None) -> "GaussianOptions":
        values = dict(values or {})
        known = [f.name for f in fields(cls)]
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise ConfigError(f"likelihood_options: unknown option(s) {', '.join(unknown)}; known: {', '.join(known)}")
        return cls(**values)

    def non_defaults(self) -> dict[str, Any]:
        default = type(self)()
        return {
            f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) != getattr(default, f.name)
        }


def gamma_kl(a: Tensor, b: Tensor, a0: Tensor, b0: Tensor) -> Tensor:
    """KL(Gamma(a, b) || Gamma(a0, b0)), shape a / rate b."""
    return (
        (a - a0) * torch.digamma(a)
        - torch.lgamma(a)
        + torch.lgamma(a0)
        + a0 * (torch.log(b) - torch.log(b0))
        + a * (b0 - b) / b
    )


# A training step of a small regression net spends as much time on the variational noise's two
# scalar terms (a dozen autograd nodes each) as on a layer; one node each, with the derivatives
# by hand, cost a fraction. Both are checked against gamma_kl and the autograd formula by gradcheck.
class VariationalGaussianLogProb(torch.autograd.Function):
    """E_q[log N(y; f, 1/tau)] per point under q(tau) = Gamma(exp(log_shape), exp(log_rate)):
    0.5 (digamma(a) - log b - log 2 pi) - 0.5 (a / b) (y - f)^2."""

    @staticmethod
    def forward(ctx, f: Tensor, y: Tensor, log_shape: Tensor, log_rate: Tensor) -> Tensor:
        shape, rate = log_shape.exp(), log_rate.exp()
        residual = y - f
        precision = shape / rate
        ctx.save_for_backward(residual, shape, precision)
        return residual.square().mul_(-0.5 * precision).add_(0.5 * (torch.digamma(shape) - log_rate - LOG_2PI))

    @staticmethod
    def backward(ctx, grad: Tensor):
        residual, shape, precision = ctx.saved_tensors
        grad_f = grad * residual * precision
        weighted_square = (grad * residual.square()).sum()
        total = grad.sum()
        # d/d log a = a (0.5 digamma'(a) sum g - 0.5 sum g r^2 / b); d/d log b = -0.5 sum g + 0.5 (a/b) sum g r^2
        grad_log_shape = 0.5 * (shape * torch.polygamma(1, shape) * total - precision * weighted_square)
        grad_log_rate = 0.5 * (precision * weighted_square - total)
        return grad_f, None, grad_log_shape, grad_log_rate


class GammaKLFromLogs(torch.autograd.Function):
    """gamma_kl(exp(log_shape), exp(log_rate), a0, b0), the prior's a0 and b0 fixed (no gradient)."""

    @staticmethod
    def forward(ctx, log_shape: Tensor, log_rate: Tensor, a0: Tensor, b0: Tensor) -> Tensor:
        a, b = log_shape.exp(), log_rate.exp()
        ctx.save_for_backward(a, b, a0, b0)
        return gamma_kl(a, b, a0, b0)

    @staticmethod
    def backward(ctx, grad: Tensor):
        a, b, a0, b0 = ctx.saved_tensors
        # dKL/da = (a - a0) digamma'(a) + b0 / b - 1, dKL/db = a0 / b - a b0 / b^2; times a and b for the logs
        grad_log_shape = grad * a * ((a - a0) * torch.polygamma(1, a) + b0 / b - 1.0)
        grad_log_rate = grad * (a0 - a * b0 / b)
        return grad_log_shape, grad_log_rate, None, None


def least_squares_residual_std(x: Tensor, y: Tensor) -> float:
    """sd of the residuals of a (slightly ridge-regularised) linear fit of y on [x, 1]."""
    design = torch.cat([x.double(), torch.ones_like(x[:, :1], dtype=torch.float64)], dim=1)
    target = y.double().reshape(-1, 1)
    gram = design.T @ design + 1e-6 * len(design) * torch.eye(
        design.shape[1], dtype=torch.float64, device=design.device
    )
    coef = torch.linalg.solve(gram, design.T @ target)
    residual = target - design @ coef
    return max(float(residual.pow(2).mean().sqrt()), 1e-3)


class Gaussian(Likelihood):
    """Homoscedastic Gaussian noise; its scale is point-estimated, fixed or has a Gamma posterior.

    With noise="variational" the data term is E_q[log N(y; f, 1/tau)] under q(tau) = Gamma(a, b),
    which is closed form (E[log tau] = digamma(a) - log b, E[tau] = a / b), and kl() is
    KL(q(tau) || Gamma(a0, b0)). The predictive integrates tau out to a Student-t with 2a degrees of
    freedom and scale^2 b / a; prediction uses the Gaussian with that scale, whose log density
    differs from the t's by O(1/a) (a > a0 + N/2 after training, N the training set size).
    """

    name = "gaussian"
    task = Task.REGRESSION
    Options = GaussianOptions

    def __init__(self, options: GaussianOptions | None = None):
        super().__init__()
        self.options = options if options is not None else GaussianOptions()
        opts = self.options
        log_std = torch.tensor(math.log(opts.noise_std))
        if opts.noise == "variational":
            # q(tau) = Gamma(a, b) starting at mean precision 1 / noise_std^2 with shape a0.
            self.log_q_shape = nn.Parameter(torch.tensor(math.log(opts.precision_a)))
            self.log_q_rate = nn.Parameter(torch.tensor(math.log(opts.precision_a)) + 2 * log_std)
        elif opts.noise == "fixed":
            self.register_buffer("log_noise_std", log_std)
        else:
            self.log_noise_std = nn.Parameter(log_std)  # the state-dict name of runs stored before options
        self.register_buffer("precision_prior_shape", torch.tensor(float(opts.precision_a)))
        self.register_buffer("precision_prior_rate", torch.tensor(float(opts.precision_b)))

    def __getattr__(self, name: str) -> Any:
        # For q(tau), log_noise_std is the log of the predictive scale sqrt(b / a).
        if name == "log_noise_std" and "log_q_shape" in self._parameters:
            return 0.5 * (self._parameters["log_q_rate"] - self._parameters["log_q_shape"])
        return super().__getattr__(name)

    def n_outputs(self, n_classes: int | None) -> int:
        return 1

    def mean_and_std(self, output: Tensor) -> tuple[Tensor, Tensor]:
        mean = output.squeeze(-1)
        return mean, self.log_noise_std.exp().expand_as(mean)

    def log_prob(self, output: Tensor, y: Tensor) -> Tensor:
        if self.options.noise == "variational" and self.training:
            return VariationalGaussianLogProb.apply(output.squeeze(-1), y, self.log_q_shape, self.log_q_rate)
        mean, std = self.mean_and_std(output)
        return -0.5 * (LOG_2PI + 2 * torch.log(std) + ((y - mean) / std) ** 2)

    def kl(self) -> Tensor | None:
        """KL(q(tau) || p(tau)) for variational noise; -log p(tau) for a point tau under a Gamma prior."""
        a0, b0 = self.precision_prior_shape, self.precision_prior_rate
        if self.options.noise == "variational":
            return GammaKLFromLogs.apply(self.log_q_shape, self.log_q_rate, a0, b0)
        if self.options.precision_prior == "gamma" and self.options.noise == "point":
            log_tau = -2 * self.log_noise_std
            log_prior = a0 * torch.log(b0) - torch.lgamma(a0) + (a0 - 1) * log_tau - b0 * log_tau.exp()
            return -log_prior
        return None

    def initialise_from_data(self, x: Tensor, y: Tensor) -> None:
        """noise_init="data": start at the least-squares residual sd. For q(tau), start its shape at
        the conjugate value a0 + N/2 (the shape's optimum once the residuals are fixed), which Adam
        would otherwise need hundreds of steps to reach on large sets."""
        if self.options.noise_init == "data":
            std = least_squares_residual_std(x, y)
        else:
            std = self.options.noise_std
        with torch.no_grad():
            if self.options.noise == "variational":
                self.log_q_shape.fill_(math.log(self.options.precision_a + 0.5 * len(y)))
                self.log_q_rate.copy_(self.log_q_shape + 2 * math.log(std))
            elif self.options.noise_init == "data":
                self.log_noise_std.fill_(math.log(std))

    def set_noise_std(self, std: float) -> None:
        """Set the (predictive) noise sd, e.g. from a warm start or an export."""
        with torch.no_grad():
            if self.options.noise == "variational":
                self.log_q_rate.copy_(self.log_q_shape + 2 * math.log(std))
            else:
                self.log_noise_std.fill_(math.log(std))


class HeteroscedasticGaussian(Gaussian):
    """The network outputs a mean and a raw scale per input: std = softplus(raw) + floor."""

    name = "heteroscedastic"
    std_floor = 1e-3

    Options = None

    def __init__(self, options=None):
        nn.Module.__init__(self)

    def n_outputs(self, n_classes: int | None) -> int:
        return 2

    def mean_and_std(self, output: Tensor) -> tuple[Tensor, Tensor]:
        return output[..., 0], F.softplus(output[..., 1]) + self.std_floor

    def log_prob(self, output: Tensor, y: Tensor) -> Tensor:
        mean, std = self.mean_and_std(output)
        return -0.5 * (LOG_2PI + 2 * torch.log(std) + ((y - mean) / std) ** 2)

    def kl(self) -> Tensor | None:
        return None

    def initialise_from_data(self, x: Tensor, y: Tensor) -> None:
        return None

    def set_noise_std(self, std: float) -> None:
        raise TypeError("the heteroscedastic likelihood's noise comes from the network")


LIKELIHOODS: dict[str, type[Likelihood]] = {
    cls.name: cls for cls in (Categorical, Bernoulli, Gaussian, HeteroscedasticGaussian)
}


def likelihood_options(name: str, values: Mapping[str, Any] | None) -> Any:
    """The validated options of likelihood `name` (None for a likelihood without options)."""
    if name not in LIKELIHOODS:
        raise ConfigError(f"likelihood: unknown {name!r}; choose one of {', '.join(LIKELIHOODS)}")
    options_class = getattr(LIKELIHOODS[name], "Options", None)
    if options_class is None:
        if values:
            raise ConfigError(f"likelihood_options: the {name} likelihood takes no options, got {dict(values)}")
        return None
    return options_class.from_dict(values)


def make_likelihood(name: str, options: Mapping[str, Any] | None = None) -> Likelihood:
    parsed = likelihood_options(name, options)
    return LIKELIHOODS[name]() if parsed is None else LIKELIHOODS[name](parsed)


def default_likelihood(task: str, n_classes: int | None) -> str:
    if task == "classification":
        return "categorical"
    return "gaussian"

"""Likelihoods: the map from network outputs to p(y | output).

Outputs may carry leading sample dimensions (R, B, K); every method works
elementwise over them. Regression targets are standardised by the data layer;
metrics undo that with the dataset's target_mean / target_std.
"""

from __future__ import annotations

import math
from typing import ClassVar

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from core.errors import ConfigError

LOG_2PI = math.log(2 * math.pi)


class Likelihood(nn.Module):
    name: ClassVar[str]
    task: ClassVar[str]

    def n_outputs(self, n_classes: int | None) -> int:
        raise NotImplementedError

    def log_prob(self, output: Tensor, y: Tensor) -> Tensor:
        """log p(y | output) per example (shape of output without the last dim)."""
        raise NotImplementedError

    def parameter_groups(self) -> dict[str, list[nn.Parameter]]:
        params = [p for p in self.parameters() if p.requires_grad]
        return {"likelihood": params} if params else {}


class Categorical(Likelihood):
    name = "categorical"
    task = "classification"

    def n_outputs(self, n_classes: int | None) -> int:
        if not n_classes or n_classes < 2:
            raise ConfigError(f"likelihood: categorical needs at least 2 classes, got {n_classes}")
        return int(n_classes)

    def log_prob(self, output: Tensor, y: Tensor) -> Tensor:
        log_probs = F.log_softmax(output, dim=-1)
        index = y.long().expand(output.shape[:-1]).unsqueeze(-1)
        return log_probs.gather(-1, index).squeeze(-1)

    def probabilities(self, output: Tensor) -> Tensor:
        return F.softmax(output, dim=-1)


class Bernoulli(Likelihood):
    name = "bernoulli"
    task = "classification"

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


class Gaussian(Likelihood):
    """Homoscedastic Gaussian noise with a learned (point-estimated) scale."""

    name = "gaussian"
    task = "regression"

    def __init__(self, init_noise_std: float = 0.5):
        super().__init__()
        if not init_noise_std > 0:
            raise ConfigError(f"likelihood: initial noise std must be > 0, got {init_noise_std}")
        self.log_noise_std = nn.Parameter(torch.tensor(math.log(init_noise_std)))

    def n_outputs(self, n_classes: int | None) -> int:
        return 1

    def mean_and_std(self, output: Tensor) -> tuple[Tensor, Tensor]:
        mean = output.squeeze(-1)
        return mean, self.log_noise_std.exp().expand_as(mean)

    def log_prob(self, output: Tensor, y: Tensor) -> Tensor:
        mean, std = self.mean_and_std(output)
        return -0.5 * (LOG_2PI + 2 * torch.log(std) + ((y - mean) / std) ** 2)


class HeteroscedasticGaussian(Gaussian):
    """The network outputs a mean and a raw scale per input: std = softplus(raw) + floor."""

    name = "heteroscedastic"
    std_floor = 1e-3

    def __init__(self):
        nn.Module.__init__(self)

    def n_outputs(self, n_classes: int | None) -> int:
        return 2

    def mean_and_std(self, output: Tensor) -> tuple[Tensor, Tensor]:
        return output[..., 0], F.softplus(output[..., 1]) + self.std_floor


LIKELIHOODS: dict[str, type[Likelihood]] = {
    cls.name: cls for cls in (Categorical, Bernoulli, Gaussian, HeteroscedasticGaussian)
}


def make_likelihood(name: str) -> Likelihood:
    try:
        return LIKELIHOODS[name]()
    except KeyError:
        raise ConfigError(f"likelihood: unknown {name!r}; choose one of {', '.join(LIKELIHOODS)}") from None


def default_likelihood(task: str, n_classes: int | None) -> str:
    if task == "classification":
        return "categorical"
    return "gaussian"

"""`fnn`: the deterministic network, pruned by weight magnitude (Hubin & Storvik 2024's FNN baseline).

Maximum likelihood: no prior, so the KL term is zero and every "draw" is the
same network. Its statistic |w| makes magnitude pruning one more threshold.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from core.models.base import Keep, SparseLayer, StatisticSpec, augmented_linear


class DeterministicLayer(SparseLayer):
    family = "fnn"
    spec = StatisticSpec("magnitude", Keep.ABOVE, 0.0, 0.0, math.inf)

    def __init__(self, in_features: int, out_features: int, options=None, is_output: bool = False):
        super().__init__(in_features, out_features, options, is_output)
        self.weight = self.initial_weights()

    def forward(self, x: Tensor) -> Tensor:
        return augmented_linear(x, self.weight * self.fixed_mask)

    def mean_weights(self) -> Tensor:
        return self.weight * self.fixed_mask

    def conditional_normal(self) -> tuple[Tensor, Tensor]:
        mean = self.mean_weights()
        return mean, torch.zeros_like(mean)

    def sample_weights(self, n: int, generator: torch.Generator | None = None) -> Tensor:
        return self.mean_weights().unsqueeze(0).expand(n, *self.shape)

    def kl(self) -> Tensor:
        return self.weight.new_zeros(())

    def native_statistic(self) -> Tensor:
        return self.weight.abs()

    def load_point_estimate(self, weight: Tensor) -> None:
        self.weight.data.copy_(weight)

    def parameter_groups(self) -> dict[str, list[nn.Parameter]]:
        return {"weights": [self.weight]}

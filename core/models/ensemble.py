"""`ensemble` (alias `deep-ensemble`): K independently initialised MAP networks trained together;
the predictive is their equal mixture (Lakshminarayanan et al. 2017).

A cheap non-factorised posterior: the K members are K points in weight space, each a mode of
its own, so the mixture's band widens wherever the members disagree (between clusters of data,
where nothing ties them together) -- what a mean-field Gaussian cannot do (Foong et al. 2019).

Each layer holds the K members' augmented matrices, (K, out, in + 1). The training forward runs
every example through every member: the first layer maps x (B, in) to (K, B, out), later layers
map (K, B, in) to (K, B, out), so the network's output is (K, B, outputs) and the likelihood's
log p(y | f) broadcasts over the members. The objective's mean over that axis, with kl() the mean
over members of -log N(w_k; 0, 1/delta) (up to constants), is (1/K) sum_k of each member's own MAP
objective: the members do not interact, and nothing but their initial values (and the noise model,
shared) sets them apart.

Draws are members: network draw r is member (seed * 1_000_003 + r) mod K in every layer, so R = K
draws are each member exactly once and bma is the equal mixture. A layer recovers (seed, r) from
the generator the network hands it (core.models.network.draw_seed: (seed * 1_000_003 + r) * 101 +
layer); a test checks that every layer of a draw picks the same member. "mean" is the network of
the members' averaged weights (the mean of the draws, as for every family), which for an ensemble
is not its predictive mean: use bma.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from core.models.base import Keep, LayerOptions, SparseLayer, StatisticSpec, augmented_linear, init_generator, require

MAX_MEMBERS = 100


@dataclass(frozen=True)
class EnsembleOptions(LayerOptions):
    """members: K, the networks in the ensemble. prior_precision: delta of each member's N(0, 1/delta)
    weight prior (before the objective's kl_weight): its MAP's weight decay."""

    members: int = 5
    prior_precision: float = 1.0

    def validate(self) -> None:
        k = self.members
        require(
            isinstance(k, int) and not isinstance(k, bool) and 2 <= k <= MAX_MEMBERS,
            "members",
            f"must be an integer from 2 to {MAX_MEMBERS}, got {k!r}",
        )
        value = self.prior_precision
        require(
            isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0,
            "prior_precision",
            f"must be a positive number, got {value!r}",
        )


def member_of_generator(generator: torch.Generator, members: int) -> int:
    """The member network draw r uses, from the generator of (seed, r, layer) (see the docstring)."""
    from core.models.network import LAYER_STRIDE

    return (int(generator.initial_seed()) // LAYER_STRIDE) % members


class EnsembleLayer(SparseLayer):
    family = "ensemble"
    # |w| averaged over the members: magnitude pruning of the whole ensemble with one mask.
    spec = StatisticSpec("magnitude", Keep.ABOVE, 0.0, 0.0, math.inf)
    Options = EnsembleOptions
    # As for laplace: with relu, members agree too well between the toy sets' clusters.
    small_regression_activation = "tanh"

    def __init__(
        self, in_features: int, out_features: int, options: EnsembleOptions | None = None, is_output: bool = False
    ):
        super().__init__(in_features, out_features, options, is_output)
        k = int(self.options.members)
        bound = 1.0 / math.sqrt(self.in_features)  # nn.Linear's initialisation, independently per member
        self.weight = nn.Parameter(torch.empty((k, *self.shape)).uniform_(-bound, bound, generator=init_generator()))
        self.register_buffer("prior_precision", torch.tensor(float(self.options.prior_precision)))

    @property
    def members(self) -> int:
        return int(self.weight.shape[0])

    def member_weights(self) -> Tensor:
        """(K, out, in + 1), the fixed structure applied."""
        return self.masked(self.weight)

    def forward(self, x: Tensor) -> Tensor:
        """x (B, in) or (K, B, in) -> (K, B, out): every example through every member."""
        return augmented_linear(x, self.member_weights())

    def mean_weights(self) -> Tensor:
        return self.weight.mean(0) * self.fixed_mask

    def _pick(self, n: int, generator: torch.Generator | None) -> Tensor:
        k = self.members
        if generator is None:
            start = int(torch.randint(k, ()))
        else:
            start = member_of_generator(generator, k)
        return (start + torch.arange(n)) % k

    def sample_weights(self, n: int, generator: torch.Generator | None = None) -> Tensor:
        """n draws: members start, start + 1, ... (mod K), start from the generator (see the docstring)."""
        index = self._pick(n, generator).to(self.weight.device)
        return self.member_weights()[index] * self.fixed_mask

    def kl(self) -> Tensor:
        """The mean over members of -log N(w_k; 0, 1/delta) up to its constant (each member's MAP prior)."""
        weight = self.member_weights()
        return 0.5 * self.prior_precision * (weight * weight).sum() / self.members

    def prior_hyperparameters(self) -> dict[str, float]:
        return {"prior_precision": float(self.prior_precision)}

    def native_statistic(self) -> Tensor:
        return self.weight.abs().mean(0)

    def load_point_estimate(self, weight: Tensor) -> None:
        """Warm start: every member at the point estimate (they then differ only by the training noise)."""
        self.weight.data.copy_(weight.to(self.weight).unsqueeze(0).expand_as(self.weight))

    def parameter_groups(self) -> dict[str, list[nn.Parameter]]:
        return {"weights": [self.weight]}

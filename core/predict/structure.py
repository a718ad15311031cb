"""Which units of a masked network can carry information from the inputs.

Masks are boolean (out, in+1) per layer (bias in the last column), optionally
with leading batch dimensions (R, out, in+1) for R sampled structures.

- A unit *depends on the input* if some kept incoming weight (bias excluded)
  comes from an input feature or from a unit that depends on the input.
- A hidden unit is *useful* if some kept outgoing weight goes to a useful unit;
  every output unit is useful.
- A network is *disconnected* when no output unit depends on any input
  feature: its prediction is the same constant for every x.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor


def input_dependence(masks: Sequence[Tensor]) -> list[Tensor]:
    """Per layer, a bool tensor (..., out): does the unit's value depend on x?"""
    first = masks[0]
    current = torch.ones(first.shape[:-2] + (first.shape[-1] - 1,), dtype=torch.bool, device=first.device)
    result = []
    for mask in masks:
        incoming = mask[..., :-1].bool() & current.unsqueeze(-2)
        current = incoming.any(dim=-1)
        result.append(current)
    return result


def is_disconnected(masks: Sequence[Tensor]) -> Tensor | bool:
    """True where no output depends on any input (a bool tensor over leading batch dims)."""
    disconnected = ~input_dependence(masks)[-1].any(dim=-1)
    return bool(disconnected) if disconnected.dim() == 0 else disconnected


def useful_units(masks: Sequence[Tensor]) -> list[Tensor]:
    """Per layer, (out,) bool: can the unit's value reach an output? The last layer is all True."""
    useful = [torch.ones(masks[-1].shape[0], dtype=torch.bool, device=masks[-1].device)]
    for mask in reversed(masks[1:]):
        outgoing = mask[:, :-1].bool() & useful[0].unsqueeze(-1)
        useful.insert(0, outgoing.any(dim=0))
    return useful


def kept_counts(masks: Sequence[Tensor]) -> list[int]:
    """Kept (nonzero) entries per layer, summed over any leading batch dims."""
    return [int(torch.count_nonzero(mask)) for mask in masks]


def layer_densities(masks: Sequence[Tensor], counts: Sequence[int] | None = None) -> list[float]:
    """Fraction of kept entries per layer (averaged over any leading batch dims)."""
    counts = kept_counts(masks) if counts is None else counts
    return [count / mask.numel() for count, mask in zip(counts, masks)]


def overall_density(masks: Sequence[Tensor], counts: Sequence[int] | None = None) -> float:
    counts = kept_counts(masks) if counts is None else counts
    return sum(counts) / sum(mask.numel() for mask in masks)

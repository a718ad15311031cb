"""Which units of a masked network can carry information from the inputs.

Masks are boolean (out, in+1) per layer (bias in the last column), optionally
with leading batch dimensions (R, out, in+1) for R sampled structures.

A layer of an input-skip network (the `input_skip` option) reads the previous
layer's units and then the d input features: its matrix is
(out, previous + d + 1). Which layers skip is read off the shapes
(`skip_layers`): a layer's fan-in is either the previous width or that plus d,
never both, since d >= 1.

- A unit *depends on the input* if some kept incoming weight (bias excluded)
  comes from an input feature or from a unit that depends on the input.
- A hidden unit is *useful* if some kept outgoing weight goes to a useful unit;
  every output unit is useful.
- A network is *disconnected* when no output unit depends on any input
  feature: its prediction is the same constant for every x.
- A kept weight is *active* when it lies on a path from an input to an output
  (`active_masks`): its source depends on the input and its target is useful.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor


def skip_layers(shapes: Sequence[Sequence[int]]) -> list[bool]:
    """Per layer, whether it also reads the inputs (its fan-in is the previous width plus d).

    `shapes`: per layer (..., out, in+1) (a tensor's shape or a layer's); layer 0 never skips."""
    d = int(shapes[0][-1]) - 1
    flags = [False]
    for previous, shape in zip(shapes[:-1], shapes[1:]):
        fan_in, width = int(shape[-1]) - 1, int(previous[-2])
        if fan_in == width:
            flags.append(False)
        elif fan_in == width + d:
            flags.append(True)
        else:
            raise ValueError(
                f"layer shapes do not chain: fan-in {fan_in} after a layer of {width} units and {d} inputs"
            )
    return flags


def _sources(previous: Tensor, inputs: Tensor, skip: bool) -> Tensor:
    """The flags of layer `index`'s sources: the previous layer's units, then the inputs where it skips."""
    if not skip:
        return previous
    return torch.cat([previous, inputs.expand(previous.shape[:-1] + inputs.shape[-1:])], dim=-1)


def input_dependence(masks: Sequence[Tensor]) -> list[Tensor]:
    """Per layer, a bool tensor (..., out): does the unit's value depend on x?"""
    first = masks[0]
    inputs = torch.ones(first.shape[:-2] + (first.shape[-1] - 1,), dtype=torch.bool, device=first.device)
    current = inputs
    result = []
    for index, (mask, skip) in enumerate(zip(masks, skip_layers([m.shape for m in masks]))):
        sources = current if index == 0 else _sources(current, inputs, skip)
        incoming = mask[..., :-1].bool() & sources.unsqueeze(-2)
        current = incoming.any(dim=-1)
        result.append(current)
    return result


def is_disconnected(masks: Sequence[Tensor]) -> Tensor | bool:
    """True where no output depends on any input (a bool tensor over leading batch dims)."""
    disconnected = ~input_dependence(masks)[-1].any(dim=-1)
    return bool(disconnected) if disconnected.dim() == 0 else disconnected


def useful_units(masks: Sequence[Tensor]) -> list[Tensor]:
    """Per layer, (..., out) bool: can the unit's value reach an output? The last layer is all True."""
    last = masks[-1]
    useful = [torch.ones(last.shape[:-1], dtype=torch.bool, device=last.device)]
    for index in range(len(masks) - 1, 0, -1):
        width = masks[index - 1].shape[-2]  # the previous layer's units come first among the sources
        outgoing = masks[index][..., :width].bool() & useful[0].unsqueeze(-1)
        useful.insert(0, outgoing.any(dim=-2))
    return useful


def active_masks(masks: Sequence[Tensor]) -> list[Tensor]:
    """Per layer, the kept entries that lie on an input-to-output path, (..., out, in+1) bool.

    A kept weight a -> b is on such a path exactly when a depends on the input (or is an input) and
    b is useful: that is the fixed point of dropping, again and again, the weights into units with no
    kept outgoing weight and out of units with no kept incoming one (a bias is no incoming path).
    With input skips, paths through the skip weights count like any other.

    Biases: the bias of an *active unit* (useful, and depending on the input or an output unit) is
    kept where its own bias is kept or where a kept weight brings it a constant (a unit that does not
    depend on the input, whose value is folded into this bias, as core.predict.compact does): with
    those folded biases the active network predicts exactly as the pruned one. Every other entry
    is dropped.
    """
    depends = input_dependence(masks)
    useful = useful_units(masks)
    flags = skip_layers([m.shape for m in masks])
    first = masks[0]
    inputs = torch.ones(first.shape[:-2] + (first.shape[-1] - 1,), dtype=torch.bool, device=first.device)
    result = []
    for index, (mask, skip) in enumerate(zip(masks, flags)):
        mask = mask.bool()
        sources = inputs if index == 0 else _sources(depends[index - 1], inputs, skip)
        weights = mask[..., :-1] & sources.unsqueeze(-2) & useful[index].unsqueeze(-1)
        unit = useful[index] & (depends[index] if index < len(masks) - 1 else torch.ones_like(useful[index]))
        constant_in = (mask[..., :-1] & ~sources.unsqueeze(-2)).any(dim=-1)
        bias = unit & (mask[..., -1] | constant_in)
        result.append(torch.cat([weights, bias.unsqueeze(-1)], dim=-1))
    return result


def network_active_masks(model, masks: Sequence[Tensor]) -> list[Tensor]:
    """active_masks of a model's masks: a conv network's from its channels (BayesianMLP.conv_active_masks)."""
    conv = model.conv_active_masks(masks)
    return active_masks(masks) if conv is None else conv


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


def active_density(masks: Sequence[Tensor]) -> float:
    """The density of the entries on an input-to-output path (`active_masks`) among all weights."""
    return overall_density(active_masks(masks))


def active_network(weights: Sequence[Tensor], masks: Sequence[Tensor], activation) -> list[Tensor]:
    """The pruned network (`weights` outside `masks` set to 0) written with its active entries only
    (`active_masks`): per layer an (out, in+1) matrix, zero off the active entries, that computes the
    same outputs for every x. A unit that does not depend on the input is a constant; its value,
    activation(its folded bias), is added into the biases of the units it feeds (in float64) and its
    weights dropped. Weights (out, in+1) per layer, one network (no draw dimension)."""
    active = active_masks(masks)
    depends = input_dependence(masks)
    result = []
    constant = None  # per unit of the previous layer: its value where it is constant, else 0
    for index, (weight, mask, keep) in enumerate(zip(weights, masks, active)):
        kept = weight.double() * mask
        bias = kept[:, -1].clone()
        if index > 0:
            width = masks[index - 1].shape[-2]
            bias = bias + kept[:, :width] @ constant
        out = torch.where(keep[:, :-1], kept[:, :-1], torch.zeros_like(kept[:, :-1]))
        if index < len(weights) - 1:
            constant = torch.where(depends[index], torch.zeros_like(bias), activation(bias))
        bias = torch.where(keep[:, -1], bias, torch.zeros_like(bias))
        result.append(torch.cat([out, bias.unsqueeze(-1)], dim=-1).to(weight.dtype))
    return result

"""The convolutional body of a network (ModelConfig.conv): its geometry, its forward pass with given
weights (predictions), and its channel-level structure.

Each conv block is conv k x k (valid, stride 1) -> activation -> max-pool 2 x 2 (floor), as in the
LeNet-5 of Caffe used by Molchanov et al. (2017) and Louizos et al. (2017); the last block's
output is flattened (channel-major) into the first fully connected layer.

Predictions run a network of given weights (one network, or R draws at once) through
`ConvNetwork`, which answers what core.predict's runner asks of a compact network (draws, units,
calls); units that do not depend on the input are not folded away as in the compact passes (the
masked weights are zeros and cost a convolution each).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from core import limits
from core.errors import ConfigError, InputError
from core.models.conv import augmented_conv, conv_layer_class
from core.validate import shown, whole_number

POOL = 2  # every conv block ends in a 2 x 2 max-pool (LeNet-5)


@dataclass(frozen=True)
class ConvGeometry:
    """Shapes of the conv body: per block (in_channels, out_channels, kernel, output height, output width)."""

    image_shape: tuple[int, int, int]  # (channels, height, width) of an input
    blocks: tuple[tuple[int, int, int, int, int], ...]

    @classmethod
    def of(cls, image_shape: Sequence[int], conv: Sequence[Sequence[int]]) -> "ConvGeometry":
        channels, height, width = (int(v) for v in image_shape)
        blocks = []
        for index, (out_channels, kernel) in enumerate(conv):
            if kernel > min(height, width) or (height - kernel + 1) < POOL or (width - kernel + 1) < POOL:
                raise ConfigError(
                    f"conv: block {index + 1} ({out_channels} filters of {kernel}x{kernel}) does not "
                    f"fit its {height}x{width} input (each block is a valid conv then a 2x2 "
                    f"max-pool); use fewer blocks or smaller kernels"
                )
            height, width = (height - kernel + 1) // POOL, (width - kernel + 1) // POOL
            blocks.append((channels, int(out_channels), int(kernel), height, width))
            channels = int(out_channels)
        return cls((*(int(v) for v in image_shape),), tuple(blocks))

    @property
    def n_conv(self) -> int:
        return len(self.blocks)

    @property
    def flat_features(self) -> int:
        """Features the first fully connected layer reads (channels x height x width of the last block)."""
        _, channels, _, height, width = self.blocks[-1]
        return channels * height * width

    def activation_sizes(self) -> list[int]:
        """At most the values per input after each conv block (before pooling), for memory estimates."""
        return [out * (h * POOL + 1) * (w * POOL + 1) for _, out, _, h, w in self.blocks]

    def images(self, x: Tensor) -> Tensor:
        """Flat inputs (n, C H W) -> images (n, C, H, W)."""
        return x.reshape(x.shape[0], *self.image_shape)


def image_shape_of(input_shape: Sequence[int] | None) -> tuple[int, int, int] | None:
    """(C, H, W) of a dataset's input shape: (H, W) is one channel; None where inputs are not images."""
    if input_shape is None:
        return None
    shape = tuple(int(v) for v in input_shape)
    if len(shape) == 2:
        return (1, *shape)
    if len(shape) == 3:
        return shape
    return None


def conv_forward(x: Tensor, weights: Sequence[Tensor], geometry: ConvGeometry, activation: nn.Module) -> Tensor:
    """Outputs (n, out) of one network of augmented weights (conv blocks first) on flat inputs x (n, C H W)."""
    h = geometry.images(x)
    last = len(weights) - 1
    for index, weight in enumerate(weights):
        if index < geometry.n_conv:
            in_channels, _, kernel, _, _ = geometry.blocks[index]
            h = F.max_pool2d(activation(augmented_conv(h, weight, in_channels, kernel)), POOL)
            if index == geometry.n_conv - 1:
                h = h.flatten(1)
            continue
        h = F.linear(h, weight[:, :-1], weight[:, -1])
        if index < last:
            h = activation(h)
    return h


@dataclass
class ConvNetwork:
    """A network of given weights, (out, in+1) or (R, out, in+1) per layer, already masked; called like
    core.predict.compact.CompactNetwork: outputs (n, out), or (R, n, out) for R draws."""

    weights: list[Tensor]
    geometry: ConvGeometry
    activation: nn.Module
    disconnected: bool | None = None
    skip: tuple[bool, ...] = ()

    @property
    def n_draws(self) -> int | None:
        return next((w.shape[0] for w in self.weights if w.dim() == 3), None)

    @property
    def units(self) -> list[int]:
        return self.geometry.activation_sizes() + [w.shape[-2] for w in self.weights[self.geometry.n_conv :]]

    def draws(self, start: int, stop: int) -> "ConvNetwork":
        weights = [w[start:stop] if w.dim() == 3 else w for w in self.weights]
        return ConvNetwork(weights, self.geometry, self.activation, self.disconnected)

    def draw(self, index: int) -> "ConvNetwork":
        """Draw `index` alone, its tensors copied out of the chunk (see CompactNetwork.draw)."""
        weights = [w[index : index + 1].clone() if w.dim() == 3 else w for w in self.weights]
        return ConvNetwork(weights, self.geometry, self.activation, self.disconnected)

    def __call__(self, x: Tensor) -> Tensor:
        if self.n_draws is None:
            return conv_forward(x, self.weights, self.geometry, self.activation)
        return torch.stack(
            [
                conv_forward(x, [w[r] if w.dim() == 3 else w for w in self.weights], self.geometry, self.activation)
                for r in range(self.n_draws)
            ]
        )


def channel_masks(masks: Sequence[Tensor], geometry: ConvGeometry) -> list[Tensor]:
    """Masks (..., out, in+1) of a conv network as the masks of a fully connected one whose units are the
    channels: a channel reads another where some kept tap of its filters does; the first fully connected
    layer reads a channel where it keeps a weight from some position of it. Which channels and units
    depend on the input, and which reach an output, are then those of core.predict.structure."""
    result = []
    for index, mask in enumerate(masks):
        mask = mask.bool()
        if index < geometry.n_conv:
            in_channels = geometry.blocks[index][0]
            taps = mask[..., :-1].reshape(*mask.shape[:-1], in_channels, -1).any(dim=-1)
        elif index == geometry.n_conv:
            channels = geometry.blocks[-1][1]
            taps = mask[..., :-1].reshape(*mask.shape[:-1], channels, -1).any(dim=-1)
        else:
            result.append(mask)
            continue
        result.append(torch.cat([taps, mask[..., -1:]], dim=-1))
    return result


def channel_flow(masks: Sequence[Tensor]) -> tuple[list[Tensor], list[Tensor]]:
    """Per layer of channel-level masks (channel_masks, a plain chain): which units depend on the input
    and which reach an output, (..., out) bool each (as core.predict.structure works them out)."""
    first = masks[0]
    current = torch.ones(first.shape[:-2] + (first.shape[-1] - 1,), dtype=torch.bool, device=first.device)
    depends = []
    for mask in masks:
        current = (mask[..., :-1] & current.unsqueeze(-2)).any(dim=-1)
        depends.append(current)
    useful = [torch.ones(masks[-1].shape[:-1], dtype=torch.bool, device=first.device)]
    for mask in masks[:0:-1]:
        useful.insert(0, (mask[..., :-1] & useful[0].unsqueeze(-1)).any(dim=-2))
    return depends, useful


def conv_active_masks(masks: Sequence[Tensor], geometry: ConvGeometry) -> list[Tensor]:
    """core.predict.structure.active_masks for a conv network: a kept tap or weight is on an input-to-output
    path when its source channel (or unit) depends on the input and its target filter (or unit) reaches an
    output. Each position of a channel depends on the input exactly when the channel does (valid
    convolutions read only real pixels), so the channel-level flow decides it; a bias is kept on an active
    unit where it is kept or a constant source adds to it, as in the fully connected rule."""
    masks = [mask.bool() for mask in masks]
    depends, useful = channel_flow(channel_masks(masks, geometry))
    first = masks[0]
    sources = torch.ones(first.shape[:-2] + (geometry.image_shape[0],), dtype=torch.bool, device=first.device)
    result = []
    last = len(masks) - 1
    for index, mask in enumerate(masks):
        fan_in = mask.shape[-1] - 1
        spread = sources.repeat_interleave(fan_in // sources.shape[-1], dim=-1)  # channel -> its columns
        weights = mask[..., :-1] & spread.unsqueeze(-2) & useful[index].unsqueeze(-1)
        unit = useful[index] & (depends[index] if index < last else torch.ones_like(useful[index]))
        constant_in = (mask[..., :-1] & ~spread.unsqueeze(-2)).any(dim=-1)
        result.append(torch.cat([weights, (unit & (mask[..., -1] | constant_in)).unsqueeze(-1)], dim=-1))
        sources = depends[index]
    return result


def check_conv(value: Any, image_shape: Sequence[int] | None, dataset: str, method: str) -> tuple[tuple[int, int], ...]:
    """Conv blocks from outside (config files, presets) as ((filters, kernel), ...): at most
    $BNN_MAX_HIDDEN_LAYERS blocks, filters from 1 to $BNN_MAX_HIDDEN_WIDTH, kernels that fit the image
    (image_shape, (C, H, W) of `dataset`; None: not an image set), for a family with a conv layer.
    InputError (or ConfigError) naming conv otherwise; () for none."""
    example = "[[20, 5], [50, 5]]"
    if value is None or (isinstance(value, (list, tuple)) and not value):
        return ()
    if not isinstance(value, (list, tuple)):
        raise InputError(f"conv: give a list of [filters, kernel] pairs such as {example}, got {shown(value)}")
    most = limits.limit(limits.MAX_HIDDEN_LAYERS)
    if len(value) > most:
        raise InputError(
            f"conv: {len(value)} blocks are more than the limit {most} (${limits.MAX_HIDDEN_LAYERS.variable})"
        )
    widest = limits.limit(limits.MAX_HIDDEN_WIDTH)
    blocks = []
    for block in value:
        if not isinstance(block, (list, tuple)) or len(block) != 2:
            raise InputError(f"conv: each block is a [filters, kernel] pair such as [20, 5], got {shown(block)}")
        blocks.append((whole_number(block[0], "conv filters", 1, widest), whole_number(block[1], "conv kernel", 1)))
    if image_shape is None:
        raise InputError(
            f"conv: {dataset!r} has no image inputs; convolutional blocks need an image dataset such as "
            f"mnist, fashion-mnist, kmnist or mnist-small"
        )
    conv_layer_class(method)
    ConvGeometry.of(image_shape, blocks)
    return tuple(blocks)

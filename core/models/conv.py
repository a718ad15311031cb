"""Convolutional layers for the families the LeNet-5 anchors use (`lbbnn`, `bnn`, `sparse-vd`, `fnn`,
and `bnn`'s variants `variational-dense`, `bnn-mixture`).

A conv layer of C input channels, O filters of k x k is its family's layer with in_features = C k k:
the parameters are the family's augmented (O, C k k + 1) matrices (a row is one filter, flattened
channel-major as torch lays out (O, C, k, k), then its bias), so the statistic, the keep mask, the KL,
the draws and the store are the family's own and count each filter tap as one weight. Only the
training forward differs: a convolution instead of a product.

The local reparameterisation for a convolution (Kingma et al. 2015; Molchanov et al. 2017): with
independent weights of means m and variances v, each output b = sum w x + bias is Gaussian given x
with mean conv2d(x, m) and variance conv2d(x^2, v), sampled independently per output position
(the marginal of each output is exact; the correlation between positions that share a filter is
dropped, as in both papers).
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.nn import functional as F

from core.enums import Estimator
from core.errors import ConfigError
from core.models.base import SparseLayer
from core.models.fnn import DeterministicLayer
from core.models.gaussian import GaussianLayer, MixtureGaussianLayer, VariationalDenseLayer
from core.models.lbbnn import LBBNNLayer
from core.models.sparse_vd import SparseVDLayer


def filters_of(weight: Tensor, in_channels: int, kernel: int) -> tuple[Tensor, Tensor]:
    """Augmented (..., O, C k k + 1) -> filters (..., O, C, k, k) and biases (..., O)."""
    return weight[..., :-1].reshape(*weight.shape[:-1], in_channels, kernel, kernel), weight[..., -1]


def augmented_conv(x: Tensor, weight: Tensor, in_channels: int, kernel: int) -> Tensor:
    """conv2d of images x (B, C, H, W) with the filters and biases of an augmented (O, C k k + 1) matrix."""
    filters, bias = filters_of(weight, in_channels, kernel)
    return F.conv2d(x, filters, bias)


def conv_moments(x: Tensor, mean: Tensor, var: Tensor, in_channels: int, kernel: int) -> tuple[Tensor, Tensor]:
    """Mean and variance of every output of the convolution with independent weights (mean, var)."""
    return augmented_conv(x, mean, in_channels, kernel), augmented_conv(x * x, var, in_channels, kernel)


class ConvLayer:
    """Mixin: a family's layer read as a convolution (place before the family's class)."""

    def __init__(self, in_channels: int, out_channels: int, kernel: int, options=None):
        super().__init__(int(in_channels) * int(kernel) ** 2, out_channels, options, is_output=False)
        self.in_channels = int(in_channels)
        self.kernel_size = int(kernel)

    def conv(self, x: Tensor, weight: Tensor) -> Tensor:
        return augmented_conv(x, weight, self.in_channels, self.kernel_size)

    def conv_lrt(self, x: Tensor, mean: Tensor, var: Tensor) -> Tensor:
        """One draw of the outputs from their Gaussian marginals (the training noise generator)."""
        out_mean, out_var = conv_moments(x, mean, var, self.in_channels, self.kernel_size)
        return out_mean + out_var.clamp_min(1e-16).sqrt() * self.normal_noise(out_mean.shape, out_mean)

    def filters(self, weight: Tensor) -> Tensor:
        """(..., O, C k k + 1) -> the filters (..., O, C, k, k), bias dropped (masks, charts)."""
        return filters_of(weight, self.in_channels, self.kernel_size)[0]

    def forward_with_kl(self, x: Tensor, kl_value: bool = True) -> tuple[Tensor, Tensor]:
        return self(x), self.kl()  # the fused kernels are for products

    def extra_repr(self) -> str:
        return (
            f"in_channels={self.in_channels}, out_channels={self.out_features}, kernel={self.kernel_size}, "
            f"family={self.family}"
        )


class ConvLBBNNLayer(ConvLayer, LBBNNLayer):
    def forward(self, x: Tensor) -> Tensor:
        alpha = self._effective_inclusion()
        mu, sigma = self.weight_mu, self.weight_sigma
        if self.options.estimator is Estimator.LOCAL_REPARAMETERISATION:
            mean = alpha * mu
            return self.conv_lrt(x, mean, alpha * (sigma * sigma + mu * mu) - mean * mean)
        gamma = self._relaxed_inclusion(alpha) * self.fixed_mask
        return self.conv(x, gamma * (mu + sigma * self.normal_noise(mu.shape, mu)))


class ConvGaussianLayer(ConvLayer, GaussianLayer):
    def forward(self, x: Tensor) -> Tensor:
        mu, sigma = self.weight_mu * self.fixed_mask, self.weight_sigma * self.fixed_mask
        if self.options.estimator is Estimator.LOCAL_REPARAMETERISATION:
            return self.conv_lrt(x, mu, sigma * sigma)
        return self.conv(x, mu + sigma * self.normal_noise(mu.shape, mu))


class ConvVariationalDenseLayer(ConvGaussianLayer, VariationalDenseLayer):
    pass


class ConvMixtureGaussianLayer(ConvGaussianLayer, MixtureGaussianLayer):
    pass


class ConvSparseVDLayer(ConvLayer, SparseVDLayer):
    def forward(self, x: Tensor) -> Tensor:
        mean = self.masked(self.theta)
        var = self.masked(torch.exp(self.log_sigma2))
        if self.options.estimator is Estimator.LOCAL_REPARAMETERISATION:
            return self.conv_lrt(x, mean, var)
        return self.conv(x, mean + var.sqrt() * self.normal_noise(mean.shape, mean))


class ConvDeterministicLayer(ConvLayer, DeterministicLayer):
    def forward(self, x: Tensor) -> Tensor:
        return self.conv(x, self.weight * self.fixed_mask)


CONV_LAYERS: dict[str, type[SparseLayer]] = {
    "lbbnn": ConvLBBNNLayer,
    "bnn": ConvGaussianLayer,
    "variational-dense": ConvVariationalDenseLayer,
    "bnn-mixture": ConvMixtureGaussianLayer,
    "sparse-vd": ConvSparseVDLayer,
    "fnn": ConvDeterministicLayer,
}


def conv_layer_class(family: str) -> type[SparseLayer]:
    """The convolutional layer of `family` (canonical name); ConfigError naming the ones that have one."""
    if family not in CONV_LAYERS:
        raise ConfigError(
            f"conv: the {family!r} family has no convolutional layer; use one of "
            f"{', '.join(CONV_LAYERS)}, or leave conv unset for a fully connected network"
        )
    return CONV_LAYERS[family]

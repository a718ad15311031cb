"""What the fused training layers (lbbnn_fused, gaussian_fused) share.

A fused layer is one autograd Function for a local-reparameterisation layer:
elementwise kernels turn the variational parameters into weight means and
variances, two products give the pre-activation h = x.mean + sqrt(x^2.var) noise,
and the backward pass turns the products' gradients into parameter gradients
derived by hand. The bias is handled by a column of ones appended to the input,
so every product is one contiguous GEMM and the weight gradients come out in the
augmented (out, in+1) layout without slicing copies.
"""

from __future__ import annotations

import warnings
from typing import Callable

import torch
from torch import Tensor
from torch.nn import functional as F


def products_forward(x: Tensor, mean_weight: Tensor, var_weight: Tensor, noise: Tensor):
    """h, and (x_aug, x2_aug, sd) for the backward pass."""
    x_aug = F.pad(x, (0, 1), value=1.0)
    x2_aug = x_aug * x_aug
    mean = torch.mm(x_aug, mean_weight.t())
    sd = torch.mm(x2_aug, var_weight.t()).clamp_min_(1e-16).sqrt_()
    return torch.addcmul(mean, sd, noise), x_aug, x2_aug, sd


def products_backward(
    grad_h: Tensor,
    noise: Tensor,
    x_aug: Tensor,
    x2_aug: Tensor,
    sd: Tensor,
    mean_weight: Tensor,
    var_weight: Tensor,
    input_grad: bool,
):
    """(grad x or None, grad of the mean weights, grad of the variance weights)."""
    grad_var_pre = (grad_h * noise).div_(sd).mul_(0.5)
    grad_x = None
    if input_grad:
        grad_x = torch.mm(grad_var_pre, var_weight[:, :-1]).mul_(x_aug[:, :-1]).mul_(2.0)
        grad_x = grad_x.addmm_(grad_h, mean_weight[:, :-1])
    return grad_x, torch.mm(grad_h.t(), x_aug), torch.mm(grad_var_pre.t(), x2_aug)


class LocalReparameterisation(torch.autograd.Function):
    """h = x.mean_weight + sqrt(x^2.var_weight) noise for augmented (out, in+1) weights and a
    2-D x, with the products' backward by hand: one GEMM each way per product, no slicing
    copies. The families that build their weight moments under autograd use it for the rest."""

    @staticmethod
    def forward(ctx, x: Tensor, mean_weight: Tensor, var_weight: Tensor, noise: Tensor):
        h, x_aug, x2_aug, sd = products_forward(x, mean_weight, var_weight, noise)
        ctx.save_for_backward(noise, x_aug, x2_aug, sd, mean_weight, var_weight)
        return h

    @staticmethod
    def backward(ctx, grad_h: Tensor):
        noise, x_aug, x2_aug, sd, mean_weight, var_weight = ctx.saved_tensors
        grad_x, grad_mean, grad_var = products_backward(
            grad_h, noise, x_aug, x2_aug, sd, mean_weight, var_weight, ctx.needs_input_grad[0]
        )
        return grad_x, grad_mean, grad_var, None


def backward_through(
    ctx, grad_h: Tensor | None, grad_kl: Tensor | None, backward_kernel: Callable, unused_inputs: int
) -> tuple:
    """A fused Function's backward: the kernel on the saved tensors, then None for the inputs
    that take no gradient (noise, constants, flags). Saved tensors start with the noise."""
    saved = ctx.saved_tensors
    if grad_h is None:
        grad_h = torch.zeros_like(saved[0])
    if grad_kl is None:
        grad_kl = grad_h.new_zeros(())
    grads = backward_kernel(grad_h, grad_kl.reshape(()), *saved, ctx.needs_input_grad[0])
    return (*grads, *([None] * unused_inputs))


_compiled: dict[str, tuple] = {}


def kernel_pair(name: str, forward: Callable, backward: Callable, compiled: bool) -> tuple:
    """(forward, backward) eager, or compiled by torch.compile (once per process).

    Compiled, the elementwise work over the weights becomes one loop each way
    and the small per-batch operations around the products lose their per-call
    dispatch overhead. Compiling costs ~25 s once per process and layer shapes
    (inductor caches the result on disk); worth it for long runs, not for tests
    and demos.
    """
    if not compiled:
        return forward, backward
    if name not in _compiled:
        _compiled[name] = (torch.compile(forward, dynamic=False), torch.compile(backward, dynamic=False))
    return _compiled[name]


def apply_fused(layer, function: type[torch.autograd.Function], *args):
    """function.apply(*args, compiled) with the layer's choice of kernels.

    Where compiling fails (no C compiler, an unsupported platform) it warns once
    and the layer goes on with the eager kernels, which compute the same thing.
    """
    if layer.compiled_kernels:
        try:
            return function.apply(*args, True)
        except Exception as exc:
            warnings.warn(
                f"torch.compile of the {layer.family} kernels failed ({type(exc).__name__}: {exc}); "
                f"training continues with the eager kernels",
                RuntimeWarning,
                stacklevel=3,
            )
            layer.compiled_kernels = False
    return function.apply(*args, False)

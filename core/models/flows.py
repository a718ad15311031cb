"""Real NVP affine coupling flows (Dinh, Sohl-Dickstein & Bengio 2017) for the multiplicative
variables of `lbbnn-flow` (core/models/lbbnn_flow.py).

One coupling layer with a binary mask m keeps the masked coordinates and moves the others by an
affine map whose scale and shift depend only on the kept ones:

    h = tanh(A (m * z) + a),  s = (1 - m) * (S h + b_s),  t = (1 - m) * (T h + b_t)
    z' = m * z + (1 - m) * (z * exp(s) + t),           log |det dz'/dz| = sum(s)

The Jacobian is triangular (the moved coordinates depend on the kept ones, not on each other), hence
the log-determinant is the sum of the log-scales. The output maps S, T start at zero, so a fresh
flow is the identity: q(z) starts as the Gaussian of its base, and lbbnn-flow as mean-field LBBNN
with multiplicative Gaussian noise. Masks alternate between even and odd coordinates; in one
dimension every second layer is a learned affine map of z (its scale and shift see no input).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from core.models.base import init_generator


class AffineCoupling(nn.Module):
    def __init__(self, dim: int, hidden: int, parity: int):
        super().__init__()
        mask = (torch.arange(dim) % 2 == parity).to(torch.get_default_dtype())
        self.register_buffer("mask", mask, persistent=False)  # derived from (dim, parity)
        bound = 1.0 / dim**0.5
        self.hidden_weight = nn.Parameter(torch.empty(hidden, dim).uniform_(-bound, bound, generator=init_generator()))
        self.hidden_bias = nn.Parameter(torch.zeros(hidden))
        self.scale_weight = nn.Parameter(torch.zeros(dim, hidden))  # zero: the identity at the start
        self.scale_bias = nn.Parameter(torch.zeros(dim))
        self.shift_weight = nn.Parameter(torch.zeros(dim, hidden))
        self.shift_bias = nn.Parameter(torch.zeros(dim))

    def forward(self, z: Tensor) -> tuple[Tensor, Tensor]:
        """z' and log |det dz'/dz| for z of shape (..., dim); the log-determinant has shape (...).

        Written for few operations (autograd's path: without gradients, and under torch.func): the mask is
        folded into the rows of the output maps, so that s and t come from one product and are 0 on the kept
        coordinates, where z exp(s) + t is then z itself, the formula's m z.
        """
        mask = self.mask.to(z.dtype)
        moved = torch.cat([1 - mask, 1 - mask])
        h = torch.tanh(F.linear(z * mask, self.hidden_weight, self.hidden_bias))
        weight = torch.cat([self.scale_weight, self.shift_weight]) * moved[:, None]
        st = F.linear(h, weight, torch.cat([self.scale_bias, self.shift_bias]) * moved)
        s, t = st.split(self.mask.shape[0], dim=-1)
        return torch.addcmul(t, z, torch.exp(s)), s.sum(-1)

    def parameter_list(self) -> tuple[Tensor, ...]:
        """The parameters in CouplingFlowFunction's order."""
        return (
            self.hidden_weight,
            self.hidden_bias,
            self.scale_weight,
            self.scale_bias,
            self.shift_weight,
            self.shift_bias,
        )


class CouplingFlow(nn.Module):
    """K coupling layers with alternating masks; K = 0 is the identity."""

    def __init__(self, dim: int, length: int, hidden: int):
        super().__init__()
        self.dim = int(dim)
        self.couplings = nn.ModuleList(AffineCoupling(dim, hidden, k % 2) for k in range(int(length)))

    def forward(self, z: Tensor) -> tuple[Tensor, Tensor]:
        if not self.couplings:
            return z, torch.zeros(z.shape[:-1], dtype=z.dtype, device=z.device)
        # the whole chain as one Function, its backward by hand; under torch.func's transforms (the tests'
        # Jacobians) autograd's path, which they can trace
        if torch.is_grad_enabled() and not _functorch_active():
            params = [p for coupling in self.couplings for p in coupling.parameter_list()]
            masks = [coupling.mask for coupling in self.couplings]
            return CouplingFlowFunction.apply(z, masks, *params)
        log_det = torch.zeros(z.shape[:-1], dtype=z.dtype, device=z.device)
        for coupling in self.couplings:
            z, step = coupling(z)
            log_det = log_det + step
        return z, log_det


PARAMS_PER_COUPLING = 6


def _functorch_active() -> bool:
    active = getattr(torch._C, "_are_functorch_transforms_active", None)
    return True if active is None else bool(active())  # unknown: take the path that works everywhere


class CouplingFlowFunction(torch.autograd.Function):
    """A chain of couplings with a hand-written backward.

    Under autograd each coupling left ~15 nodes for the backward pass, each on a (rows, dim) tensor or
    smaller, where dispatch costs more than arithmetic. Here s and t come from the unmasked output map,
    masked after the product (the same values: the mask is 0 or 1). With g the gradient reaching
    z' = z exp(s) + t and g_ld the log-determinant's (per row), one coupling's backward is
        G = [g z exp(s) + g_ld, g] (1 - m on both halves),  d/d(output map) = G^T h,  d/d(its bias) = sum_rows G,
        g_a = (G W) (1 - h^2),  d/dA = g_a^T (m z),  d/da = sum_rows g_a,  d/dz = g exp(s) + m (g_a A)
    (A, a the hidden map and bias, W = [S; T] the output map, m the kept coordinates).
    """

    @staticmethod
    def forward(ctx, z, masks, *params):
        dim = z.shape[-1]
        rows = z.reshape(-1, dim)
        log_det = None
        saved = []
        for k, mask in enumerate(masks):
            hidden_weight, hidden_bias, scale_weight, scale_bias, shift_weight, shift_bias = params[
                PARAMS_PER_COUPLING * k : PARAMS_PER_COUPLING * (k + 1)
            ]
            mask = mask.to(z.dtype)
            moved = torch.cat([1 - mask, 1 - mask])
            kept = rows * mask
            h = torch.tanh(torch.addmm(hidden_bias, kept, hidden_weight.t()))
            weight = torch.cat([scale_weight, shift_weight])
            st = torch.addmm(torch.cat([scale_bias, shift_bias]), h, weight.t()).mul_(moved)
            s, t = st.split(dim, dim=-1)
            exp_s = torch.exp(s)
            step = s.sum(-1)
            log_det = step if log_det is None else log_det.add_(step)
            saved += [rows, kept, exp_s, h, weight, mask, moved, hidden_weight]
            rows = torch.addcmul(t, rows, exp_s)
        ctx.save_for_backward(*saved)
        ctx.couplings = len(masks)
        ctx.z_shape = z.shape
        return rows.reshape(z.shape), log_det.reshape(z.shape[:-1])

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out, grad_log_det):
        saved = ctx.saved_tensors
        dim = ctx.z_shape[-1]
        first = saved[0]
        g = first.new_zeros(first.shape) if grad_out is None else grad_out.reshape(-1, dim)
        g_ld = first.new_zeros((first.shape[0], 1)) if grad_log_det is None else grad_log_det.reshape(-1, 1)
        grads: list = []
        for k in reversed(range(ctx.couplings)):
            z, kept, exp_s, h, weight, mask, moved, hidden_weight = saved[8 * k : 8 * (k + 1)]
            g_st = torch.cat([torch.mul(g, z).mul_(exp_s).add_(g_ld), g], dim=-1).mul_(moved)
            g_scale, g_shift = torch.mm(g_st.t(), h).split(dim)
            g_scale_bias, g_shift_bias = g_st.sum(0).split(dim)
            g_a = torch.mm(g_st, weight).mul_(torch.mul(h, h).neg_().add_(1.0))
            g_hidden = [torch.mm(g_a.t(), kept), g_a.sum(0)]
            g = torch.mul(g, exp_s).addcmul_(torch.mm(g_a, hidden_weight), mask)
            grads = [*g_hidden, g_scale, g_scale_bias, g_shift, g_shift_bias, *grads]
        return (g.reshape(ctx.z_shape), None, *grads)

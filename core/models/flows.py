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

        Written for few operations (a training step runs three flows per layer under autograd): the
        mask is folded into the rows of the output maps, so that s and t come from one product and are
        0 on the kept coordinates, where z exp(s) + t is then z itself, the formula's m z.
        """
        mask = self.mask.to(z.dtype)
        moved = torch.cat([1 - mask, 1 - mask])
        h = torch.tanh(F.linear(z * mask, self.hidden_weight, self.hidden_bias))
        weight = torch.cat([self.scale_weight, self.shift_weight]) * moved[:, None]
        st = F.linear(h, weight, torch.cat([self.scale_bias, self.shift_bias]) * moved)
        s, t = st.split(self.mask.shape[0], dim=-1)
        return torch.addcmul(t, z, torch.exp(s)), s.sum(-1)


class CouplingFlow(nn.Module):
    """K coupling layers with alternating masks; K = 0 is the identity."""

    def __init__(self, dim: int, length: int, hidden: int):
        super().__init__()
        self.dim = int(dim)
        self.couplings = nn.ModuleList(AffineCoupling(dim, hidden, k % 2) for k in range(int(length)))

    def forward(self, z: Tensor) -> tuple[Tensor, Tensor]:
        log_det = torch.zeros(z.shape[:-1], dtype=z.dtype, device=z.device)
        for coupling in self.couplings:
            z, step = coupling(z)
            log_det = log_det + step
        return z, log_det

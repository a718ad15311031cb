"""bnn-mixture's fused training step (core/models/mixture_fused.py) against the layer's autograd path.

Same seed, same draws: the pre-activations, the one-draw KL estimate and every parameter gradient
agree with autograd through the layer's own forward and kl() (in double precision to 1e-10), and the
hand-derived gradients pass finite differences."""

from __future__ import annotations

import pytest
import torch

from core.models.base import new_generator
from core.models.gaussian import MixtureGaussianLayer, MixtureOptions
from core.models.mixture_fused import MixtureLinear


def _layer(seed: int, **options) -> MixtureGaussianLayer:
    torch.manual_seed(seed)
    layer = MixtureGaussianLayer(5, 3, MixtureOptions(**options)).double()
    with torch.no_grad():  # spread the scales so both mixture components matter
        layer.weight_mu.copy_(torch.randn_like(layer.weight_mu) * 0.3)
        layer.weight_rho.copy_(torch.randn_like(layer.weight_rho) - 2.0)
    return layer


def _values_and_grads(layer, x, fused: bool, kl_value: bool = True):
    layer.zero_grad()
    layer.noise_generator = new_generator(torch.device("cpu"), 7)
    out, kl = layer.forward_with_kl(x, kl_value) if fused else (layer(x), layer.kl())
    layer.last_path = type(out.grad_fn).__name__
    loss = (out.pow(2).sum() * 0.3 + out.sum()) + 0.7 * kl
    loss.backward()
    return out.detach(), kl.detach(), [p.grad.clone() for p in (layer.weight_mu, layer.weight_rho)]


@pytest.mark.parametrize(
    "options",
    [{}, {"mixture_weight": 0.2, "prior_variance": 2.0, "prior_variance_2": 0.01}, {"prior_scaling": "fan-in"}],
)
def test_fused_mixture_step_equals_autograd_in_values_and_gradients(options):
    layer = _layer(3, **options)
    x = torch.randn(8, 5, dtype=torch.double)
    out_f, kl_f, grads_f = _values_and_grads(layer, x, fused=True)
    assert layer.last_path == "MixtureLinearBackward"
    out_a, kl_a, grads_a = _values_and_grads(layer, x, fused=False)
    torch.testing.assert_close(out_f, out_a, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(kl_f, kl_a, rtol=1e-10, atol=1e-12)
    for g_f, g_a in zip(grads_f, grads_a):
        torch.testing.assert_close(g_f, g_a, rtol=1e-10, atol=1e-12)


def test_fused_mixture_surrogate_kl_has_the_gradient_but_not_the_value():
    layer = _layer(4)
    x = torch.randn(6, 5, dtype=torch.double)
    _, kl_surrogate, grads_surrogate = _values_and_grads(layer, x, fused=True, kl_value=False)
    _, kl_exact, grads_exact = _values_and_grads(layer, x, fused=True, kl_value=True)
    assert kl_surrogate.item() == 0.0 and kl_exact.item() != 0.0
    for a, b in zip(grads_surrogate, grads_exact):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_fused_mixture_gradients_pass_finite_differences():
    torch.manual_seed(0)
    x = torch.randn(4, 3, dtype=torch.double, requires_grad=True)
    mu = (torch.randn(2, 4, dtype=torch.double) * 0.2).requires_grad_()
    rho = (torch.randn(2, 4, dtype=torch.double) - 2.0).requires_grad_()
    noise, eps = torch.randn(4, 2, dtype=torch.double), torch.randn(2, 4, dtype=torch.double)
    constants = tuple(torch.tensor(v, dtype=torch.double) for v in (0.4, 1.0, 0.05))
    layer = MixtureGaussianLayer(3, 2, MixtureOptions(mixture_weight=0.4, prior_variance_2=0.05)).double()

    def run(*args):
        return MixtureLinear.apply(*args, noise, eps, *constants, True, layer.prior_log_density)

    assert torch.autograd.gradcheck(run, (x, mu, rho))


def test_a_fixed_structure_keeps_the_autograd_path():
    """With a fixed mask the fused step does not apply (it assumes every weight is free)."""
    layer = _layer(5)
    mask = torch.ones(layer.shape, dtype=torch.double)
    mask[0, :2] = 0.0
    layer.fix_structure(mask)
    x = torch.randn(4, 5, dtype=torch.double)
    out_f, kl_f, grads_f = _values_and_grads(layer, x, fused=True)
    assert layer.last_path != "MixtureLinearBackward"
    out_a, kl_a, grads_a = _values_and_grads(layer, x, fused=False)
    assert torch.equal(out_f, out_a) and torch.equal(kl_f, kl_a)
    assert grads_f[0][0, :2].abs().max() == 0.0

"""Training's Adam (core.train._adam) is torch's fused kernel where the device has one, the fastest of
torch's Adam settings on this CPU (benchmarks/results/epoch_time.md), and takes the same steps as the
textbook per-tensor Adam; the plain MLP of benchmarks/epoch_time.py gets the same optimizer."""

from __future__ import annotations

import inspect

import torch

from core.models.network import BayesianMLP, ModelConfig
from core.train import DEFAULT_LEARNING_RATES, _adam, _make_optimizer


def _reference_adam(params, grads_per_step, lr, betas=(0.9, 0.999), eps=1e-8):
    """Kingma & Ba (2015)'s Adam, written out in float64: the parameters after each step."""
    values = [p.detach().double().clone() for p in params]
    first = [torch.zeros_like(v) for v in values]
    second = [torch.zeros_like(v) for v in values]
    for step, grads in enumerate(grads_per_step, start=1):
        for v, m, s, g in zip(values, first, second, grads):
            g = g.double()
            m.mul_(betas[0]).add_(g, alpha=1 - betas[0])
            s.mul_(betas[1]).addcmul_(g, g, value=1 - betas[1])
            m_hat = m / (1 - betas[0] ** step)
            s_hat = s / (1 - betas[1] ** step)
            v.sub_(lr * m_hat / (s_hat.sqrt() + eps))
    return values


def test_training_adam_is_fused_on_cpu_and_matches_the_formula_to_1e6():
    torch.manual_seed(0)
    model = BayesianMLP(ModelConfig(in_features=5, out_classes=3, hidden=(4,), family="lbbnn"))
    params = [p for p in model.parameters() if p.requires_grad]
    start = [p.detach().clone() for p in params]
    optimizer = _make_optimizer(model, dict(DEFAULT_LEARNING_RATES))
    assert optimizer.defaults["fused"] is True
    generator = torch.Generator().manual_seed(1)
    steps = [[torch.randn(p.shape, generator=generator) for p in params] for _ in range(5)]
    by_param = {id(p): group["lr"] for group in optimizer.param_groups for p in group["params"]}
    for grads in steps:
        for p, g in zip(params, grads):
            p.grad = g.clone()
        optimizer.step()
    for i, p in enumerate(params):
        expected = _reference_adam([start[i]], [[grads[i]] for grads in steps], by_param[id(p)])[0]
        moved = (expected - start[i].double()).abs().max()
        assert moved > 0  # the steps moved the parameter: the comparison below is not of two copies
        torch.testing.assert_close(p.detach().double(), expected, rtol=1e-6, atol=1e-6 * moved.item())


def test_fused_and_foreach_adam_take_equal_steps_to_1e6_relative():
    torch.manual_seed(2)
    fused_params = [torch.randn(7, 5, requires_grad=True), torch.randn(5, requires_grad=True)]
    loop_params = [p.detach().clone().requires_grad_() for p in fused_params]
    start = [p.detach().clone() for p in fused_params]
    fused = _adam([{"params": fused_params, "lr": 3e-3}])
    loop = torch.optim.Adam([{"params": loop_params, "lr": 3e-3}], foreach=False)
    generator = torch.Generator().manual_seed(3)
    for _ in range(10):
        for a, b in zip(fused_params, loop_params):
            g = torch.randn(a.shape, generator=generator)
            a.grad, b.grad = g.clone(), g.clone()
        fused.step()
        loop.step()
    for a, b, initial in zip(fused_params, loop_params, start):
        assert (a - initial).abs().min() > 1e-5  # every entry moved: not a comparison of two untouched copies
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)


def test_the_epoch_benchmark_trains_its_plain_mlp_with_trainings_adam():
    from benchmarks import epoch_time

    source = inspect.getsource(epoch_time.time_one) + inspect.getsource(epoch_time._time_steps)
    assert "torch.optim" not in source  # no optimizer of its own: the plain MLP and the families share _adam
    assert "_adam(" in source

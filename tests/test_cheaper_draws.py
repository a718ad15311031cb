"""Cheaper sampled draws (core.predict.draw_paths): every path against the plain one, and the
promises a draw cache relies on (a draw's output depends only on (seed, r), the inputs and the path)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import core.predict.draw_paths as draw_paths
from core.models.network import BayesianMLP, ModelConfig
from core.predict import predict
from core.predict.draw_paths import DrawPath, chosen_path, draw_networks, forget_paths, probe_costs
from core.predict.engine import as_inputs, make_plan, sampled_forward
from core.predict.structure import input_dependence, useful_units


def make_model(d, hidden, skip, activation, logits, seed, classes=3):
    """A tiny LBBNN whose inclusion logits are drawn from `logits` (values far from 0 give near-fixed
    structures, so whole units are often dead in a draw, or alive in every one)."""
    torch.manual_seed(seed)
    options = {"input_skip": True} if skip else {}
    model = BayesianMLP(ModelConfig(d, classes, hidden=hidden, family_options=options, activation=activation))
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for layer in model.layers:
            choice = torch.randint(len(logits), layer.inclusion_logit.shape, generator=generator)
            layer.inclusion_logit.copy_(torch.tensor(logits)[choice])
    return model


def close(got, expected):
    """To 1e-6 relative to the outputs' scale: what reassociating a sum of float32 terms may change."""
    scale = max(1.0, float(expected.abs().max()))
    return float((got - expected).abs().max()) <= 1e-6 * scale


nets = st.fixed_dictionaries(
    {
        "d": st.integers(1, 6),
        "hidden": st.lists(st.integers(1, 7), min_size=1, max_size=3).map(tuple),
        "skip": st.booleans(),
        "activation": st.sampled_from(["relu", "tanh"]),  # tanh: folded constant units are nonzero
        "logits": st.sampled_from([[-8.0, 8.0], [-3.0, 0.0, 3.0], [-8.0, -8.0, 8.0], [8.0]]),
        "seed": st.integers(0, 10_000),
    }
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(net=nets, mode=st.sampled_from(["bma", "mpm"]), threshold=st.sampled_from([None, 0.2, 0.9]))
def test_every_path_equals_the_plain_path(net, mode, threshold):
    model = make_model(**net)
    x = torch.randn(9, net["d"], generator=torch.Generator().manual_seed(net["seed"]))
    plan = make_plan(model, mode, 7, threshold if mode == "mpm" else None, None)
    masks = None if mode == "bma" else model.keep_masks(plan.threshold)
    with torch.no_grad():
        plain, usage = sampled_forward(model, plan, x, 3, masks, None, path="plain")
        reference = model.forward_with_weights(x, model.sample_weights(7, 3, masks=masks))
        assert close(plain, reference)
        for path in [*draw_paths.candidates(masks is not None), DrawPath.BATCHED]:
            got, got_usage = sampled_forward(model, plan, x, 3, masks, None, path=path)
            assert got.shape == plain.shape
            assert close(got, plain), (path, float((got - plain).abs().max()))
            assert got_usage.draw_counts == usage.draw_counts  # the same draws, whatever path runs them
            assert all(torch.equal(a, b) for a, b in zip(got_usage.union, usage.union))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(net=nets, mode=st.sampled_from(["bma", "mpm"]), split=st.integers(1, 6))
def test_a_draw_depends_only_on_its_index_within_a_path(net, mode, split):
    # What a draw cache relies on: draws split..6 added later equal the same draws of one pass, bit for bit,
    # also when the split falls inside a batched group (draws 4..7 are computed whole, 7 dropped).
    model = make_model(**net)
    x = torch.randn(9, net["d"], generator=torch.Generator().manual_seed(net["seed"] + 1))
    plan = make_plan(model, mode, 7, None, None)
    masks = None if mode == "bma" else model.keep_masks(plan.threshold)
    with torch.no_grad():
        for path in [*draw_paths.candidates(masks is not None), DrawPath.BATCHED]:
            whole, usage = sampled_forward(model, plan, x, 5, masks, None, path=path)
            head, parts = sampled_forward(model, plan, x, 5, masks, None, draws=range(split), path=path)
            tail, parts = sampled_forward(model, plan, x, 5, masks, None, draws=range(split, 7), usage=parts, path=path)
            assert torch.equal(torch.cat([head, tail]), whole), path
            fewer, _ = sampled_forward(model, replace_samples(plan, split), x, 5, masks, None, path=path)
            assert torch.equal(fewer, whole[:split]), path
            assert parts.draw_counts == usage.draw_counts
            assert parts.disconnected(7) == usage.disconnected(7)


def replace_samples(plan, samples):
    from dataclasses import replace

    return replace(plan, samples=samples)


def test_active_path_drops_each_draws_dead_units():
    # Every weight kept but: unit 1 of layer 0 reads no input (a constant, folded), unit 1 of layer 1
    # feeds no output, and only unit 1 of layer 1 reads unit 2 of layer 0: one unit left per layer.
    model = make_model(3, (3, 2), False, "relu", [40.0], seed=1)
    with torch.no_grad():
        model.layers[0].inclusion_logit[1, :-1] = -40.0
        model.layers[1].inclusion_logit[0, 2] = -40.0
        model.layers[2].inclusion_logit[:, 1] = -40.0
        weights = model.sample_weights(3, seed=0)
    networks = list(draw_networks(DrawPath.ACTIVE, weights, None, model.activation))
    x = torch.randn(5, 3)
    for index, network in enumerate(networks):
        masks = [w[index] != 0 for w in weights]
        alive = [d & u for d, u in zip(input_dependence(masks), useful_units(masks))]
        assert network.units == [int(a.sum()) for a in alive[:-1]] + [3] == [1, 1, 3]
        with torch.no_grad():
            assert close(network(x), model.forward_with_weights(x, [w[index] for w in weights]))


def test_batched_groups_run_their_union_in_one_product():
    model = make_model(4, (5, 6), True, "relu", [-8.0, 8.0], seed=4)
    with torch.no_grad():
        weights = model.sample_weights(8, seed=2)
    networks = list(draw_networks(DrawPath.BATCHED, weights, None, model.activation))
    assert len(networks) == 2 and all(n.n_draws == draw_paths.GROUP for n in networks)
    # A dense per-draw batch: (4, units, inputs) weights, in one batched product per layer.
    assert all(layer.weight.dim() == 3 for n in networks for layer in n.layers)


def test_probe_keeps_the_cheapest_path_and_the_first_choice(monkeypatch):
    model = make_model(5, (6, 4), False, "relu", [-8.0, 8.0], seed=3)
    x = as_inputs(model, torch.randn(20, 5))
    plan = make_plan(model, "bma", 5, None, None)
    costs = {DrawPath.PLAIN: 3.0, DrawPath.ACTIVE: 1.0, DrawPath.ACTIVE_DENSE: 2.0}
    calls = []
    real = draw_paths.probe_costs

    def fake(paths, *args, **kwargs):
        calls.append(list(paths))
        return {path: costs[path] for path in paths}, real(paths, *args, **kwargs)[1]

    monkeypatch.setattr("core.predict.draw_paths.probe_costs", fake)
    forget_paths(model)
    assert chosen_path(model, plan.threshold, x, None, None) is None  # nothing kept yet
    with torch.no_grad():
        first, usage = sampled_forward(model, plan, x, 0, None, None)  # probes on its first draw
        assert chosen_path(model, plan.threshold, x, None, None) is DrawPath.ACTIVE
        assert torch.equal(first, sampled_forward(model, plan, x, 0, None, None, path="active")[0])
        costs[DrawPath.ACTIVE_DENSE] = 0.1  # a later probe would choose otherwise: the kept choice stays
        assert torch.equal(first, sampled_forward(model, plan, x, 0, None, None)[0])
    assert calls == [[DrawPath.PLAIN, DrawPath.ACTIVE, DrawPath.ACTIVE_DENSE]]
    # A shared mask: `active` would be `plain`, not timed; another threshold is another choice.
    masks = model.keep_masks(0.5)
    with torch.no_grad():
        sampled_forward(model, make_plan(model, "mpm", 5, 0.5, None), x, 0, masks, None)
    assert chosen_path(model, 0.5, x, masks, None) is DrawPath.ACTIVE_DENSE
    assert calls[1] == [DrawPath.PLAIN, DrawPath.ACTIVE_DENSE]
    # The probe runs the first draw itself: no draw is made for it.
    forget_paths(model)
    made = []
    original = BayesianMLP.sample_weights

    def spy(self, n, seed, masks=None, start=0):
        made.extend(range(start, start + n))
        return original(self, n, seed, masks=masks, start=start)

    monkeypatch.setattr(BayesianMLP, "sample_weights", spy)
    with torch.no_grad():
        sampled_forward(model, plan, x, 0, None, None)
    assert made == list(range(5)) and chosen_path(model, plan.threshold, x, None, None) is DrawPath.ACTIVE_DENSE
    # Within the margin of plain: plain stays.
    forget_paths(model)
    costs.update({DrawPath.PLAIN: 1.0, DrawPath.ACTIVE: 0.9, DrawPath.ACTIVE_DENSE: 0.95})
    with torch.no_grad():
        sampled_forward(model, plan, x, 0, None, None)
    assert chosen_path(model, plan.threshold, x, None, None) is DrawPath.PLAIN


def test_probe_costs_time_each_path_on_the_draw_and_return_its_outputs():
    model = make_model(5, (6, 4), True, "relu", [-8.0, 8.0], seed=3)
    ticks = iter(range(1000))
    x = torch.randn(10, 5)
    with torch.no_grad():
        weights = model.sample_weights(1, seed=0)
        costs, outputs = probe_costs(
            draw_paths.candidates(False),
            weights,
            None,
            model.activation,
            lambda network: network(x).unsqueeze(0),
            clock=lambda: float(next(ticks)),  # one second per reading: each path takes 1 s
        )
        expected = model.forward_with_weights(x, [w[0] for w in weights])
    assert costs == {path: 1.0 for path in draw_paths.candidates(False)}
    assert all(close(out[0], expected) for out in outputs.values())


def test_dense_families_are_not_probed(monkeypatch):
    torch.manual_seed(0)
    model = BayesianMLP(ModelConfig(4, 2, hidden=(5,), family="bnn"))
    monkeypatch.setattr("core.predict.draw_paths.probe_costs", lambda *a, **k: pytest.fail("probed a dense family"))
    plan = make_plan(model, "bma", 3, None, None)
    x = torch.randn(6, 4)
    assert chosen_path(model, plan.threshold, x, None, None) is DrawPath.PLAIN
    with torch.no_grad():
        sampled_forward(model, plan, x, 0, None, None)


@pytest.mark.parametrize("mode", ["bma", "mpm"])
def test_predict_uses_one_path_for_every_r(mode):
    model = make_model(6, (12, 8), True, "relu", [-6.0, 0.0, 6.0], seed=7)
    x = np.random.default_rng(0).standard_normal((40, 6)).astype(np.float32)
    forget_paths(model)
    ten = predict(model, x, mode, samples=10, seed=1)
    three = predict(model, x, mode, samples=3, seed=1)
    assert np.array_equal(ten.probs_per_draw[:3], three.probs_per_draw)
    inputs = as_inputs(model, x)
    plan = make_plan(model, mode, 10, None, None)
    masks = None if mode == "bma" else model.keep_masks(plan.threshold)
    with torch.no_grad():
        plain, _ = sampled_forward(model, plan, inputs, 1, masks, None, path="plain")
    assert np.allclose(ten.probs_per_draw, model.likelihood.probabilities(plain).numpy(), rtol=0, atol=1e-6)


def test_a_copy_of_the_model_shares_the_choice(monkeypatch):
    # A reloaded run is another model object with the same numbers: it must run its draws the same way
    # (its predictions equal the original's bit for bit), whatever a probe of its own would say.
    model = make_model(5, (6, 4), True, "relu", [-8.0, 8.0], seed=5)
    copy = make_model(5, (6, 4), True, "relu", [-3.0, 3.0], seed=6)
    copy.load_state_dict(model.state_dict())
    x = as_inputs(model, torch.randn(20, 5))
    plan = make_plan(model, "bma", 4, None, None)
    forget_paths()
    real = draw_paths.probe_costs
    monkeypatch.setattr(
        "core.predict.draw_paths.probe_costs",
        lambda paths, *a, **k: ({p: 0.0 if p is DrawPath.ACTIVE else 1.0 for p in paths}, real(paths, *a, **k)[1]),
    )
    with torch.no_grad():
        original = sampled_forward(model, plan, x, 0, None, None)[0]
        assert chosen_path(copy, plan.threshold, x, None, None) is DrawPath.ACTIVE
        assert torch.equal(sampled_forward(copy, plan, x, 0, None, None)[0], original)
    other = make_model(5, (6, 4), True, "relu", [-8.0, 8.0], seed=7)  # another network: its own choice
    assert chosen_path(other, plan.threshold, x, None, None) is None
    forget_paths(copy)  # the copy's network is the model's: both forgotten
    assert chosen_path(model, plan.threshold, x, None, None) is None


@pytest.mark.parametrize("skip", [False, True])
@pytest.mark.parametrize("mode", ["bma", "mpm"])
def test_with_nothing_to_drop_the_active_paths_are_the_plain_path_bit_for_bit(skip, mode):
    # Every weight kept: the compacted matrices are the full ones and every product sums in the same
    # order as the plain path's, so the outputs are the same numbers, not merely close.
    model = make_model(30, (40, 20), skip, "relu", [40.0], seed=2, classes=5)
    x = torch.randn(300, 30, generator=torch.Generator().manual_seed(0))
    plan = make_plan(model, mode, 3, None, None)
    masks = None if mode == "bma" else model.keep_masks(plan.threshold)
    with torch.no_grad():
        plain, _ = sampled_forward(model, plan, x, 0, masks, None, path="plain")
        for path in ("active", "active-dense"):
            assert torch.equal(sampled_forward(model, plan, x, 0, masks, None, path=path)[0], plain), path


@pytest.mark.parametrize("mode", ["bma", "mpm"])
def test_one_draw_at_a_time_from_the_first(mode):
    # How the draw cache asks: draw 0 alone (the probe runs it), then 1, 2 ... each alone.
    model = make_model(6, (12, 8), False, "tanh", [-6.0, 0.0, 6.0], seed=8)
    x = as_inputs(model, torch.randn(30, 6))
    plan = make_plan(model, mode, 4, None, None)
    masks = None if mode == "bma" else model.keep_masks(plan.threshold)
    forget_paths(model)
    with torch.no_grad():
        usage, parts = None, []
        for index in range(4):
            out, usage = sampled_forward(model, plan, x, 2, masks, None, draws=range(index, index + 1), usage=usage)
            parts.append(out)
        assert torch.equal(torch.cat(parts), sampled_forward(model, plan, x, 2, masks, None)[0])


def test_the_fingerprint_follows_every_write_to_the_model():
    model = make_model(5, (6, 4), False, "relu", [-8.0, 8.0], seed=9)
    before = draw_paths.fingerprint(model)
    assert draw_paths.fingerprint(model) == before  # kept: nothing was written
    with torch.no_grad():
        model.layers[1].inclusion_logit[0, 0] += 1.0  # in place: the version counter moves
    changed = draw_paths.fingerprint(model)
    assert changed != before
    with torch.no_grad():
        model.layers[0].weight_mu.data = model.layers[0].weight_mu.data * 2  # replaced
    replaced = draw_paths.fingerprint(model)
    assert replaced != changed
    name, buffer = next((n, b) for n, b in model.named_buffers() if b.is_floating_point())
    with torch.no_grad():
        buffer.add_(0.5)  # a buffer (a prior's constant) written in place
    assert draw_paths.fingerprint(model) != replaced, name
    # unchanged: answered from the versions alone, without building the state dict again
    kept = draw_paths.fingerprint(model)
    built = []
    original = type(model).state_dict
    try:
        type(model).state_dict = lambda self, *a, **k: built.append(1) or original(self, *a, **k)
        assert draw_paths.fingerprint(model) == kept and not built
    finally:
        type(model).state_dict = original


def test_gathered_inputs_are_kept_for_the_same_inputs_and_columns_and_made_again_after_a_write():
    import core.predict.compact as compact

    x = torch.randn(50, 8)
    index = torch.tensor([1, 3, 4])
    before = compact.gathers
    first = compact.gathered_inputs(x, index)
    assert torch.equal(first, x.index_select(1, index).T.contiguous()) and first.is_contiguous()
    assert compact.gathered_inputs(x, index.clone()) is first  # equal columns: kept
    assert compact.gathers - before == 1
    other = x.clone()  # equal values, another tensor: its own copy
    assert compact.gathered_inputs(other, index) is not first
    x.add_(1.0)  # written in place: gathered again, with the new values
    again = compact.gathered_inputs(x, index)
    assert again is not first and torch.equal(again, x.index_select(1, index).T.contiguous())
    assert compact.gathers - before == 3


def test_a_plans_draws_gather_their_inputs_once_and_equal_the_uncached_prediction_bit_for_bit():
    """Every draw of a shared-mask plan reads the same columns of the same inputs: gathered once
    (core.predict.compact.gathered_inputs), the numbers unchanged."""
    import core.predict.compact as compact
    from core.predict import DrawCache

    model = make_model(12, (3,), False, "relu", [-8.0, 8.0], seed=4)  # 4 of the 12 inputs unused
    x = torch.randn(30, 12, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert len(compact_network_of(model, 0.5).input_index) == 8
    before = compact.gathers
    uncached = predict(model, x, mode="mpm", samples=6, threshold=0.5)
    assert compact.gathers - before == 1  # six draws (and the probe's runs), one gather
    compact._gathered.clear()
    cache = DrawCache()
    for samples in (2, 6):  # the draws of two extends: the plan's inputs are gathered once
        cache.extend(model, x, "test", "model", "mpm", samples, 0.5)
    assert compact.gathers - before == 2
    got = cache.predict(model, x, "test", "model", "mpm", 6, 0.5)
    assert np.array_equal(got.probs_per_draw, uncached.probs_per_draw) and np.array_equal(got.probs, uncached.probs)


def compact_network_of(model, threshold):
    from core.predict.compact import compact_network

    masks = model.keep_masks(threshold)
    return compact_network(model.sample_weights(1, 0, masks=masks), masks, model.activation)

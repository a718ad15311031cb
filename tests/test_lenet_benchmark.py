"""The LeNet-300-100 benchmark's helpers (benchmarks/lenet.py): random pruning at the learned per-layer
rate (exact counts, uniform over subsets, blind to weights and positions, seeded), per-layer
sparsity, pruning at published rates, the masked accuracy against the prediction engine, the run
configs, and the table's gap detection. Tiny masks and nets only."""

import itertools

import numpy as np
import pytest
import torch

from benchmarks import lenet
from core.models.network import ModelConfig, build_model
from core.predict.engine import forward_masked


def mask_from(rows):
    return torch.tensor(rows, dtype=torch.bool)


def test_random_masks_keep_exactly_as_many_weights_and_biases_per_layer():
    learned = [torch.rand(7, 6) > 0.6, torch.rand(3, 8) > 0.3, torch.zeros(2, 4, dtype=torch.bool)]
    learned[1][:, -1] = True
    for seed in range(5):
        drawn = lenet.random_masks(learned, seed)
        for mask, rand in zip(learned, drawn):
            assert rand.shape == mask.shape and rand.dtype == torch.bool
            assert int(rand[:, :-1].sum()) == int(mask[:, :-1].sum())
            assert int(rand[:, -1].sum()) == int(mask[:, -1].sum())


def test_random_masks_depend_on_counts_and_seed_only():
    a = [mask_from([[1, 1, 0, 0, 1], [0, 0, 0, 0, 0]]), mask_from([[1, 0, 1]])]
    b = [mask_from([[0, 0, 0, 0, 0], [1, 0, 0, 1, 1]]), mask_from([[0, 1, 1]])]  # same counts, other places
    assert all(torch.equal(x, y) for x, y in zip(lenet.random_masks(a, 3), lenet.random_masks(b, 3)))
    assert all(torch.equal(x, y) for x, y in zip(lenet.random_masks(a, 3), lenet.random_masks(a, 3)))
    draws = {tuple(torch.cat([m.flatten() for m in lenet.random_masks(a, s)]).tolist()) for s in range(20)}
    assert len(draws) > 5  # other seeds, other masks


def test_random_masks_are_uniform_over_subsets():
    # A 2 x (3 + 1) layer keeping 2 of its 6 weights and 1 of its 2 biases: every one of the
    # C(6, 2) * 2 = 30 kept sets has probability 1/30. Chi-square over 6000 seeds.
    learned = [mask_from([[1, 1, 0, 1], [0, 0, 0, 0]])]
    n = 6000
    counts: dict[tuple, int] = {}
    for seed in range(n):
        key = tuple(lenet.random_masks(learned, seed)[0].flatten().tolist())
        counts[key] = counts.get(key, 0) + 1
    weight_sets = [set(c) for c in itertools.combinations(range(6), 2)]
    assert len(counts) == 30
    for key in counts:  # every outcome is a legal one: 2 weights and 1 bias
        grid = np.array(key).reshape(2, 4)
        assert grid[:, :3].sum() == 2 and grid[:, 3].sum() == 1
        assert set(np.flatnonzero(grid[:, :3].flatten())) in weight_sets
    expected = n / 30
    chi2 = sum((c - expected) ** 2 / expected for c in counts.values())
    assert chi2 < 70  # chi-square with 29 degrees of freedom: P(chi2 > 70) ~ 3e-5


def test_layer_sparsity_counts_weight_matrices_only():
    masks = [
        mask_from([[1, 0, 0, 0, 1], [0, 0, 1, 1, 0]]),  # weights 3 of 8 kept; biases ignored
        mask_from([[0, 0, 0]]),
    ]
    assert lenet.layer_sparsity(masks) == pytest.approx([5 / 8, 1.0])


def test_masks_at_rates_prune_the_rounded_share_of_each_matrix_and_keep_biases():
    shapes = [(30, 11), (10, 31), (4, 11)]
    rates = [0.839, 0.5, 0.0]
    masks = lenet.masks_at_rates(shapes, rates, seed=1)
    for (rows, cols), rate, mask in zip(shapes, rates, masks):
        n = rows * (cols - 1)
        assert int((~mask[:, :-1]).sum()) == round(rate * n)
        assert bool(mask[:, -1].all())
    assert lenet.layer_sparsity(masks) == pytest.approx([round(0.839 * 300) / 300, 0.5, 0.0])
    with pytest.raises(ValueError, match="sparsity"):
        lenet.masks_at_rates([(2, 3)], [1.5], seed=0)


def test_masked_accuracy_by_hand():
    # One hidden unit h = relu(x0 - x1); outputs (h, 0.5): class 0 iff x0 - x1 > 0.5.
    w1 = torch.tensor([[1.0, -1.0, 0.0]])
    w2 = torch.tensor([[1.0, 0.0], [0.0, 0.5]])
    x = torch.tensor([[2.0, 0.0], [0.0, 2.0], [1.0, 0.0], [0.2, 0.0]])
    y = torch.tensor([0, 1, 0, 0])
    assert lenet.masked_accuracy([w1, w2], None, x, y) == pytest.approx(0.75)
    # Pruning x0's weight: h = relu(-x1) = 0 on every row, so every row says class 1.
    masks = [mask_from([[0, 1, 1]]), torch.ones(2, 2, dtype=torch.bool)]
    assert lenet.masked_accuracy([w1, w2], masks, x, y) == pytest.approx(0.25)


def test_masked_accuracy_matches_the_prediction_engine():
    torch.manual_seed(0)
    model = build_model(ModelConfig(in_features=5, out_classes=3, hidden=(8, 6), family="sparse-vd"), "cpu")
    x = torch.randn(200, 5)
    weights = [w.detach() for w in model.mean_weights()]
    y = forward_masked(model, x, weights, [torch.ones_like(w, dtype=torch.bool) for w in weights])[0].argmax(1)
    assert lenet.masked_accuracy(weights, None, x, y) == 1.0
    masks = lenet.random_masks([torch.rand(w.shape) > 0.5 for w in weights], seed=4)
    engine = forward_masked(model, x, [w * m for w, m in zip(weights, masks)], masks)[0].argmax(1)
    ours = lenet.masked_accuracy(weights, masks, x, y)
    assert ours == pytest.approx(float((engine == y).double().mean()))
    assert ours < 1.0  # pruning half of a random net's weights changes some predictions


@pytest.mark.parametrize("method", lenet.METHODS)
def test_run_configs_differ_only_in_the_warm_start(method):
    warm, base = lenet.run_config("mnist", method, "warm-start", None, None, None)
    scratch, _ = lenet.run_config("mnist", method, "scratch", None, None, None)
    assert warm.method == scratch.method == method
    assert warm.train.warm_start_epochs == base.train.warm_start_epochs == 10 and scratch.train.warm_start_epochs == 0
    assert warm.replace(train={"warm_start_epochs": 0}) == scratch
    assert (warm.train.epochs, warm.train.kl_anneal_epochs, warm.train.batch_size) == (100, 50, 100)
    assert tuple(warm.hidden) == (300, 100)
    short, _ = lenet.run_config("fashion-mnist", method, "warm-start", 30, 3, None)
    assert (short.dataset, short.train.epochs, short.train.kl_anneal_epochs, short.train.warm_start_epochs) == (
        "fashion-mnist",
        30,
        15,
        3,
    )


def entry(unpruned, pruned, random, method="variational-dense", start="warm-start"):
    return {
        "dataset": "mnist",
        "method": method,
        "start": start,
        "schedule": {"warm_start_epochs": 10, "epochs": 100, "kl_anneal_epochs": 50},
        "shortened": False,
        "run_id": "abc",
        "train_seconds": 12.0,
        "command": "python -m benchmarks.lenet",
        "date": "today",
        "machine": {"cpu": "cpu", "cpu_count": 2},
        "result": {
            "layer_sparsity": [0.9, 0.8, 0.1],
            "density": 0.15,
            "unpruned": unpruned,
            "pruned": pruned,
            "random": random,
            "random_sd": 0.01,
            "random_masks": 5,
            "random_at_paper_rates": 0.11,
            "stored": {"SIM-SIM R=10 accuracy": 0.98},
        },
    }


def test_accuracy_gaps_flag_only_differences_above_one_point():
    paper = lenet.PAPER["mnist"]["variational-dense"]["warm-start"]  # 98.28 / 97.94 / 10.01
    assert lenet.accuracy_gaps(entry(0.9828, 0.9700, 0.1050)) == []
    gaps = lenet.accuracy_gaps(entry(0.9700, 0.9794, 0.50))
    assert [g[0] for g in gaps] == ["unpruned", "random"]
    assert gaps[0][1:] == pytest.approx((97.0, paper["unpruned"]))
    section = lenet.results_section({"entries": [entry(0.9700, 0.9794, 0.50)]})
    assert "| 97.00 / 98.28 |" in section and "not yet measured" in section
    assert "random at the paper's rates" in section


def test_results_section_says_how_to_run_when_empty():
    text = lenet.results_section({"entries": []})
    assert "Not run yet" in text and "python -m benchmarks.lenet" in text


def test_evaluate_run_agrees_with_the_run_verbs():
    from core.data import load_dataset
    from core.runs import Run

    dataset = load_dataset("two-moons")
    torch.manual_seed(1)
    model = build_model(
        ModelConfig(in_features=dataset.in_features, out_classes=dataset.n_classes, hidden=(12,), family="sparse-vd"),
        "cpu",
    )
    with torch.no_grad():  # make about half of each layer's weights prunable (log alpha > 3)
        for layer in model.layers:
            noisy = torch.rand(layer.log_sigma2.shape) < 0.5
            layer.log_sigma2[noisy] = (layer.theta[noisy] ** 2 + 1e-8).log() + 5.0
    run = Run.of(model, dataset)
    result = lenet.evaluate_run(run, [50.0, 20.0], n_random=3)
    masks = run.masks()
    assert result["layer_sparsity"] == pytest.approx(lenet.layer_sparsity(masks))
    assert 0.2 < result["layer_sparsity"][0] < 0.8
    assert result["unpruned"] == pytest.approx(run.evaluate(mode="mean", samples=1)["accuracy"])
    assert result["pruned"] == pytest.approx(run.evaluate(mode="mpm-mean", samples=1)["accuracy"])
    assert len(result["random_all"]) == 3 and result["random"] == pytest.approx(np.mean(result["random_all"]))
    assert 0.0 <= result["random_at_paper_rates"] <= 1.0
    # the learned ranking cut at the learned sparsity is the family's cut itself
    same = lenet.evaluate_run(run, [100 * s for s in result["layer_sparsity"]], n_random=1)
    assert same["pruned_at_paper_rates"] == pytest.approx(result["pruned"])
    assert result == lenet.evaluate_run(run, [50.0, 20.0], n_random=3)  # fixed seeds: the same numbers


def test_results_page_section_renders_from_lenet_json(tmp_path, monkeypatch):
    import json

    from benchmarks import results_page

    monkeypatch.setattr(results_page, "RESULTS", tmp_path)
    missing = results_page._file_section("lenet.json", lenet.results_section, lenet.COMMAND)
    assert missing.startswith("Not run yet") and lenet.COMMAND in missing
    (tmp_path / "lenet.json").write_text(json.dumps({"entries": [entry(0.9825, 0.9790, 0.1000)]}))
    text = results_page._file_section("lenet.json", lenet.results_section, lenet.COMMAND)
    assert "| 98.25 / 98.28 | 97.90 / 97.94 | - | 10.00 (1.00) / 10.01 |" in text
    assert "90.0-80.0-10.0 / 83.9-82.6-40.0" in text
    assert "Gaps of more than 1 point" not in text  # every accuracy within a point of the paper's


def test_top_masks_keep_the_highest_keys_at_the_given_rate():
    keys = [torch.tensor([[0.1, 0.9, 0.5, 7.0], [0.3, -2.0, 0.7, -7.0]])]  # last column: biases
    masks = lenet.top_masks(keys, [0.5], [torch.tensor([True, False])])
    assert masks[0].tolist() == [[False, True, True, True], [False, False, True, False]]  # 0.9, 0.7, 0.5 kept
    rng = torch.Generator().manual_seed(0)
    keys = [torch.randn(6, 9, generator=rng), torch.randn(3, 7, generator=rng)]
    masks = lenet.top_masks(keys, [0.75, 0.2], [torch.ones(6, dtype=torch.bool), torch.ones(3, dtype=torch.bool)])
    for key, mask, rate in zip(keys, masks, [0.75, 0.2]):
        block, kept = key[:, :-1].flatten(), mask[:, :-1].flatten()
        assert int((~kept).sum()) == round(rate * block.numel())
        assert block[kept].min() > block[~kept].max()  # every kept key beats every pruned one

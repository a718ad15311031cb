"""benchmarks/continue_posttrain.py: its argument rules, and that it trains a loaded copy on the run's
fixed cut and leaves the stored run as it was."""

from __future__ import annotations

import hashlib
import json

import pytest
import torch

from benchmarks import continue_posttrain


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["abc!"], "run"),
        (["abcd", "--epochs", "0"], "--epochs"),
        (["abcd", "--epochs", "1e9"], "--epochs"),
        (["abcd", "--density", "2"], "--density"),
        (["abcd", "--weights-lr", "nan"], "--weights-lr"),
        (["abcd", "--threads", "-1"], "--threads"),
        (["abcd", "--schedule", "linear"], "--schedule"),
        (["abcd", "--freeze-scales", "--deterministic"], "--deterministic"),
        (["abcd", "--freeze-scales", "--scales-lr", "0.01"], "--scales-lr"),
        (["abcd", "--deterministic", "--scales-lr", "0.01"], "--scales-lr"),
        (["abcd", "--stored-structure"], "--stored-structure"),
        (["abcd", "--freeze-scales", "--stored-structure"], "--stored-structure"),
        (["abcd", "--density", "0.01,0.02", "--epochs", "1,1"], "--density"),  # stages must fall
        (["abcd", "--density", "0.01,0.005", "--epochs", "1"], "--epochs"),  # one count per stage
        (["abcd", "--density", "0.01", "--epochs", "1,1"], "--epochs"),
        (["abcd", "--density", "0.02,0.01", "--epochs", "1,1", "--deterministic"], "--density"),
        (["abcd", "--density", ",".join(["0.5"] * 20), "--epochs", "1"], "--density"),  # bounded split
        (["abcd", "--density", ""], "--density"),
        (["abcd", "--density", "-0.01"], "--density"),
        (["abcd", "--density", "1e99"], "--density"),
        (["abcd", "--density", "0.01,"], "--density"),
        (["abcd", "--epochs", ""], "--epochs"),
        (["abcd", "--density", "0.02,0.01", "--epochs", "3,-1"], "--epochs"),
    ],
)
def test_bad_arguments_are_refused_with_the_flag_named(argv, flag, capsys):
    with pytest.raises(SystemExit) as stopped:
        continue_posttrain.parse_args(argv)
    assert stopped.value.code == 2
    assert flag in capsys.readouterr().err


def test_a_run_missing_from_the_store_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("BNN_CACHE_DIR", str(tmp_path / "store"))
    assert continue_posttrain.main(["deadbeef", "--epochs", "1", "--results-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("continue_posttrain: ") and "\n" not in err and "deadbeef" in err
    assert not (tmp_path / "continue_posttrain.json").exists()


@pytest.mark.slow  # trains a small run
def test_more_posttraining_keeps_the_cut_and_leaves_the_stored_run_unchanged(tmp_path, monkeypatch):
    from core.runs import RunConfig, train_run

    monkeypatch.setenv("BNN_CACHE_DIR", str(tmp_path / "store"))
    train = {"epochs": 3, "posttrain_epochs": 1, "posttrain_density": 0.3, "batch_size": 50}
    run = train_run(RunConfig(dataset="two-moons", hidden=(16,), train=train))
    weights = next((tmp_path / "store").rglob("weights.safetensors"))
    before = hashlib.sha256(weights.read_bytes()).hexdigest()
    assert continue_posttrain.main([run.run_id, "--epochs", "3", "--results-dir", str(tmp_path)]) == 0
    assert hashlib.sha256(weights.read_bytes()).hexdigest() == before  # the stored run is not written
    (entry,) = json.loads((tmp_path / "continue_posttrain.json").read_text())
    rows = entry["rows"]
    assert [r["phase"] for r in rows] == ["stored", "epoch 1", "epoch 2", "epoch 3"]
    assert entry["settings"]["posttrain_density"] == 0.3
    # the structure is fixed at the stored cut: no weight outside it comes back
    assert all(r["density"] <= rows[0]["density"] + 1e-12 for r in rows)
    assert rows[0]["mpm_mean_accuracy"] == pytest.approx(run.evaluate("mpm-mean", 1)["accuracy"])
    assert "| epoch 3 |" in (tmp_path / "continue_posttrain.md").read_text()


@pytest.mark.slow  # trains a small run
def test_cuts_in_steps_reach_each_density_in_turn_on_the_last_stage_s_structure(tmp_path, monkeypatch):
    from core.runs import RunConfig, train_run

    monkeypatch.setenv("BNN_CACHE_DIR", str(tmp_path / "store"))
    train = {"epochs": 3, "posttrain_epochs": 1, "batch_size": 50}
    run = train_run(RunConfig(dataset="two-moons", hidden=(16,), train=train))
    argv = [run.run_id, "--density", "0.4,0.2", "--epochs", "2,2", "--results-dir", str(tmp_path)]
    assert continue_posttrain.main(argv) == 0
    (entry,) = json.loads((tmp_path / "continue_posttrain.json").read_text())
    rows = entry["rows"]
    assert [r["phase"] for r in rows] == ["stored", "epoch 1", "epoch 2", "epoch 3", "epoch 4"]
    assert entry["settings"]["posttrain_density"] == [0.4, 0.2] and entry["settings"]["epochs"] == [2, 2]
    assert 0.2 < rows[2]["structure_density"] <= 0.4  # the first stage's cut
    assert rows[4]["structure_density"] <= 0.2  # the second stage cut the first one's structure further
    assert all(b["density"] <= a["density"] + 1e-12 for a, b in zip(rows[1:], rows[2:]))  # nothing comes back


@pytest.mark.parametrize("conv", [(), ((2, 3),)])
def test_the_pruned_network_is_the_mean_network_on_the_cut_and_its_mpm_is_the_cut(conv):
    from core.models.network import BayesianMLP, ModelConfig

    shape = {"conv": conv, "image_shape": (1, 8, 8)} if conv else {}
    config = ModelConfig(in_features=64 if conv else 4, out_classes=3, hidden=(5,), family="sparse-vd", **shape)
    model = BayesianMLP(config, torch.Generator().manual_seed(3))
    generator = torch.Generator().manual_seed(4)
    masks = [torch.rand(layer.shape, generator=generator) < 0.5 for layer in model.layers]
    net = continue_posttrain.pruned_network(model, masks)
    assert net.family == "fnn"
    for layer, point, mask in zip(model.layers, net.layers, masks):
        assert torch.equal(point.mean_weights(), layer.theta.detach() * mask)  # the means on the cut, zero off it
    assert all(torch.equal(a, b) for a, b in zip(net.keep_masks(), masks))  # its mpm is the cut, no more, no less
    x = torch.randn(7, config.in_features, generator=generator)
    expected = model.forward_with_weights(x, [w.detach() * m for w, m in zip(model.mean_weights(), masks)])
    net.train()
    torch.testing.assert_close(net(x), expected)  # no noise: the training forward is the mean network's
    torch.testing.assert_close(net(x), net(x), rtol=0, atol=0)
    assert float(net.kl()) == 0.0


@pytest.mark.slow  # trains a small run
def test_frozen_scales_and_deterministic_keep_the_cut_and_leave_the_stored_run_unchanged(tmp_path, monkeypatch, capsys):
    from core.errors import InputError
    from core.runs import RunConfig, load_run, train_run

    monkeypatch.setenv("BNN_CACHE_DIR", str(tmp_path / "store"))
    train = {"epochs": 4, "posttrain_epochs": 1, "posttrain_density": 0.3, "batch_size": 50}
    run = train_run(RunConfig(dataset="two-moons", method="sparse-vd", hidden=(16,), train=train))
    weights = next((tmp_path / "store").rglob("weights.safetensors"))
    before = hashlib.sha256(weights.read_bytes()).hexdigest()
    stored = load_run(run.run_id).model
    cut = [m.clone() for m in stored.keep_masks()]
    quiet = lambda *args, **kwargs: None  # noqa: E731

    def variant(*flags):
        args = continue_posttrain.parse_args([run.run_id, "--epochs", "3", "--weights-lr", "0.05", *flags])
        return continue_posttrain.continue_posttrain(args, echo=quiet)

    entry, model = variant("--freeze-scales")
    assert entry["settings"]["trains"] == "freeze-scales"
    for layer, old, mask in zip(model.layers, stored.layers, cut):
        assert torch.equal(layer.log_sigma2, old.log_sigma2)  # the scales did not move
        assert not torch.equal(layer.theta * mask, old.theta * mask)  # the means did
        assert torch.equal(layer.fixed_mask.bool(), mask)
    rows = entry["rows"]
    assert all(r["structure_density"] == rows[0]["density"] for r in rows)  # the cut itself never changes
    assert all(r["density"] <= r["structure_density"] for r in rows)  # sparse VD's rule may only drop weights

    entry, net = variant("--deterministic")
    rows = entry["rows"]
    assert entry["settings"]["trains"] == "deterministic" and net.family == "fnn"
    assert len(rows) == 4 and rows[0]["density"] == stored.density(cut)
    assert all(r["density"] == rows[0]["density"] for r in rows)  # exactly the cut, every epoch
    assert all(torch.equal(a, b) for a, b in zip(net.keep_masks(), cut))
    assert rows[0]["mpm_mean_accuracy"] == pytest.approx(run.evaluate("mpm-mean", 1)["accuracy"])
    assert all(torch.all(point.weight[~mask] == 0) for point, mask in zip(net.layers, cut))  # off the cut: zero
    assert any(not torch.equal(p.mean_weights(), old.theta * m) for p, old, m in zip(net.layers, stored.layers, cut))

    # --stored-structure: the stored run's fixed structure whole, kept exactly, never cut again
    entry, net = variant("--deterministic", "--stored-structure")
    fixed = [layer.fixed_mask.bool() for layer in stored.layers]
    assert entry["settings"]["structure"] == "stored"
    assert all(torch.equal(a, b) for a, b in zip(net.keep_masks(), fixed))
    assert all(r["density"] == stored.density(fixed) for r in entry["rows"])
    args = continue_posttrain.parse_args([run.run_id, "--epochs", "1", "--deterministic", "--stored-structure"])
    args.density = [stored.density(fixed) / 2]
    with pytest.raises(InputError, match="--stored-structure: .* more than --density"):
        continue_posttrain.continue_posttrain(args, echo=quiet)
    assert hashlib.sha256(weights.read_bytes()).hexdigest() == before  # the stored run is not written

    fnn = train_run(RunConfig(dataset="two-moons", method="fnn", hidden=(4,), train={"epochs": 1}))
    argv = [fnn.run_id, "--epochs", "1", "--freeze-scales", "--results-dir", str(tmp_path)]
    capsys.readouterr()
    assert continue_posttrain.main(argv) == 2  # a family without scales: refused in one line
    err = capsys.readouterr().err.strip()
    assert "--freeze-scales" in err and "fnn" in err and "\n" not in err

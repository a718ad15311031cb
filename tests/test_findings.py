"""benchmarks.findings: the per-delta node statistics against Monte Carlo, the islab density ratios and the
Table 5 grouping against hand-computed values, and the CLI's checks."""

from __future__ import annotations

import json
import math

import pytest
import torch

from benchmarks import findings
from core.models.base import inverse_softplus
from core.models.network import ModelConfig, build_model


def tiny_horseshoe():
    torch.manual_seed(0)
    model = build_model(ModelConfig(in_features=3, out_classes=2, hidden=(4,), family="horseshoe"))
    layer = model.layers[0]
    with torch.no_grad():
        layer.log_node_scale_mu.copy_(torch.tensor([-5.0, -3.0, -1.0, 1.0]))
        layer.log_node_scale_rho.copy_(torch.tensor([inverse_softplus(s) for s in (0.3, 1.0, 0.5, 0.2)]))
        layer.log_layer_scale_mu.fill_(-3.0)
        layer.log_layer_scale_rho.fill_(inverse_softplus(0.5))
    return model


def test_node_statistics_at_each_delta_match_monte_carlo_of_tau_times_v():
    model = tiny_horseshoe()
    (state,) = findings.horseshoe_state(model)  # the output layer has no node scales
    generator = torch.Generator().manual_seed(1)
    n = 200_000
    log_tau = torch.tensor([-5.0, -3.0, -1.0, 1.0]) + torch.tensor([0.3, 1.0, 0.5, 0.2]) * torch.randn(
        n, 4, generator=generator
    )
    log_v = -3.0 + 0.5 * torch.randn(n, 1, generator=generator)
    tv = torch.exp(log_tau + log_v)
    for delta in findings.DELTAS:
        below = (tv < delta).double().mean(0)
        assert state[f"stat_mean@{delta:g}"] == pytest.approx(float(below.mean()), abs=3e-3)
        # units whose Monte Carlo probability is clearly on one side of p0
        clear = (below - findings.PRUNE_P0).abs() > 0.02
        assert clear.sum() >= 3
        pruned_clear = int((below[clear] > findings.PRUNE_P0).sum())
        assert state[f"pruned@{delta:g}"] - pruned_clear in (0, int((~clear).sum()))
    assert state["log_tv_mean"] == pytest.approx([-8.0, -5.0, -2.0], abs=1e-5)  # min, median (of 4: mid-way), max
    stds = sorted(math.sqrt(s * s + 0.5**2) for s in (0.3, 1.0, 0.5, 0.2))
    assert state["log_tv_std_median"] == pytest.approx((stds[1] + stds[2]) / 2, abs=1e-5)
    # delta 1e-3 is the model's own rule: the same number as the layer's statistic
    assert state["stat_mean@0.001"] == pytest.approx(state["stat_mean"], abs=1e-6)
    # more units fall under a larger delta
    assert state["pruned@0.001"] <= state["pruned@0.01"] <= state["pruned@0.1"]


def test_islab_summary_reads_the_input_skip_entries_and_their_density_ratios(tmp_path, monkeypatch):
    def entry(label, skip, densities, schedule="cosine"):
        rows = [{"phase": "warm-start", "active_density": 0.5, "mpm_mean_accuracy": 0.1, "train_cpu_seconds": 1}]
        rows += [
            {"phase": "train", "active_density": d, "mpm_mean_accuracy": 0.9 + i / 100, "train_cpu_seconds": 10 + i}
            for i, d in enumerate(densities)
        ]
        rows.append({"phase": "posttrain", "active_density": densities[-1], "mpm_mean_accuracy": 0.97, **{}})
        rows[-1]["train_cpu_seconds"] = 99
        train = {"kl_weight": 1.0, "lr_schedule": schedule, "learning_rates": {"inclusion": 0.02}}
        return {"label": label, "config": {"family_options": {"input_skip": skip}, "train": train}, "rows": rows}

    path = tmp_path / "front.json"
    path.write_text(json.dumps([entry("dense", False, [0.1, 0.05]), entry("skip", True, [0.004, 0.002, 0.0019])]))
    monkeypatch.setattr(findings, "FRONT_JSON", path)
    (summary,) = findings.islab_summary()
    assert summary["label"] == "skip" and summary["main_epochs"] == 3
    assert summary["main_cpu_per_epoch"] == pytest.approx(1.0)  # cpu 10, 11, 12 over the main phase
    assert summary["ratios"] == pytest.approx([0.5, 0.95])
    assert summary["main_accuracy"] == pytest.approx(0.92)
    assert summary["final_accuracy"] == 0.97 and summary["train_cpu_seconds"] == 99
    assert "0.95" in "\n".join(findings.render_islab([summary]))


def test_table5_explanation_groups_the_output_layer_by_kl_weight(tmp_path, monkeypatch):
    sweep = [
        {
            "kl_weight": 1.0,
            "rows": [{"epoch": 1, "layer_density": [1, 1, 1]}, {"epoch": 15, "layer_density": [0, 0, 0.14]}],
        },
        {"kl_weight": 0.05, "rows": [{"epoch": 15, "layer_density": [0.1, 0.05, 0.66]}]},
    ]
    monkeypatch.setattr(findings, "SWEEP_JSON", tmp_path / "sweep.json")
    (tmp_path / "sweep.json").write_text(json.dumps(sweep))
    stored = [
        {"run_id": "a", "hidden": [400, 600], "input_skip": False, "kl_weight": 0.05, "epochs": 8,
         "mean_inclusion": [0.1, 0.07, 0.52]},
        {"run_id": "b", "hidden": [400, 600], "input_skip": False, "kl_weight": 0.2, "epochs": 20,
         "mean_inclusion": [0.03, 0.02, 0.27]},
        {"run_id": "c", "hidden": [600, 600], "input_skip": True, "kl_weight": 1.0, "epochs": 12,
         "mean_inclusion": [0.01, 0.008, 0.07]},
    ]  # fmt: skip
    rows = [{"epoch": 1, "mean_inclusion": [0.02, 0.01, 0.4]}, {"epoch": 3, "mean_inclusion": [0.01, 0.01, 0.2]}]
    data = {"stored": stored, "elbo": {"rows": rows}, "paper": [0.0844, 0.0959, 0.2945]}
    first, swept, second = findings.table5_explanation(data)
    assert "KL x 0.05: 0.520; KL x 0.2: 0.270" in first  # the input-skip net is another network: left out
    assert "KL x 0.05: 0.660 after 15 epochs; KL x 1: 0.140 after 15 epochs" in swept  # its last epoch
    assert "0.400 after 1 epoch and 0.200 after 3" in second


@pytest.mark.parametrize(
    "argv, message",
    [
        (["horseshoe", "--epochs", "0"], "--epochs: 0 is out of range; give a whole number from 1 to 1000"),
        (["table5", "--epochs", "99999999999"], "--epochs: 99999999999 is out of range"),
        (["horseshoe", "--threads", "-1"], "--threads: -1 is out of range"),
        (["horseshoe", "--variants", "grid,nope"], "--variants: unknown nope"),
        (["horseshoe", "--variants", " , "], "--variants: give at least one of"),
    ],
)
def test_the_cli_checks_its_arguments_before_training(argv, message, capsys):
    assert findings.main(argv) == 2
    assert message in capsys.readouterr().err


def test_the_results_page_lines_come_from_the_json_and_only_for_mnist():
    assert findings.page_reasons("mnist", {}) == {} and findings.page_notes("mnist", {}) == ""
    layer = {"log_tv_mean": [-6.0, -3.5, -1.0], "pruned@0.001": 0}
    row = {"epoch": 2, "doubt_count": 17, "mean_max_probability": 0.61, "accuracy_r10": 0.95, "layers": [layer]}
    data = {
        "horseshoe": {"variants": {"paper": {"description": "the paper's setup", "rows": [row]}}},
        "table5": {"stored": [], "elbo": {"rows": []}, "paper": [0.0844, 0.0959, 0.2945]},
        "notes": {"horseshoe": "why it is so"},
    }
    reason = findings.page_reasons("mnist", data)["horseshoe"]
    assert "decided 17 of 10,000" in reason and "-3.50" in reason and f"{math.log(1e-3):.2f}" in reason
    assert reason.endswith("why it is so")
    assert findings.page_reasons("fashion-mnist", data) == {} and findings.page_notes("fashion-mnist", data) == ""


def test_islab_explanation_projects_the_epochs_to_the_published_density_at_the_measured_rate():
    densities = [0.004 * 0.9**i for i in range(5)]
    entry = {
        "label": "try",
        "lr_schedule": "constant",
        "ratios": [b / a for a, b in zip(densities, densities[1:])],
        "active_density": densities,
        "main_accuracy": 0.97,
        "final_accuracy": 0.975,
        "train_cpu_seconds": 900.0,
        "main_epochs": 5,
        "main_cpu_per_epoch": 60.0,
    }
    (line,) = findings.islab_explanation([entry])
    more = math.log(findings.ISLAB_TARGET / densities[-1]) / math.log(0.9)  # about 10.4 epochs
    assert f"about {more:.0f} more main epochs" in line and "falling 10.0 %" in line
    assert f"about {more * 60 / 60:.0f} CPU minutes" in line  # 60 CPU s a main epoch
    stalled = {**entry, "ratios": [0.999, 0.998, 0.999]}
    assert "it has stopped" in findings.islab_explanation([stalled])[0]
    reached = {**entry, "active_density": [0.001, 0.0006]}
    assert "reached" in findings.islab_explanation([reached])[0]

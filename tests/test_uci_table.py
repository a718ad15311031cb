"""The UCI table generator (benchmarks/uci_table.py): means, standard errors, shared splits, the
MC-dropout reference on the same splits and the win counts, on synthetic per-run records; and the
`uci` grid preset's shape."""

import json
import math
from pathlib import Path

import numpy as np
import pytest

from benchmarks import uci_table
from core.runs.presets import PRESETS


def write_reference(root: Path, folder: str, lls, rmses, taus=None, grid=None) -> None:
    results = root / "uci-regression" / folder / "results"
    results.mkdir(parents=True)
    np.savetxt(results / f"test_ll_{uci_table.REFERENCE_SUFFIX}", lls)
    np.savetxt(results / f"test_MC_rmse_{uci_table.REFERENCE_SUFFIX}", rmses)
    if taus is not None:
        np.savetxt(results / f"test_tau_{uci_table.REFERENCE_SUFFIX}", taus)
        data = root / "uci-regression" / folder / "data"
        data.mkdir(parents=True)
        np.savetxt(data / "tau_values.txt", grid)
        (data / "n_epochs.txt").write_text("40\n")


def record(family, split, ll, rmse, mode="bma", density=1.0, dataset="uci-yacht"):
    return {
        "run_id": f"{family}-{split}",
        "set": dataset[4:],
        "dataset": dataset,
        "family": family,
        "split": split,
        "seed": 0,
        "modes": {mode: {"log_likelihood": ll, "rmse": rmse, "density": density}},
        "density": density,
        "noise_std": 0.5,
        "train_seconds": 3.0,
        "epochs": 10,
        "samples": 100,
        "evaluation": 1,
    }


def test_summary_compares_each_row_with_mc_dropout_on_its_own_splits_paired(tmp_path):
    write_reference(tmp_path, "yacht", [-1.0, -2.0, -3.0, -4.0], [1.0, 2.0, 3.0, 4.0])
    records = [
        record("bnn", 0, -1.5, 1.0),
        record("bnn", 1, -1.5, 3.0),
        record("bnn", 2, -2.5, 2.0),
        record("lbbnn", 0, -0.5, 1.0, mode="mpm", density=0.2),
        record("lbbnn", 1, -2.5, 1.0, mode="mpm", density=0.4),
    ]
    summary = uci_table.summarise(records, tmp_path)
    entry = summary["sets"]["uci-yacht"]
    assert entry["splits"] == [0, 1, 2]
    assert entry["reference"]["log_likelihood"][0] == pytest.approx(-2.0)
    rows = {(r["family"], r["mode"]): r for r in entry["rows"]}
    bnn, lbbnn = rows[("bnn", "bma")], rows[("lbbnn", "mpm")]
    assert bnn["splits"] == [0, 1, 2] and lbbnn["splits"] == [0, 1]
    assert bnn["rmse"][0] == pytest.approx(2.0) and bnn["rmse"][1] == pytest.approx(1 / math.sqrt(3))
    ref_mean, ref_se = lbbnn["reference_log_likelihood"]  # MC dropout on splits 0 and 1 only
    assert ref_mean == pytest.approx(-1.5) and ref_se == pytest.approx(np.std([-1, -2], ddof=1) / math.sqrt(2))
    assert lbbnn["density"] == pytest.approx(0.3)
    # bnn's mean is above MC dropout's (-1.83 vs -2.0), but per split d = (-0.5, 0.5, 0.5): mean 1/6,
    # se sqrt(1/3) / sqrt(3) = 1/3, a tie; lbbnn: d = (0.5, -0.5), a tie
    assert bnn["paired"]["mean"] == pytest.approx(1 / 6) and bnn["paired"]["se"] == pytest.approx(1 / 3)
    assert bnn["call"] == "tie" and lbbnn["call"] == "tie" and not bnn["beats_reference"]
    assert summary["sets_won_by_best"] == 0 and summary["family_wins"] == {}
    # no tau files: the edge check cannot be made and nothing is credited
    assert bnn["reference_edges"]["known"] is False and bnn["checked"] == bnn["paired"]
    records[0]["modes"]["bma"]["log_likelihood"] = -0.5  # d = (0.5, 0.6, 0.5): t = 16 on 2 df, a win
    records[1]["modes"]["bma"]["log_likelihood"] = -1.4
    summary = uci_table.summarise(records, tmp_path)
    entry = summary["sets"]["uci-yacht"]
    assert entry["best"] == "bnn bma" and entry["best_call"] == "win"
    assert summary["family_wins"] == {"bnn": 1} and summary["sets_won_by_best"] == 1
    assert summary["sets_won_by_lbbnn"] == 0
    text = uci_table.render_markdown(summary)
    assert "| yacht | MC dropout | - | 3 | -2.00 ± 0.58 | - | - | - | ? | - | - | 2.00 ± 0.58 | 1 | - | - |" in text
    assert (
        "| yacht | bnn | bma | 3 | -1.47 ± 0.58 | -2.00 ± 0.58 | +0.533 ± 0.033 | win | ? | +0.533 ± 0.033 | **win** |"
    ) in text
    assert "yacht 3 of 20 (0-2)" in text
    assert "paired t test at 95 %" in text
    assert "**Target missed**: best of ours 1 < 5; LBBNN 0 < 3." in text


def test_bound_check_credits_mc_dropout_where_its_tau_is_at_the_grid_edge(tmp_path):
    # MC dropout at the top of its grid on splits 0 and 1, inside it on split 2; its LL -3 is far below
    # the Gaussian bound at RMSE 1 (-1.419): credited there, not on split 2.
    write_reference(
        tmp_path, "yacht", [-3.0, -3.0, -3.0], [1.0, 1.0, 1.0], taus=[0.75, 0.75, 0.5], grid=[0.25, 0.5, 0.75]
    )
    records = [record("lbbnn", s, ll, 1.0) for s, ll in ((0, -2.0), (1, -2.1), (2, -2.0))]
    summary = uci_table.summarise(records, tmp_path)
    row = summary["sets"]["uci-yacht"]["rows"][0]
    bound = uci_table.gaussian_bound(1.0)
    assert row["paired"]["mean"] == pytest.approx(np.mean([1.0, 0.9, 1.0]))
    assert row["paired"]["call"] == "win"
    assert row["checked"]["mean"] == pytest.approx(np.mean([-2.0 - bound, -2.1 - bound, 1.0]))
    assert row["call"] == "tie" and row["qualified"]
    assert row["reference_edges"] == {"top": 2, "bottom": 0, "known": True}
    assert summary["sets"]["uci-yacht"]["reference"]["epochs"] == 4000
    text = uci_table.render_markdown(summary)
    assert "| 2/3 top | " in text and "tie †" in text


def test_het_variant_cells_are_the_family_cells_with_the_heteroscedastic_output():
    plain = uci_table.uci_grid(("lbbnn",), ("uci-yacht",), (0, 1)).cells()
    het = uci_table.uci_grid(("lbbnn+het",), ("uci-yacht",), (0, 1)).cells()
    assert [c[1] for c in het] == ["lbbnn+het", "lbbnn+het"]
    for (_, _, _, _, a), (_, _, _, _, b) in zip(plain, het):
        assert b.method == "lbbnn" and b.likelihood == "heteroscedastic" and b.likelihood_options == {}
        assert b.family_options == a.family_options and b.train == a.train
        assert b.replace(likelihood=a.likelihood, likelihood_options=a.likelihood_options) == a
    with pytest.raises(SystemExit):
        uci_table.split_method("lbbnn+nope")


def test_het_mean_variant_is_het_with_half_the_warm_start_fitting_the_mean_first():
    het = uci_table.uci_grid(("lbbnn+het", "concrete-dropout+het"), ("uci-energy",), (0,)).cells()
    mean_first = uci_table.uci_grid(("lbbnn+het-mean", "concrete-dropout+het-mean"), ("uci-energy",), (0,)).cells()
    assert [c[1] for c in mean_first] == ["lbbnn+het-mean", "concrete-dropout+het-mean"]
    (*_, lbbnn_het), (*_, cd_het) = het
    (*_, lbbnn_mean), (*_, cd_mean) = mean_first
    assert lbbnn_het.train.warm_start_epochs == 100  # energy: 300 epochs, a third of them warm start
    assert lbbnn_mean.train.warm_start_mean_epochs == 50 and lbbnn_mean.likelihood == "heteroscedastic"
    assert lbbnn_mean.replace(train={"warm_start_mean_epochs": 0}) == lbbnn_het
    assert lbbnn_mean.run_id("f") != lbbnn_het.run_id("f")
    # concrete dropout starts cold (no warm start): the variant is +het itself, the same run, one cell
    assert cd_mean.train.warm_start_mean_epochs == 0 and cd_mean.run_id("f") == cd_het.run_id("f")
    both = uci_table.uci_grid(("concrete-dropout+het", "concrete-dropout+het-mean"), ("uci-energy",), (0, 1)).cells()
    assert [(c[1], c[3]) for c in both] == [("concrete-dropout+het", 0), ("concrete-dropout+het", 1)]


def test_het_frozen_mean_variant_fits_a_scale_head_on_the_family_grid_run():
    (*_, plain), (*_, frozen) = (
        uci_table.uci_grid((m,), ("uci-protein",), (0,)).cells()[0]
        for m in ("concrete-dropout", "concrete-dropout+het-frozen-mean")
    )
    assert frozen.likelihood == "heteroscedastic" and frozen.train.scale_head["epochs"] == 40  # 160 // 4
    # its first stage is the grid's own run (the same id: loaded from the store where it was trained)
    assert frozen.mean_stage() == plain and frozen.mean_stage().run_id("f") == plain.run_id("f")
    # families whose draws would change with a second output row get no cell of their own
    cells = uci_table.uci_grid(("lbbnn", "lbbnn+het-frozen-mean"), ("uci-protein",), (0,)).cells()
    assert [c[1] for c in cells] == ["lbbnn"]


def test_long_dense_and_tempered_variants_change_only_what_they_name():
    (*_, plain), (*_, long), (*_, dense) = (
        uci_table.uci_grid((m,), ("uci-energy",), (0,)).cells()[0] for m in ("lbbnn", "lbbnn+long", "lbbnn+dense")
    )
    # energy ships 300 epochs, a third warm start, a third KL annealing: the variant keeps the thirds
    assert (plain.train.epochs, plain.train.warm_start_epochs, plain.train.kl_anneal_epochs) == (300, 100, 100)
    assert (long.train.epochs, long.train.warm_start_epochs, long.train.kl_anneal_epochs) == (900, 300, 300)
    assert long.replace(train={"epochs": 300, "warm_start_epochs": 100, "kl_anneal_epochs": 100}) == plain
    assert dense.family_options["prior_inclusion"] == 0.9 and plain.family_options["prior_inclusion"] == 0.5
    assert dense.replace(family_options={**dense.family_options, "prior_inclusion": 0.5}) == plain
    assert len({plain.run_id("f"), long.run_id("f"), dense.run_id("f")}) == 3
    # a family without an inclusion prior: +dense changes nothing, so it adds no second cell
    cells = uci_table.uci_grid(("bnn", "bnn+dense"), ("uci-energy",), (0, 1)).cells()
    assert [(c[1], c[3]) for c in cells] == [("bnn", 0), ("bnn", 1)]
    # concrete dropout starts cold: three times its epochs, still no warm start
    (*_, cd_long) = uci_table.uci_grid(("concrete-dropout+long",), ("uci-energy",), (0,)).cells()[0]
    assert (cd_long.train.epochs, cd_long.train.warm_start_epochs) == (900, 0)
    # +tempered: the KL weighted by 0.1, nothing else changed
    (*_, tempered) = uci_table.uci_grid(("lbbnn+tempered",), ("uci-energy",), (0,)).cells()[0]
    assert plain.train.kl_weight == 1.0 and tempered.train.kl_weight == 0.1
    assert tempered.replace(train={"kl_weight": 1.0}) == plain


def test_a_pilot_on_few_splits_is_not_picked_as_best_but_counts_among_the_rows_chosen_from(tmp_path):
    n = 8
    write_reference(tmp_path, "kin8nm", [0.0] * n, [1.0] * n)
    rng = np.random.default_rng(0)
    lifts = 0.1 + 0.01 * rng.standard_normal(n)  # bnn: a clear win on all 8 splits
    records = [record("bnn", s, d, 1.0, dataset="uci-kin8nm") for s, d in enumerate(lifts)]
    records += [record("lbbnn", s, d - 0.2, 1.0, dataset="uci-kin8nm") for s, d in enumerate(lifts)]
    # a pilot on splits 0-2 (3 of 8 covered, under half): a larger mean, a tie
    records += [record("lbbnn+long", s, d, 1.0, dataset="uci-kin8nm") for s, d in enumerate((0.9, -0.5, 0.6))]
    summary = uci_table.summarise(records, tmp_path)
    entry = summary["sets"]["uci-kin8nm"]
    rows = {r["family"]: r for r in entry["rows"]}
    assert rows["lbbnn+long"]["checked"]["mean"] > rows["bnn"]["checked"]["mean"]
    assert rows["lbbnn+long"]["call"] == "tie" and rows["bnn"]["call"] == "win"
    assert entry["best"] == "bnn bma" and entry["best_call"] == "win" and summary["sets_won_by_best"] == 1
    assert entry["lbbnn_best"] == "lbbnn bma" and entry["lbbnn_call"] == "loss"
    # chosen from all three rows, the pilot included; LBBNN's from its own two (one set: Holm changes nothing)
    assert entry["best_p_selected"] == pytest.approx(min(1.0, 3 * rows["bnn"]["checked"]["p"]))
    assert entry["lbbnn_p_selected"] == pytest.approx(min(1.0, 2 * rows["lbbnn"]["checked"]["p"]))
    assert entry["lbbnn_p_corrected"] == pytest.approx(entry["lbbnn_p_selected"])
    assert entry["lbbnn_corrected_call"] == "loss" and summary["sets_won_by_lbbnn_corrected"] == 0
    # on 4 of 8 splits (half) the same row is picked
    records += [record("lbbnn+long", 3, 0.7, 1.0, dataset="uci-kin8nm")]
    assert uci_table.summarise(records, tmp_path)["sets"]["uci-kin8nm"]["best"] == "lbbnn+long bma"


def test_the_calls_say_which_wins_rest_on_a_method_variant(tmp_path):
    write_reference(tmp_path, "yacht", [-2.0, -2.0, -2.0], [1.0, 1.0, 1.0])
    write_reference(tmp_path, "energy", [-2.0, -2.0, -2.0], [1.0, 1.0, 1.0])
    lifts = (1.0, 1.1, 0.9)  # per split d = lift: a win
    records = [record("lbbnn+het-mean", s, -2.0 + d, 1.0, dataset="uci-yacht") for s, d in enumerate(lifts)]
    records += [record("lbbnn", s, -2.0 + d / 2, 1.0, dataset="uci-yacht") for s, d in enumerate(lifts)]
    records += [record("bnn", s, -2.0 + d, 1.0, dataset="uci-energy") for s, d in enumerate(lifts)]
    records += [record("lbbnn", s, -2.0 - d, 1.0, dataset="uci-energy") for s, d in enumerate(lifts)]
    summary = uci_table.summarise(records, tmp_path)
    assert summary["sets"]["uci-yacht"]["best"] == "lbbnn+het-mean bma"
    assert uci_table._variant_wins(summary) == ["yacht: lbbnn+het-mean bma (best of ours and LBBNN)"]
    # LBBNN's yacht row, chosen from its 2 rows there, then Holm over yacht and energy (p_(1) x 2, p_(2) x 1)
    yacht, energy = summary["sets"]["uci-yacht"], summary["sets"]["uci-energy"]
    p_won = 2 * next(r for r in yacht["rows"] if r["family"] == "lbbnn+het-mean")["checked"]["p"]
    assert yacht["lbbnn_p_selected"] == pytest.approx(p_won)
    ps = sorted([yacht["lbbnn_p_selected"], energy["lbbnn_p_selected"]])
    assert yacht["lbbnn_p_corrected"] == pytest.approx(max(2 * ps[0], ps[1]))
    assert yacht["lbbnn_corrected_call"] == "win" and energy["lbbnn_corrected_call"] == "loss"
    assert summary["sets_won_by_lbbnn_corrected"] == 1
    text = uci_table.render_markdown(summary)
    assert "Wins that rest on a method variant" in text
    assert "yacht: lbbnn+het-mean bma (best of ours and LBBNN)." in text
    assert f"multiple-set correction: best of ours {summary['sets_won_by_best_corrected']}, LBBNN 1." in text
    assert "energy: bnn" not in text  # a plain family's win rests on no variant


def test_split_ranges_and_parsing():
    assert uci_table.parse_splits("0-3,7") == (0, 1, 2, 3, 7)
    assert uci_table.parse_splits(None) is None
    assert uci_table._ranges([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"


def test_uci_grid_covers_nine_sets_five_families_and_all_splits():
    grid = PRESETS["uci"]
    cells = grid.cells()
    assert len(cells) == (8 * 20 + 5) * 5
    assert {c[1] for c in cells} == set(uci_table.FAMILIES)
    lbbnn = next(c[-1] for c in cells if c[1] == "lbbnn")
    assert lbbnn.family_options["bias_prior"] == "gaussian"
    assert lbbnn.likelihood_options["noise"] == "variational"
    restricted = uci_table.uci_grid(("bnn",), ("uci-protein", "uci-yacht"), (3, 4, 5))
    assert {(c[0], c[3]) for c in restricted.cells()} == {
        ("uci-protein", 3),
        ("uci-protein", 4),
        ("uci-yacht", 3),
        ("uci-yacht", 4),
        ("uci-yacht", 5),
    }
    # The single-run presets keep their names and are the grid's lbbnn runs on split 0.
    for name in ("uci-boston", "uci-yacht", "uci-protein"):
        assert PRESETS[name] == next(c[-1] for c in cells if c[0] == name and c[1] == "lbbnn" and c[3] == 0)


def test_rendering_from_the_results_file_without_a_data_folder_uses_the_stored_reference(tmp_path, monkeypatch):
    # RESULTS.md is regenerated where the data folder may be absent; the comparison must then come
    # from the MC-dropout numbers uci.json stored, not vanish (it once rendered "0 wins" that way).
    monkeypatch.delenv("BNN_DATA_DIR", raising=False)
    records = [record("bnn", 0, -1.5, 1.0), record("bnn", 1, -1.5, 3.0)]
    stored = {
        "runs": records,
        "reference_mc_dropout": {"uci-yacht": {"log_likelihood": [-1.0, -3.0], "rmse": [1.0, 2.0]}},
    }
    path = tmp_path / "uci.json"
    path.write_text(json.dumps(stored))
    text = uci_table.render_markdown(results_json=path)
    assert "| yacht | MC dropout | - | 2 | -2.00 ± 1.00 | - |" in text
    # per split d = (-0.5, 1.5): mean 0.5 ± 1.0 on 1 df, a tie
    assert "| yacht | bnn | bma | 2 | -1.50 ± 0.00 | -2.00 ± 1.00 | +0.500 ± 1.000 | tie |" in text
    # a data folder, when given, wins over the stored copy
    write_reference(tmp_path, "yacht", [-1.0, -1.0], [1.0, 1.0])
    text = uci_table.render_markdown(results_json=path, data_dir=tmp_path)
    assert "| yacht | bnn | bma | 2 | -1.50 ± 0.00 | -1.00 ± 0.00 | -0.500 ± 0.000 | loss |" in text


def test_gaussian_bound_is_the_best_mean_log_likelihood_of_a_homoscedastic_gaussian():
    residuals = np.random.default_rng(0).standard_t(df=3, size=2000) * 2.5
    rmse = float(np.sqrt(np.mean(residuals**2)))

    def mean_ll(sd):
        return float(np.mean(-0.5 * np.log(2 * np.pi * sd**2) - residuals**2 / (2 * sd**2)))

    assert uci_table.gaussian_bound(rmse) == pytest.approx(mean_ll(rmse), abs=1e-12)
    for sd in (0.5 * rmse, 0.9 * rmse, 1.1 * rmse, 2 * rmse):
        assert mean_ll(sd) < uci_table.gaussian_bound(rmse)


def test_misses_table_lists_only_sets_our_best_row_loses(tmp_path):
    write_reference(tmp_path, "yacht", [-1.0, -1.0], [1.0, 1.0])
    write_reference(tmp_path, "wine", [-3.0, -3.0], [1.0, 1.0])
    records = [
        record("bnn", 0, -1.5, 2.0),
        record("bnn", 1, -1.7, 2.0),
        record("bnn", 0, -1.5, 2.0, dataset="uci-wine"),
        record("bnn", 1, -1.7, 2.0, dataset="uci-wine"),
    ]
    text = uci_table.render_markdown(uci_table.summarise(records, tmp_path))
    bound_ours, bound_mc = uci_table.gaussian_bound(2.0), uci_table.gaussian_bound(1.0)
    assert f"| yacht | bnn bma | 2 | -1.60 | {bound_ours:.2f} | 2.00 | -1.00 | {bound_mc:.2f} | 1.00 |" in text
    # yacht: d = (-0.5, -0.7), a tie on 1 df (listed); wine: d = (1.5, 1.3), 1.4 ± 0.1, a win (not listed)
    assert "| wine | bnn bma |" not in text


def test_misses_benchmark_table_means_over_splits():
    from benchmarks import uci_misses

    rows = [
        {
            "set": "uci-wine",
            "variant": "fnn",
            "split": s,
            "run_id": "x",
            "log_likelihood": ll,
            "rmse": rmse,
            "noise_std": 0.5,
            "mc_dropout": (ref_ll, ref_rmse),
        }
        for s, ll, rmse, ref_ll, ref_rmse in ((0, -1.0, 0.6, -0.9, 0.5), (1, -2.0, 0.8, -1.1, 0.7))
    ]
    text = uci_misses.render(rows, "cmd")
    assert "| wine | MC dropout | -0.900 / 0.5 | -1.100 / 0.7 | -1.000 / 0.6 |" in text
    assert "| wine | fnn | -1.000 / 0.6 | -2.000 / 0.8 | -1.500 / 0.7 |" in text
    # a split where MC dropout's tau sits at the top of its grid is marked with its Gaussian bound
    reference = {"tau": [3.5, 3.0], "tau_grid": [2.5, 3.0, 3.5]}
    assert [uci_misses._edge(reference, s) for s in (0, 1)] == ["top", None]
    rows[0]["mc_dropout"] = (-0.9, 0.5, "top")
    text = uci_misses.render(rows, "cmd")
    bound = uci_table.gaussian_bound(0.5)
    assert f"| wine | MC dropout | -0.900 / 0.5 (τ top, bound {bound:.3f}) | -1.100 / 0.7 | -1.000 / 0.6 |" in text


def test_step_time_benchmark_times_every_uci_family_against_the_plain_mlp(data_dir):
    from benchmarks import uci_step_time
    from core.runs.presets import UCI_METHODS

    ms = uci_step_time.measure("uci-boston", steps=3, rounds=1, data_dir=str(data_dir))
    assert set(ms) == {*UCI_METHODS, uci_step_time.PLAIN}
    assert all(value > 0 for value in ms.values())
    text = uci_step_time.render({"bnn": 3.0, uci_step_time.PLAIN: 0.5}, "uci-boston", "cmd")
    assert "| bnn | 3.000 | 6.00 |" in text and "| plain-mlp | 0.500 | 1.00 |" in text


@pytest.mark.slow
def test_evaluation_in_worker_processes_gives_the_numbers_of_one_process_in_order(data_dir, tmp_path):
    from core.runs.presets import _uci
    from core.runs.training import train_run

    pending = []
    for index, (split, family) in enumerate(((0, "bnn"), (1, "lbbnn"), (0, "sparse-vd"))):
        config = _uci("uci-yacht", split, family)
        config = config.replace(train={"epochs": 2, "warm_start_epochs": 0, "kl_anneal_epochs": 0})
        run = train_run(config, cache_dir=tmp_path, data_dir=data_dir)
        pending.append((index, run.run_id, {"family": family}))
    alone = list(uci_table._evaluate_all(pending, str(tmp_path), str(data_dir), 5, workers=1))
    pooled = list(uci_table._evaluate_all(pending, str(tmp_path), str(data_dir), 5, workers=2))
    assert [row[:3] for row in pooled] == [row[:3] for row in alone]
    assert [row[3] for row in pooled] == [row[3] for row in alone]
    assert set(alone[1][3]["modes"]) == {"bma", "mpm", "collapsed"}  # lbbnn: a sparse family with a collapsed mode


@pytest.mark.slow
def test_a_het_variant_run_trains_and_evaluates_in_every_mode(data_dir, tmp_path):
    from core.runs.training import train_run

    ((_, method, _, _, config),) = uci_table.uci_grid(("lbbnn+het",), ("uci-yacht",), (0,)).cells()
    assert method == "lbbnn+het"
    config = config.replace(
        train={**config.to_dict()["train"], "epochs": 3, "warm_start_epochs": 1, "kl_anneal_epochs": 1}
    )
    run = train_run(config, cache_dir=tmp_path, data_dir=data_dir)
    numbers = uci_table.evaluate_run(run.run_id, tmp_path, data_dir, samples=4)
    assert set(numbers["modes"]) == {"bma", "mpm", "collapsed"}
    assert all(math.isfinite(m["log_likelihood"]) and m["rmse"] > 0 for m in numbers["modes"].values())
    assert numbers["noise_std"] > 0  # root mean square of the per-input sd, original units

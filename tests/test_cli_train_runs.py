"""`python -m core train | runs | show | rm` (in process, through core.cli.main)."""

from __future__ import annotations

import json

import pytest

from core.cli import build_parser, main
from core.cli.runs import config_from_args
from core.runs import PRESETS, RunStore

TINY = ["--dataset", "two-moons", "--hidden", "16", "--epochs", "1", "--device", "cpu"]


def _config(argv):
    return config_from_args(build_parser().parse_args(["train", *argv]))


def test_train_json_then_cached_then_runs_show_rm(tmp_path, capsys):
    cache = ["--cache-dir", str(tmp_path)]
    assert main(["train", *TINY, *cache, "--json"]) == 0
    out, err = capsys.readouterr()
    first = json.loads(out)
    assert first["from_cache"] is False and "epoch 1/1 [train]" in err
    assert set(first) >= {"run_id", "from_cache", "seconds_per_epoch", "metrics"}
    assert 0.0 <= first["metrics"]["density"] <= 1.0

    assert main(["train", *TINY, *cache, "--json"]) == 0
    out, err = capsys.readouterr()
    second = json.loads(out)
    assert second["from_cache"] is True and second["run_id"] == first["run_id"] and "epoch" not in err

    assert main(["runs", *cache, "--json"]) == 0
    [listed] = json.loads(capsys.readouterr().out)
    assert listed["run_id"] == first["run_id"] and listed["dataset"] == "two-moons" and listed["status"] == "ok"

    assert main(["show", first["run_id"][:5], *cache, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["config"]["hidden"] == [16] and shown["metrics"]["density"] == pytest.approx(
        first["metrics"]["density"]
    )

    assert main(["rm", first["run_id"], *cache]) == 2  # not a terminal: needs --yes
    assert "--yes" in capsys.readouterr().err
    assert main(["rm", first["run_id"], *cache, "--yes"]) == 0
    assert RunStore(tmp_path).run_ids() == []
    assert main(["show", first["run_id"], *cache]) == 2
    assert "no cached run" in capsys.readouterr().err


def test_flags_override_a_preset():
    config = _config(
        [
            "--preset",
            "quick-mnist",
            "--epochs",
            "2",
            "--lr",
            "weights=2e-2,inclusion=1e-4",
            "--seed",
            "3",
            "--empirical-bayes",
        ]
    )
    preset = PRESETS["quick-mnist"]
    assert config.dataset == preset.dataset and config.hidden == preset.hidden
    assert config.train.epochs == 2 and config.seed == 3 and config.train.empirical_bayes
    assert config.train.learning_rates["weights"] == 2e-2 and config.train.learning_rates["inclusion"] == 1e-4
    assert config.train.learning_rates["scales"] == preset.train.learning_rates["scales"]


def test_flags_override_a_config_file_and_options_parse(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('dataset = "toy-sine-gaps"\nmethod = "bnn"\nhidden = [8]\n[train]\nepochs = 5\n')
    config = _config(
        [
            "--config",
            str(path),
            "--hidden",
            "32,16",
            "--option",
            "prior_variance=2",
            "--param",
            "n=30",
            "--mc-samples",
            "2",
            "--pretrain-epochs",
            "1",
        ]
    )
    assert config.dataset == "toy-sine-gaps" and config.method == "bnn" and config.hidden == (32, 16)
    assert config.family_options["prior_variance"] == 2 and config.dataset_params == {"n": 30}
    assert config.train.epochs == 5 and config.train.mc_samples == 2 and config.train.pretrain_epochs == 1
    switched = _config(["--config", str(path), "--method", "lbbnn"])  # bnn options do not carry over
    assert switched.method == "lbbnn" and "prior_inclusion" in switched.family_options


@pytest.mark.parametrize(
    "argv, field",
    [
        (["--batch-size", "0"], "batch_size"),
        (["--lr", "weights"], "--lr"),
        (["--lr", "weigths=1e-3"], "learning_rates"),
        (["--activation", "swish"], "activation"),
        (["--option", "prior_inclusion=2"], "prior_inclusion"),
        (["--hidden", "a,b"], "hidden"),
        (["--preset", "quick-paper"], "grid"),
        (["--cuda-graphs", "--device", "cpu"], "cuda_graphs"),
    ],
)
def test_bad_flags_exit_2_naming_the_field(argv, field, tmp_path, capsys):
    assert main(["train", *TINY, "--cache-dir", str(tmp_path), *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and field in err and "Traceback" not in err

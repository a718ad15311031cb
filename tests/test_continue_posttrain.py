"""benchmarks/continue_posttrain.py: its argument rules, and that it trains a loaded copy on the run's
fixed cut and leaves the stored run as it was."""

from __future__ import annotations

import hashlib
import json

import pytest

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

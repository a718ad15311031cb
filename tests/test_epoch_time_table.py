"""benchmarks/epoch_time.py's table: ratios within a round, and an ensemble's ratio per network."""

from __future__ import annotations

from types import SimpleNamespace

from benchmarks.epoch_time import render_table


def test_ratios_are_per_round_and_an_ensemble_also_gets_its_ratio_per_network():
    args = SimpleNamespace(dataset="mnist", device="cpu", repeats=2, threads=1, load_at_start=0.5, steps=None)
    runs = {
        "plain-mlp": [{"seconds_per_epoch": 4.0, "peak_bytes": 2**20, "device": "cpu", "members": 1}] * 2,
        "ensemble": [
            {"seconds_per_epoch": 24.0, "peak_bytes": 2**20, "device": "cpu", "members": 5},
            {"seconds_per_epoch": 28.0, "peak_bytes": 2**20, "device": "cpu", "members": 5},
        ],
        "lbbnn": [{"seconds_per_epoch": 12.0, "peak_bytes": 2**20, "device": "cpu"}] * 2,
    }
    table = render_table(args, (400, 600), list(runs), runs)
    rows = {line.split(" | ")[0].strip("| "): line for line in table.splitlines() if line.startswith("| ")}
    # rounds: 6x and 7x; median 6.5, per network 6.5 / 5 = 1.3
    assert "| 6.50 (6.00-7.00); per network (5): 1.30 |" in rows["ensemble"]
    assert "| 3.00 (3.00-3.00) |" in rows["lbbnn"] and "per network" not in rows["lbbnn"]


def test_the_breakdown_table_gives_median_phases_per_step_and_their_sum():
    args = SimpleNamespace(dataset="mnist-small", device="cpu", repeats=2, threads=1, load_at_start=0.5, steps=40)
    run = {"seconds_per_epoch": 4.0, "peak_bytes": 2**20, "device": "cpu", "members": 1}
    runs = {
        "plain-mlp": [dict(run, phases_ms=[2.0, 3.0, 1.0]), dict(run, phases_ms=[4.0, 5.0, 1.0])],
        "lbbnn": [dict(run, seconds_per_epoch=12.0, phases_ms=[10.0, 11.0, 2.0])] * 2,
    }
    lines = render_table(args, (400, 600), list(runs), runs).splitlines()
    assert "| plain-mlp | 3.00 | 4.00 | 1.00 | 8.00 |" in lines  # medians of the two rounds
    assert "| lbbnn | 10.00 | 11.00 | 2.00 | 23.00 |" in lines
    # without --breakdown there is no such table
    plain = {name: [{k: v for k, v in r.items() if k != "phases_ms"} for r in rs] for name, rs in runs.items()}
    assert "| family | forward | backward | optimizer | sum |" not in render_table(args, (400, 600), list(plain), plain)


def test_breakdown_without_steps_is_refused_in_one_line(capsys):
    import pytest

    from benchmarks.epoch_time import main

    with pytest.raises(SystemExit) as exit_info:
        main(["--breakdown", "--families", "plain-mlp"])
    assert exit_info.value.code == 2
    assert "--breakdown" in capsys.readouterr().err


def test_a_replayed_row_is_compared_with_the_replayed_plain_mlp_at_its_batch():
    from benchmarks.epoch_time import baseline_of

    timed = {"plain-mlp": [], "plain-mlp@500": [], "plain-mlp+graphs": [], "lbbnn": []}
    assert baseline_of("lbbnn+graphs", timed) == "plain-mlp+graphs"
    assert baseline_of("lbbnn+graphs@500", timed) == "plain-mlp@500"  # no replayed plain MLP at 500
    assert baseline_of("lbbnn+graphs@1000", timed) == "plain-mlp"
    assert baseline_of("lbbnn+compile", timed) == "plain-mlp"
    assert baseline_of("plain-mlp+graphs", timed) == "plain-mlp"
    assert baseline_of("lbbnn@500", {**timed, "plain-mlp+graphs@500": []}) == "plain-mlp@500"


def test_graphs_rows_are_refused_for_cpu_step_timing_and_unknown_suffixes_in_one_line(capsys):
    import pytest

    from benchmarks.epoch_time import main

    for families, words in (("lbbnn+graphs", "+graphs replays CUDA graphs"), ("lbbnn+fast", "the suffixes are")):
        with pytest.raises(SystemExit) as exit_info:
            main(["--families", families, "--steps", "20"])
        assert exit_info.value.code == 2
        error = capsys.readouterr().err.strip().splitlines()[-1]
        assert error.startswith("epoch_time.py: error:") or "error:" in error
        assert words in error

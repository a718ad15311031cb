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

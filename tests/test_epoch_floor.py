"""The epoch-floor benchmark's pure parts: its argument rules and its table's sums and verdicts (the
timing itself is a benchmark, not a test)."""

from __future__ import annotations

import pytest

from benchmarks import epoch_floor


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["--batches", "0"], "--batches"),
        (["--batches", "100,x"], "--batches"),
        (["--batches", ""], "--batches"),
        (["--batches", "-100"], "--batches"),
        (["--batches", "1e12"], "--batches"),
        (["--hidden", "400,,600"], "--hidden"),
        (["--batches", ",".join(["10"] * 9)], "--batches"),
        (["--hidden", "1,1,1,1,1"], "--hidden"),
        (["--steps", "0"], "--steps"),
        (["--blocks", "1e9"], "--blocks"),
        (["--threads", "-1"], "--threads"),
    ],
)
def test_bad_arguments_are_refused_with_the_flag_named(argv, flag, capsys):
    with pytest.raises(SystemExit):
        epoch_floor.parse_args(argv)
    assert flag in capsys.readouterr().err


def test_the_floor_is_the_sum_of_its_parts_and_the_verdict_follows_the_target():
    common = {"load": 0.5, "adam": 1.0}
    rows = [
        # floor 7 + 1 + 0.5 + 2 = 10.5 = 2.625x the plain step: above 2.5x
        {**common, "batch": 100, "plain": 4.0, "lbbnn": 14.0, "lbbnn_compiled_weights": 12.0, "products": 7.0,
         "noise": 0.5, "transcendentals": 2.0},
        # floor 14 + 1 + 1 + 2 = 18 = 2.25x
        {**common, "batch": 250, "plain": 8.0, "lbbnn": 24.0, "lbbnn_compiled_weights": 22.0, "products": 14.0,
         "noise": 1.0, "transcendentals": 2.0},
    ]  # fmt: skip
    text = epoch_floor.render(rows, "python -m benchmarks.epoch_floor", (400, 600), 1)
    assert "| 100 | 4.00 | 14.00 (3.50x) | 12.00 (3.00x) | 7.00 | 1.00 | 0.50 | 2.00 | 10.50 (2.62x) | no |" in text
    assert "| 250 | 8.00 | 24.00 (3.00x) | 22.00 (2.75x) | 14.00 | 1.00 | 1.00 | 2.00 | 18.00 (2.25x) | yes |" in text
    assert "784-400-600-10" in text


def test_the_flow_floor_adds_its_own_products_and_noise_and_then_its_flows():
    row = {"load": 0.5, "adam": 1.0, "batch": 100, "plain": 4.0, "lbbnn": 14.0, "lbbnn_compiled_weights": 12.0,
           "products": 7.0, "noise": 0.5, "transcendentals": 2.0,
           "flow": 32.0, "flow_products": 11.0, "flow_noise": 1.0, "flows": 6.0}  # fmt: skip
    text = epoch_floor.render([row], "python -m benchmarks.epoch_floor", (400, 600), 1)
    # floor 11 + 1 + 1 + 2 = 15 = 3.75x; with its flows 21 = 5.25x: above the families' 5x
    assert "| 100 | 4.00 | 32.00 (8.00x) | 11.00 | 1.00 | 15.00 (3.75x) | 6.00 | 21.00 (5.25x) | no |" in text
    faster = {**row, "flows": 4.0}  # 19 = 4.75x
    assert "| 19.00 (4.75x) | yes |" in epoch_floor.render([faster], "c", (400, 600), 1)
    no_flow = {k: v for k, v in row.items() if not k.startswith("flow")}
    assert "lbbnn-flow" not in epoch_floor.render([no_flow], "c", (400, 600), 1)  # rows without it: one table


def test_the_lfmvn_floor_is_lbbnn_s_floor_and_its_additions():
    row = {"load": 0.5, "adam": 1.0, "batch": 100, "plain": 4.0, "lbbnn": 14.0, "lbbnn_compiled_weights": 12.0,
           "products": 7.0, "noise": 0.5, "transcendentals": 2.0, "lfmvn": 32.0, "lfmvn_extra": 6.0}  # fmt: skip
    text = epoch_floor.render([row], "python -m benchmarks.epoch_floor", (400, 600), 1)
    # LBBNN's floor 10.5, plus 6 = 16.5 = 4.125x: within the families' 5x
    assert "| 100 | 4.00 | 32.00 (8.00x) | 10.50 | 6.00 | 16.50 (4.12x) | yes |" in text
    assert "| 22.50 (5.62x) | no |" in epoch_floor.render([{**row, "lfmvn_extra": 12.0}], "c", (400, 600), 1)

"""One rule for every learning rate: a finite number above 0 and at most core.validate.MAX_LEARNING_RATE,
refused with one message naming the field wherever the rate comes from (a TrainConfig, a config table or
file, the command line's --lr / --pretrain-lr, the Train form). No preset or stored run uses more."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.errors import ConfigError, InputError
from core.train import DEFAULT_LEARNING_RATES, TrainConfig
from core.validate import MAX_LEARNING_RATE, learning_rate

ROOT = Path(__file__).resolve().parents[1]
HUGE = 1e9  # what a careless user typed: NaNs after an epoch of compute, before the bound
RATE_FIELDS = [f"learning_rates.{g}" for g in DEFAULT_LEARNING_RATES]
RATE_FIELDS += [f"pretrain_learning_rates.{g}" for g in DEFAULT_LEARNING_RATES] + ["warm_start_learning_rate"]


def _one_line_naming(message: str, field: str) -> None:
    assert field in message and "\n" not in message and "Traceback" not in message, message


# No subnormals: loading core.train flushes them process-wide (core.cpu_settings), so hypothesis cannot draw them.
ANY_FLOAT = st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=False)


@given(st.one_of(ANY_FLOAT, st.integers(-(10**400), 10**400)))
def test_the_rule_keeps_exactly_the_numbers_in_its_interval(value):
    inside = math.isfinite(float(value)) if abs(value) < 1e300 else False
    inside = inside and 0 < value <= MAX_LEARNING_RATE
    if inside:
        assert learning_rate(value, "rate") == float(value)  # returned as given, never clamped
    else:
        with pytest.raises(InputError) as info:
            learning_rate(value, "rate")
        _one_line_naming(str(info.value), "rate")


@given(st.floats(min_value=1e-300, max_value=MAX_LEARNING_RATE, allow_subnormal=False))
def test_text_of_a_rate_in_the_interval_is_read_back_exactly(value):
    assert learning_rate(repr(value), "rate") == value


def test_the_bounds_themselves():
    assert learning_rate(MAX_LEARNING_RATE, "r") == MAX_LEARNING_RATE
    for bad in (0, 0.0, -0.0, math.nextafter(MAX_LEARNING_RATE, math.inf), HUGE, "1e9", "nan", True):
        with pytest.raises(InputError, match="^r: "):
            learning_rate(bad, "r")


def _train(field: str, value: float) -> dict:
    if "." in field:
        table, group = field.split(".")
        return {table: {group: value}}
    return {field: value}


@pytest.mark.parametrize("field", RATE_FIELDS)
def test_train_config_refuses_a_huge_rate_naming_the_field(field):
    with pytest.raises(ConfigError) as info:
        TrainConfig(epochs=1, **_train(field, HUGE))
    _one_line_naming(str(info.value), field)
    TrainConfig(epochs=1, **_train(field, MAX_LEARNING_RATE))  # the bound itself is a rate


@pytest.mark.parametrize("field", RATE_FIELDS)
def test_a_config_table_refuses_a_huge_rate_naming_the_field(field):
    from core.runs import RunConfig

    with pytest.raises(ConfigError) as info:
        RunConfig.from_dict({"dataset": "two-moons", "hidden": [4], "train": {"epochs": 1, **_train(field, HUGE)}})
    _one_line_naming(str(info.value), f"train.{field}")


TINY = ["--dataset", "two-moons", "--hidden", "4", "--epochs", "1", "--device", "cpu"]


@pytest.mark.parametrize(
    "flags, field",
    [
        (["--lr", "weights=1e9"], "learning_rates.weights"),
        (["--pretrain-lr", "inclusion=1e9"], "pretrain_learning_rates.inclusion"),
    ],
)
def test_the_command_line_refuses_a_huge_rate_naming_the_field(flags, field, tmp_path, capsys):
    from core.cli import main

    assert main(["train", *TINY, "--cache-dir", str(tmp_path), *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and len(err.splitlines()) == 1, err
    _one_line_naming(err, field)
    assert not list(tmp_path.rglob("config.json")), "nothing is trained or stored"


def test_a_config_file_refuses_a_huge_warm_start_rate(tmp_path, capsys):
    from core.cli import main

    path = tmp_path / "run.json"
    path.write_text(json.dumps({"dataset": "two-moons", "hidden": [4], "train": {"warm_start_learning_rate": HUGE}}))
    assert main(["train", "--config", str(path), "--cache-dir", str(tmp_path / "cache")]) == 2
    _one_line_naming(capsys.readouterr().err.strip(), "warm_start_learning_rate")


def test_the_train_form_refuses_a_huge_rate_naming_the_field(tmp_path, monkeypatch):
    from streamlit.testing.v1 import AppTest

    from tests.support import clear_dashboard_caches

    monkeypatch.setenv("BNN_CACHE_DIR", str(tmp_path))
    clear_dashboard_caches()
    try:
        at = AppTest.from_file(str(ROOT / "dashboard" / "app.py"), default_timeout=180).run()
        at.text_input(key="train_lr_inclusion").input("1e9").run()
        assert not at.exception
        errors = [e.value for e in at.error]
        assert len(errors) == 1 and "learning\\_rates\\.inclusion" in errors[0], errors
        assert at.button(key="train_button").disabled
        at.text_input(key="train_lr_inclusion").input(f"{MAX_LEARNING_RATE:g}").run()
        assert not at.error and not at.button(key="train_button").disabled
    finally:
        clear_dashboard_caches()


def _rates_in(value, path=()):
    """(where, rate) for every number under a key naming a learning rate, however deep."""
    if isinstance(value, dict):
        for key, item in value.items():
            if "learning_rate" in str(key):
                numbers = item.items() if isinstance(item, dict) else [("", item)]
                for group, rate in numbers:
                    if isinstance(rate, (int, float)) and not isinstance(rate, bool):
                        yield "/".join(map(str, (*path, key, group))), rate
            yield from _rates_in(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _rates_in(item, (*path, index))


def test_no_preset_or_stored_run_uses_a_rate_above_the_bound():
    from core.runs.presets import PRESETS, GridSpec

    configs = []
    for name, preset in PRESETS.items():
        cells = preset.cells() if isinstance(preset, GridSpec) else [(None, None, None, None, preset)]
        configs += [(name, cell[-1].to_dict()) for cell in cells]
    stored = sorted((ROOT / "assets").rglob("config.json")) + sorted((ROOT / "benchmarks" / "results").glob("*.json"))
    assert len(stored) >= 4, "the lessons' stored runs are checked too"
    configs += [(str(path.relative_to(ROOT)), json.loads(path.read_text(encoding="utf-8"))) for path in stored]
    found = [(name, where, rate) for name, config in configs for where, rate in _rates_in(config)]
    assert len(found) > 100  # the walk reaches the rates
    above = [item for item in found if not 0 < item[2] <= MAX_LEARNING_RATE]
    assert not above, above

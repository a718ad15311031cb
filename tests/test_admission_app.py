"""Admission in the running app (AppTest): oversized requests are refused or lowered with a message,
before anything is allocated, so the serving process's resident memory stays where it was."""

from __future__ import annotations

import gc
import re
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from tests.support import clear_dashboard_caches

APP = Path(__file__).resolve().parent.parent / "dashboard" / "app.py"
TIMEOUT = 180
# What a refused request may leave in this process: Streamlit's own bookkeeping of a rerun, never the
# request (12000-12000 would build 2.7 GB; n=1e9 two-moons would allocate tens of GB).
RSS_MARGIN_BYTES = 64 * 2**20


def resident_bytes() -> int:
    gc.collect()
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def texts(elements) -> list[str]:
    """What the user reads: messages quoting typed text are Markdown-escaped (core.validate.plain)."""
    return [re.sub(r"\\(.)", r"\1", e.value) for e in elements]


@pytest.fixture(autouse=True)
def fresh_caches():
    clear_dashboard_caches()
    yield
    clear_dashboard_caches()


def open_app(run_id: str | None = None) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    if run_id is not None:
        at.session_state["selected_run_id"] = run_id
    return at.run()


@pytest.mark.slow  # the app through AppTest over several refusals: 4 s CPU
def test_oversized_playground_and_generator_parameters_are_refused_without_allocating(tmp_path, monkeypatch):
    monkeypatch.setenv("BNN_CACHE_DIR", str(tmp_path))
    at = open_app()
    at.switch_page("views/playground.py").run()
    assert not at.exception, [e.value for e in at.exception]
    at.text_input(key="play_hidden_toy-sine-gaps").input("12000, 12000").run()
    before = resident_bytes()
    at.text_input(key="play_hidden_toy-sine-gaps").input("35000, 35000").run()
    assert not at.exception  # past the widest layer any run may ask for (BNN_MAX_HIDDEN_WIDTH)
    assert any("width" in e and "35000" in e and "limit 4096" in e for e in texts(at.error)), texts(at.error)
    at.text_input(key="play_hidden_toy-sine-gaps").input("4000, 4000").run()
    assert not at.exception  # within that limit, the playground's own cost limit names what fits
    errors = texts(at.error)
    assert any(
        "Too large for the playground" in e and "widths 4000,4000 need" in e and "widths up to" in e for e in errors
    ), errors
    assert resident_bytes() - before < RSS_MARGIN_BYTES

    at.switch_page("views/train.py").run()
    at.selectbox(key="train_dataset").set_value("two-moons").run()
    for params, said in (
        ("n=1e9", "n=1000000000.0 is above the 100,000 points"),
        ("n=100000000", "n=100000000 is above the 100,000 points"),
        ("n_test=1000000", "n_test=1000000 is above the 100,000 points"),
    ):
        before = resident_bytes()
        at.text_input(key="train_params").input(params).run()
        assert not at.exception, [e.value for e in at.exception]
        errors = texts(at.error)
        assert any(said in e for e in errors), (params, errors)  # the generator's own rule, while typing
        assert at.button(key="train_button").disabled
        assert resident_bytes() - before < RSS_MARGIN_BYTES
    at.text_input(key="train_params").input("n=2000").run()
    assert not at.error and not at.button(key="train_button").disabled


@pytest.mark.slow
def test_R_beyond_the_budget_is_lowered_with_a_message(tmp_path, monkeypatch):
    from core.runs import RunConfig, train_run

    monkeypatch.setenv("BNN_CACHE_DIR", str(tmp_path))
    run_id = train_run(RunConfig(dataset="two-moons", hidden=(8,), train={"epochs": 2})).run_id
    # 500 test points x 2 classes: R = 100 is 100,000 values; this server keeps at most 10,000.
    monkeypatch.setenv("BNN_MAX_PREDICTION_VALUES", "10000")
    at = open_app(run_id)
    at.switch_page("views/pruning.py").run()
    at.selectbox(key=f"widget:mode:{run_id}").set_value("bma").run()
    before = resident_bytes()
    at.slider(key=f"widget:samples:{run_id}").set_value(100).run()
    assert not at.exception, [e.value for e in at.exception]
    warnings = texts(at.warning)
    assert any("R = 100 over 500 inputs" in w and "R up to 10 fits: showing R = 10" in w for w in warnings), warnings
    assert resident_bytes() - before < RSS_MARGIN_BYTES
    # Uncertainty also predicts its 60 x 60 decision surface: the largest input set sets the cap.
    at.switch_page("views/uncertainty.py").run()
    assert not at.exception, [e.value for e in at.exception]
    warnings = texts(at.warning)
    assert any("over 3,600 inputs" in w and "R up to 1 fits: showing R = 1" in w for w in warnings), warnings

"""The Uncertainty page's regression bands: both collapsed variants, and the NUTS reference overlay
when one is cached for the run's dataset (a stored reference written directly: no Pyro needed)."""

from __future__ import annotations

from pathlib import Path

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from tests.support import write_fake_reference

APP = Path(__file__).resolve().parent.parent / "dashboard" / "app.py"
TIMEOUT = 180


@pytest.fixture
def sine_run(tmp_path, monkeypatch):
    monkeypatch.setenv("BNN_CACHE_DIR", str(tmp_path))
    from core.runs import RunConfig, train_run

    run = train_run(RunConfig(dataset="toy-sine-gaps", hidden=(8,), train={"epochs": 2}))
    st.cache_data.clear()
    st.cache_resource.clear()
    yield tmp_path, run
    st.cache_data.clear()
    st.cache_resource.clear()


def open_uncertainty(run_id: str) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.session_state["selected_run_id"] = run_id
    at.run()
    return at.switch_page("views/uncertainty.py").run()


def assert_clean(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


def captions(at: AppTest) -> str:
    return "\n".join(c.value for c in at.caption)


@pytest.mark.slow  # trains three runs and a reference: 2.5 s CPU
def test_collapsed_variants_and_the_reference_overlay(sine_run):
    cache, run = sine_run
    at = open_uncertainty(run.run_id)
    assert_clean(at)
    assert "No NUTS reference is cached" in captions(at)
    radio = at.radio(key="predictive")
    assert list(radio.options) == ["mode (bma)", "collapsed", "collapsed-box"]
    for choice in ("collapsed", "collapsed-box"):
        radio.set_value(choice).run()
        assert_clean(at)
        assert "the threshold is not used" in captions(at) or "threshold is not used" in captions(at)
        assert len(at.get("vega_lite_chart")) >= 1
    ref_id = write_fake_reference(cache, run.dataset(), hidden=(8,))
    st.cache_data.clear()
    at = open_uncertainty(run.run_id)
    assert_clean(at)
    assert f"NUTS reference {ref_id}" in captions(at)
    assert any("ESS 40" in w.value for w in at.warning)
    chart = at.get("vega_lite_chart")[0]
    assert "NUTS reference" in str(chart.proto.spec)

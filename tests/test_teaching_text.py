"""The teaching text says what the app really does: the Playground names its network's size (counted from
the config) and its kept connections; the Inclusion page expects the bulk near psi; the estimate says
"1 epoch"."""

from __future__ import annotations

import numpy as np
from streamlit.testing.v1 import AppTest

from dashboard import explain
from tests.test_dashboard_app import APP, TIMEOUT, fresh_caches  # noqa: F401


def weights_of(widths: list[int]) -> int:
    """Weights and biases of a dense net with these layer widths (input first, output last)."""
    return sum(inputs * outputs + outputs for inputs, outputs in zip(widths, widths[1:]))


def stop_playground(at: AppTest) -> None:
    job = at.session_state["playground_job"] if "playground_job" in at.session_state else None
    if job is not None:
        job[1].cancel()


def test_the_playground_says_how_large_its_default_network_is(tmp_path, monkeypatch):
    monkeypatch.setenv("BNN_CACHE_DIR", str(tmp_path))
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT).run()
    at.switch_page("views/playground.py").run()
    try:
        assert not at.exception
        expected = weights_of([1, 64, 64, 1])  # toy-sine-gaps: 1 input, the default 64-64 net, 1 output
        assert expected == 4353
        captions = [c.value for c in at.caption]
        assert any(f"{expected:,} weights" in c and "64 x 64" in c for c in captions), captions
        at.text_input(key="play_hidden_toy-sine-gaps").input("5").run()
        captions = [c.value for c in at.caption]
        assert any(f"{weights_of([1, 5, 1]):,} weights" in c for c in captions), captions
    finally:
        stop_playground(at)
    assert "few hundred" not in explain.PAGE_INTROS["playground"]


def test_kept_connections_are_counted_from_the_masks():
    from dashboard.playground_training import kept_text

    masks = [np.array([[1, 0, 1], [0, 0, 1]], bool), np.array([[1], [0], [0]], bool)]
    assert kept_text({"masks": masks, "default": 0.5}) == "Kept at the default cut (0.5): 4 of 9 connections (44.4%)."


def test_the_inclusion_text_expects_the_bulk_near_psi():
    text = explain.PAGE_INTROS["inclusion"]
    assert "two spikes" not in text and "near the prior's psi" in text


def test_one_epoch_is_singular(tmp_path, monkeypatch):
    monkeypatch.setenv("BNN_CACHE_DIR", str(tmp_path))
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT).run()
    at.selectbox(key="train_dataset").set_value("two-moons").run()
    at.text_input(key="train_epochs").input("1").run()
    captions = [c.value for c in at.caption if c.value.startswith("Estimate:")]
    assert captions and "1 epoch takes about" in captions[0] and "1 epochs" not in captions[0], captions
    at.text_input(key="train_epochs").input("2").run()
    captions = [c.value for c in at.caption if c.value.startswith("Estimate:")]
    assert "2 epochs take about" in captions[0]

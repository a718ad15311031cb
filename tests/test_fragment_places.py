"""Polled fragments stand at the same place in every script run.

A fragment's place (its delta path) is fixed when a script run defines it, and a poll of a fragment
defined by an earlier run writes at that run's place. When something before a fragment appeared in
one run and not the next (a link's refusal, the weights radio of mode prune), the poll wrote past the
end of the page: the browser failed on the delta ("Bad delta path index 14 (should be between
[0, 13])"), closed its websocket and went blank (benchmarks/results/browser_class.md). These tests
record where each fragment is defined across runs that differ in what appears before it."""

from __future__ import annotations

from collections import defaultdict

import pytest
from streamlit.runtime import fragment as fragment_module
from streamlit.testing.v1 import AppTest

from tests import test_dashboard_views
from tests.test_dashboard_app import APP, TIMEOUT, assert_clean, fresh_caches  # noqa: F401
from tests.test_dashboard_views import train_small_from_the_form

# the views tests' fixtures: a store of tiny runs (module scope), a training held until released
store = test_dashboard_views.store
held_training = test_dashboard_views.held_training


@pytest.fixture
def fragment_places(monkeypatch):
    """{fragment function name: the delta paths it was defined at}, for every run while the test runs."""
    places: dict[str, set[str]] = defaultdict(set)
    real = fragment_module._make_fragment_identity

    def recording(func, *, delta_path, additional_hash_info):
        places[func.__qualname__].add(delta_path)
        return real(func, delta_path=delta_path, additional_hash_info=additional_hash_info)

    monkeypatch.setattr(fragment_module, "_make_fragment_identity", recording)
    return places


def pruning_page(run_id: str, **params: str) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.query_params.update({"run": run_id, "page": "pruning", **params})
    return at.run()


def test_pruning_fragments_stand_still_while_what_is_before_them_changes(store, fragment_places):
    run_id = store["mnist"]
    # A refused link value: a warning above the page in the first run only.
    at = pruning_page(run_id, mode="prune", weights="sample", R="4", threshold="not-a-number")
    assert any("threshold" in w.value for w in at.warning), [w.value for w in at.warning]
    at.run()  # the refusal is gone
    assert not any("threshold" in w.value for w in at.warning)
    assert_clean(at)
    mode = at.selectbox(key=f"widget:mode:{run_id}")
    mode.set_value("bma").run()  # the weights radio goes: one element fewer before the cards
    assert not at.radio
    assert_clean(at)
    at.selectbox(key=f"widget:mode:{run_id}").set_value("prune").run()
    at.radio(key=f"widget:weights:{run_id}").set_value("mean").run()  # no accuracy-vs-R chart
    assert_clean(at)
    # The page's body (one fragment: a control's move reruns it alone) at one place, and within it the two
    # polled fragments (the cards, accuracy vs R; one function) at two places, in all runs.
    assert fragment_places["page_body"] == {"[0, 2, 3]"}, dict(fragment_places)
    assert fragment_places["refining.<locals>.part"] == {"[0, 2, 3, 2, 0]", "[0, 2, 3, 4, 0]"}, dict(fragment_places)


def test_the_page_starts_at_the_same_place_with_or_without_a_refusal(store, fragment_places):
    """The app's own messages (a refused link, an error) sit in a slot of their own above the page."""
    run_id = store["mnist"]
    refused = pruning_page(run_id, R="not-a-number")
    clean = pruning_page(run_id)
    assert any("R" in w.value for w in refused.warning)
    assert len(refused.main.children) == len(clean.main.children)  # starting, notices, page
    assert fragment_places["page_body"] == {"[0, 2, 3]"}, dict(fragment_places)
    assert fragment_places["refining.<locals>.part"] == {"[0, 2, 3, 2, 0]"}, dict(fragment_places)  # the cards


def test_the_training_progress_stands_still_while_the_form_shows_errors(held_training, store, fragment_places):
    at = train_small_from_the_form(store["moons"])
    assert at.button(key="cancel_training")  # the progress is drawn: its fragment was defined
    at.text_input(key="train_epochs").input("3").run()
    at.button(key="train_button").click().run()  # a second training, queued behind the first
    at.text_input(key="train_epochs").input("4").run()  # a third: refused, said above the progress
    assert any("cancel one or wait" in e.value for e in at.error), [e.value for e in at.error]
    assert at.button(key="cancel_training")
    assert len(fragment_places["training_progress"]) == 1, dict(fragment_places)
    assert len(fragment_places["_training_status_fragment"]) == 1, dict(fragment_places)  # the sidebar's line
    held_training.set()


@pytest.mark.slow  # two playground trainings in the background
def test_the_playground_picture_stands_still_when_the_family_changes(tmp_path, monkeypatch, fragment_places):
    monkeypatch.setenv("BNN_CACHE_DIR", str(tmp_path))
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.run()
    at.switch_page("views/playground.py").run()
    at.slider(key="play_epochs").set_value(3000).run()  # long enough to be polled through both runs
    assert at.slider(key="play_psi")  # lbbnn's prior slider, before the picture
    at.selectbox(key="play_method").set_value("sparse-vd").run()  # no prior slider
    assert not [s for s in at.slider if s.key == "play_psi"]
    assert_clean(at)
    at.session_state["playground_job"][1].cancel()
    assert len(fragment_places["live"]) == 1, dict(fragment_places)


def test_a_page_body_logs_its_own_fragment_runs_and_leaves_full_runs_to_the_app(monkeypatch):
    """ui.body_fragment: a full run calls the body inline (app.py logs the whole run); a run of the body
    alone is logged once through the rerun logger, even when the body stops itself (st.stop)."""
    from streamlit.runtime.scriptrunner_utils.exceptions import StopException

    from dashboard import streamlit_compat, ui

    monkeypatch.setattr(ui.st, "fragment", lambda func: func)  # the decorator's own part, outside a server
    logged: list[tuple] = []
    monkeypatch.setattr(ui, "rerun_logger", lambda *line: logged.append(line))
    fragment_only = {"now": False}
    monkeypatch.setattr(streamlit_compat, "fragment_only_run", lambda: fragment_only["now"])
    calls: list[str] = []

    @ui.body_fragment("pruning")
    def page_body() -> None:
        calls.append("body")
        if len(calls) == 3:
            raise StopException()

    assert page_body.__qualname__.endswith("page_body")  # the fragment's identity is the body's name
    page_body()
    assert calls == ["body"] and logged == []  # a full run: not logged here
    fragment_only["now"] = True
    page_body()
    assert len(logged) == 1
    started, ended, cpu, page = logged[0]
    assert page == "pruning" and ended >= started and cpu >= 0
    with pytest.raises(StopException):
        page_body()
    assert len(logged) == 2 and calls == ["body"] * 3
    monkeypatch.setattr(ui, "rerun_logger", None)  # no log: nothing logged, the body still runs
    calls.clear()
    page_body()
    assert calls == ["body"] and len(logged) == 2

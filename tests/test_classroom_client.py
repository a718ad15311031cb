"""The load tests' protocol client sends a move as a browser does: a change of widgets drawn in one
st.fragment reruns that fragment alone; anything else (a page switch, widgets of no fragment or of two)
reruns the whole page. A fragment move's run then answers `find`, being the newer drawing."""

from __future__ import annotations

from types import SimpleNamespace

from benchmarks.classroom.client import RunResult, Session, slider_state


def _session(**kwargs) -> Session:
    session = Session(0, "http://127.0.0.1:1", "run1", **kwargs)
    session.widget_fragments = {"threshold": "body", "samples": "body", "sidebar-run": "", "cards-toggle": "cards"}
    return session


def test_a_move_inside_one_fragment_reruns_that_fragment():
    session = _session()
    assert session.moved_fragment(None, {"threshold": slider_state("threshold", [0.5])}) == "body"
    both = {"threshold": slider_state("threshold", [0.5]), "samples": slider_state("samples", [5.0])}
    assert session.moved_fragment(None, both) == "body"


def test_anything_else_reruns_the_whole_page():
    session = _session()
    assert session.moved_fragment("Pruning", {"threshold": slider_state("threshold", [0.5])}) is None  # page switch
    assert session.moved_fragment(None, None) is None  # a plain rerun
    assert session.moved_fragment(None, {"sidebar-run": slider_state("sidebar-run", [1.0])}) is None  # no fragment
    assert session.moved_fragment(None, {"never-drawn": slider_state("never-drawn", [1.0])}) is None
    two = {"threshold": slider_state("threshold", [0.5]), "cards-toggle": slider_state("cards-toggle", [1.0])}
    assert session.moved_fragment(None, two) is None  # widgets of two fragments: the browser reruns the page
    off = _session(fragment_moves=False)
    assert off.moved_fragment(None, {"threshold": slider_state("threshold", [0.5])}) is None


def _result(*elements) -> RunResult:
    result = RunResult()
    result.elements = [(kind, SimpleNamespace(label=label, value=value)) for kind, label, value in elements]
    return result


def test_find_reads_a_fragment_move_s_newer_widgets_first():
    session = _session()
    session.last = _result(("slider", "threshold on", 0.3), ("slider", "Posterior samples R", 10))
    assert session.find("slider", "threshold").value == 0.3
    session.fragment_last = _result(("slider", "threshold on", 0.6))
    assert session.find("slider", "threshold").value == 0.6  # the body's own run drew it again
    assert session.find("slider", "Posterior samples").value == 10  # not redrawn there: the full run's
    assert session.find("radio", "Weights") is None

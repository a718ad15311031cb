"""The lesson panel in the app (dashboard/lesson_panel.py): ?lesson=NAME&step=K opens a lesson's
step as a link (its run, its view, its page), Back / Next walk it, ?hide= hides controls, and bad
values are refused with one message each, never breaking the session."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from tests.support import clear_dashboard_caches
from tests.test_dashboard_app import APP, TIMEOUT
from tests.test_dashboard_links import assert_healthy, link_warnings

LESSON = """
title = "A test lesson"

[[step]]
page = "uncertainty"
title = "First look"
text = "Read **this**."
run = { dataset = "two-moons", hidden = [8], train = { epochs = 2 } }
view = { threshold = 0.3, R = 7, mode = "prune" }
hide = ["seed"]

[[step]]
page = "inclusion"
title = "Second look"
text = "Then this."
run = { dataset = "two-moons", hidden = [8], train = { epochs = 2 } }

[[step]]
page = "pruning"
title = "Untrained"
text = "A run nobody trained."
run = { dataset = "two-moons", hidden = [5], train = { epochs = 2 } }
"""


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    from core import lessons
    from core.runs import RunConfig, train_run

    clear_dashboard_caches()
    folder = tmp_path_factory.mktemp("lessons")
    (folder / "walk.toml").write_text(LESSON)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("BNN_CACHE_DIR", str(tmp_path_factory.mktemp("bnn-cache")))
        patch.setattr(lessons, "LESSONS_DIR", folder)
        yield train_run(RunConfig(dataset="two-moons", hidden=(8,), train={"epochs": 2})).run_id
    clear_dashboard_caches()


def open_address(params: dict[str, str]) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    for key, value in params.items():
        at.query_params[key] = value
    return at.run()


def panel_text(at: AppTest) -> str:
    return (
        " ".join(str(c.value) for c in at.sidebar.caption) + " " + " ".join(str(m.value) for m in at.sidebar.markdown)
    )


def param(at: AppTest, name: str):
    value = at.query_params.get(name)
    return value[0] if isinstance(value, list) else value


@pytest.mark.slow
def test_a_lesson_link_opens_its_first_step_as_a_link(store):
    at = open_address({"lesson": "walk"})
    assert_healthy(at)
    text = panel_text(at)
    assert "A test lesson" in text and "Step 1 of 3: First look" in text and "Read **this**." in text
    # the step's run and view, applied as a shared link applies them
    assert at.slider(key=f"widget:samples:{store}").value == 7
    assert at.slider(key=f"widget:threshold:{store}").value == pytest.approx(0.3)
    assert at.selectbox(key=f"widget:mode:{store}").value == "prune"
    assert param(at, "step") == "1" and param(at, "run") == store

    at.sidebar.button(key="lesson_next").click().run()
    assert_healthy(at)
    assert "Step 2 of 3: Second look" in panel_text(at) and param(at, "step") == "2"
    assert at.slider(key=f"playback_epoch:{store}") is not None  # the Inclusion page is drawn

    at.sidebar.button(key="lesson_next").click().run()
    assert_healthy(at)
    assert "Step 3 of 3" in panel_text(at)
    assert any("not trained yet" in str(i.value) for i in at.sidebar.info)
    assert at.sidebar.button(key="lesson_next").disabled

    at.sidebar.button(key="lesson_back").click().run()
    assert "Step 2 of 3" in panel_text(at)
    at.sidebar.button(key="lesson_leave").click().run()
    assert_healthy(at)
    assert "Step" not in panel_text(at) and param(at, "lesson") is None


@pytest.mark.slow
@pytest.mark.parametrize(
    "params,refused",
    [
        ({"lesson": "../walk"}, "lesson"),
        ({"lesson": "[click](http://evil)"}, "lesson"),
        ({"lesson": "nope"}, "lesson"),
        ({"lesson": "walk", "step": "9"}, "step"),
        ({"lesson": "walk", "step": "-1"}, "step"),
        ({"step": "2"}, "step"),
        ({"hide": "everything"}, "hide"),
        ({"hide": "seed;rm"}, "hide"),
    ],
)
def test_bad_lesson_values_are_refused_once_and_the_session_stays_whole(store, params, refused):
    at = open_address(params)
    assert_healthy(at)
    assert len(link_warnings(at, refused)) == 1
    if refused == "step" and "lesson" in params:  # a bad step opens the lesson at its first step
        assert "Step 1 of 3" in panel_text(at) and param(at, "step") == "1"
    else:
        assert param(at, refused) is None


def test_hide_names_are_checked_by_one_parser():
    from core.errors import InputError
    from dashboard.lesson_panel import parse_hide

    assert parse_hide("seed,method") == ("seed", "method")
    assert parse_hide("") == ()
    for bad in ("seed,everything", "SEED", "seed method", "x" * 1000):
        with pytest.raises(InputError, match="^hide: "):
            parse_hide(bad)


@pytest.mark.slow
def test_hidden_controls_are_not_drawn_and_keep_their_values(store):
    at = open_address({"hide": "samples,mode,sidebar_runs", "run": store, "page": "uncertainty", "R": "7"})
    assert_healthy(at)
    for widget, key in ((at.slider, f"widget:samples:{store}"), (at.selectbox, f"widget:mode:{store}")):
        with pytest.raises(KeyError):
            widget(key=key)
    assert not [s for s in at.sidebar.selectbox if s.label == "Current run"]
    assert param(at, "R") == "7"  # the linked value still applies, undrawn
    # the Train page's form: hidden seed, method and Train button are not drawn
    train = open_address({"hide": "seed,method,train_button"})
    assert_healthy(train)
    assert not [b for b in train.button if b.key == "train_button"]
    assert not [s for s in train.selectbox if s.key == "train_method"]
    assert not [t for t in train.text_input if t.key == "train_seed"]
    shown = open_address({})
    assert [b for b in shown.button if b.key == "train_button"]
    assert [s for s in shown.selectbox if s.key == "train_method"]

"""The Train form remembers its choices across pages, and "train the same with another family / seed"
fills it from the current run's config with only the family or seed changed (dashboard/form_memory.py)."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from tests.test_dashboard_app import APP, TIMEOUT, fresh_caches  # noqa: F401
from tests.test_dashboard_forms import config_after_train


@pytest.fixture
def moons_run(tmp_path, monkeypatch):
    """A tiny two-moons run whose config leaves the defaults almost everywhere a form could lose them:
    a non-default seed, generator parameters, a family option, a tempered KL, a schedule."""
    from core.runs import RunConfig, train_run

    monkeypatch.setenv("BNN_CACHE_DIR", str(tmp_path))
    config = RunConfig(
        dataset="two-moons",
        dataset_params={"n": 60, "noise": 0.2},
        hidden=(4, 3),
        seed=3,
        family_options={"prior_inclusion": 0.2},
        train={"epochs": 2, "batch_size": 30, "kl_weight": 0.3, "lr_schedule": "cosine", "kl_anneal_epochs": 1},
    )
    return train_run(config)


def open_train_page(run_id: str | None = None) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    if run_id is not None:
        at.session_state["selected_run_id"] = run_id
    return at.run()


TYPED = {
    "train_hidden": "5, 2",
    "train_epochs": "7",
    "train_batch": "20",
    "train_kl_weight": "0.25",
    "train_seed": "11",
    "train_params": "n=80",
}


def test_the_form_keeps_its_choices_across_pages(tmp_path, monkeypatch):
    monkeypatch.setenv("BNN_CACHE_DIR", str(tmp_path))
    at = open_train_page()
    at.selectbox(key="train_dataset").set_value("two-moons").run()
    at.selectbox(key="train_method").set_value("bnn").run()
    for key, text in TYPED.items():
        at.text_input(key=key).input(text).run()
    at.selectbox(key="train_lr_schedule").set_value("cosine").run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    for page in ("views/glossary.py", "views/playground.py", "views/train.py"):
        at.switch_page(page).run()
        assert not at.exception
    assert at.selectbox(key="train_dataset").value == "two-moons"
    assert at.selectbox(key="train_method").value == "bnn"
    assert at.selectbox(key="train_lr_schedule").value == "cosine"
    for key, text in TYPED.items():
        assert at.text_input(key=key).value == text, key
    # and what it submits is what was chosen before the visit
    config = config_after_train(at, monkeypatch)
    assert (config.dataset, config.method, config.hidden, config.seed) == ("two-moons", "bnn", (5, 2), 11)
    assert (config.train.epochs, config.train.batch_size, config.train.kl_weight) == (7, 20, 0.25)
    assert config.dataset_params == {"n": 80}


def submitted_after_fill(run, monkeypatch, family: str | None = None, seed: str | None = None):
    at = open_train_page(run.run_id)
    at.switch_page("views/glossary.py").run()  # filled from another page's visit: the form is not drawn
    at.switch_page("views/train.py").run()
    if family is not None:
        at.selectbox(key="again_family").set_value(family).run()
    if seed is not None:
        at.text_input(key="again_seed").input(seed).run()
    at.button(key="again_fill").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    return at, config_after_train(at, monkeypatch)


def test_another_seed_fills_the_form_exactly_from_the_run(moons_run, monkeypatch):
    from core.runs import RunConfig

    at, config = submitted_after_fill(moons_run, monkeypatch, seed="9")
    expected = RunConfig.from_dict({**moons_run.config.to_dict(), "seed": 9})
    assert config.to_dict() == expected.to_dict()
    # the boxes show the run's settings (what the reader sees is what is submitted)
    assert at.text_input(key="train_hidden").value == "4, 3"
    assert at.text_input(key="train_seed").value == "9"
    assert at.text_input(key="train_opt_lbbnn_prior_inclusion").value == "0.2"


def test_the_same_seed_reproduces_the_run(moons_run, monkeypatch):
    _, config = submitted_after_fill(moons_run, monkeypatch, seed="3")
    assert config.to_dict() == moons_run.config.to_dict()  # the same config: the same run id


def test_another_family_keeps_everything_but_the_family_options(moons_run, monkeypatch):
    from core.runs import RunConfig

    _, config = submitted_after_fill(moons_run, monkeypatch, family="bnn")
    expected = RunConfig.from_dict(
        {**moons_run.config.to_dict(), "method": "bnn", "family_options": {}, "seed": moons_run.config.seed + 1}
    )
    assert config.to_dict() == expected.to_dict()


def test_a_reload_of_the_same_browser_finds_the_form_as_it_was(tmp_path, monkeypatch):
    """A reload is a new Streamlit session; the browser (state.session_owner, from its XSRF cookie) is
    the same, and so is the form. Another browser gets the defaults."""
    monkeypatch.setenv("BNN_CACHE_DIR", str(tmp_path))

    def session_of(owner: str) -> AppTest:
        at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
        at.session_state["session_owner"] = owner  # what state.session_owner derives from the cookie
        return at.run()

    first = session_of("browser:reload-test")
    first.selectbox(key="train_dataset").set_value("two-moons").run()
    first.text_input(key="train_epochs").input("7").run()
    reloaded = session_of("browser:reload-test")
    assert reloaded.selectbox(key="train_dataset").value == "two-moons"
    assert reloaded.text_input(key="train_epochs").value == "7"
    other = session_of("browser:someone-else")
    assert other.selectbox(key="train_dataset").value != "two-moons"
    assert other.text_input(key="train_epochs").value == "0"
    tab = session_of("session:no-cookie")  # a browser not recognised: its session's own memory only
    assert tab.text_input(key="train_epochs").value == "0"


def test_the_server_keeps_a_bounded_number_of_browsers(monkeypatch):
    from dashboard import form_memory

    monkeypatch.setenv("BNN_FORM_MEMORY_BROWSERS", "2")
    monkeypatch.setattr(form_memory, "_browsers", type(form_memory._browsers)())
    for owner in ("browser:a", "browser:b", "browser:c"):
        form_memory.browser_memory(owner)["train_epochs"] = owner
    assert list(form_memory._browsers) == ["browser:b", "browser:c"]
    assert form_memory.browser_memory("browser:b")["train_epochs"] == "browser:b"


def test_a_remembered_choice_no_longer_offered_falls_back_to_the_default(tmp_path, monkeypatch):
    monkeypatch.setenv("BNN_CACHE_DIR", str(tmp_path))
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.session_state["train_form_memory"] = {"train_dataset": "a-table-since-deleted", "train_method": "gone"}
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.selectbox(key="train_dataset").value == "mnist-small"
    assert at.selectbox(key="train_method").value == "lbbnn"

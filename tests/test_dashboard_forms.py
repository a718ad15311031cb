"""The Train form's boxes take what was typed exactly or refuse it beside the box; generator parameters
are checked as they are typed by the generator's own rules; no page shows an absolute server path."""

from __future__ import annotations

import re

import pytest
from streamlit.testing.v1 import AppTest

from tests.test_dashboard_app import APP, TIMEOUT, fresh_caches  # noqa: F401


def unescaped(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text)


def errors(at: AppTest) -> list[str]:
    return [unescaped(e.value) for e in at.error]


@pytest.fixture
def form(tmp_path, monkeypatch) -> AppTest:
    monkeypatch.setenv("BNN_CACHE_DIR", str(tmp_path))
    return AppTest.from_file(str(APP), default_timeout=TIMEOUT).run()


def config_after_train(at: AppTest, monkeypatch):
    """The RunConfig the Train button submits (caught at the training queue: nothing trains)."""
    from core.errors import BNNError

    submitted = []

    class Queue:
        def submit(self, key, config, *args, **kwargs):
            submitted.append(config)
            raise BNNError("caught by the test")

    monkeypatch.setattr("dashboard.cache.training_queue", lambda: Queue())
    at.button(key="train_button").click().run()
    assert len(submitted) == 1, [e.value for e in at.error]
    return submitted[0]


@pytest.mark.parametrize(
    "key, text, message",
    [
        ("train_epochs", "1e9", "Epochs: '1e9' is out of range; give a whole number from 0 to 100000"),
        pytest.param("train_epochs", "1e20", "Epochs: '1e20' is out of range", marks=pytest.mark.slow),
        ("train_epochs", "abc", "Epochs: give a whole number from 0 to 100000, got 'abc'"),
        pytest.param("train_epochs", "2.5", "Epochs: give a whole number", marks=pytest.mark.slow),
        ("train_batch", "1e20", "Batch size: '1e20' is out of range; give a whole number from 1 to 1000000"),
        pytest.param("train_posttrain", "-1", "Post-training epochs: '-1' is out of range", marks=pytest.mark.slow),
        ("train_kl_weight", "0.0004", "KL weight: '0.0004' is out of range"),
        pytest.param(
            "train_seed",
            "-3",
            "Seed: '-3' is out of range; give a whole number from 0 to 4294967295",
            marks=pytest.mark.slow,
        ),
        ("train_opt_lbbnn_prior_inclusion", "1e300", "Prior inclusion probability psi (prior_inclusion): must lie in"),
    ],
)
def test_a_number_box_refuses_beside_itself_and_keeps_what_was_typed(form, key, text, message):
    box = form.text_input(key=key)
    box.input(text).run()
    assert not form.exception
    assert any(e.startswith(message) for e in errors(form)), errors(form)
    assert len(errors(form)) == 1  # beside the box, not again below the form
    assert form.text_input(key=key).value == text  # never replaced
    assert form.button(key="train_button").disabled


def test_typed_numbers_reach_training_exactly(form, monkeypatch):
    form.selectbox(key="train_dataset").set_value("two-moons").run()
    for key, text in (
        ("train_epochs", "1e3"),
        ("train_batch", "64"),
        ("train_kl_weight", "0.25"),
        ("train_params", "n=60, noise=0.2"),
        ("train_hidden", "4"),
    ):
        form.text_input(key=key).input(text).run()
    assert not form.error and not form.button(key="train_button").disabled
    config = config_after_train(form, monkeypatch)
    assert config.train.epochs == 1000 and config.train.batch_size == 64 and config.train.kl_weight == 0.25
    assert config.dataset_params == {"n": 60, "noise": 0.2}


@pytest.mark.parametrize(
    "text, message",
    [
        (
            "bogus=3",
            "Generator parameters: dataset 'two-moons' does not take parameter(s) bogus; valid parameters "
            "(with defaults): n=500, noise=0.1, n_test=500",
        ),
        ("noise=abc", "Generator parameters: two-moons: noise must be a finite number >= 0, got 'abc'"),
        ("n=-5", "Generator parameters: two-moons: n must be an integer >= 2, got -5"),
        ("foo", "Generator parameters: write name=value (KEY=VALUE), got 'foo'"),
    ],
)
def test_generator_parameters_are_checked_as_they_are_typed(form, text, message):
    form.selectbox(key="train_dataset").set_value("two-moons").run()
    form.text_input(key="train_params").input(text).run()
    assert not form.exception
    assert errors(form) == [message]
    assert form.button(key="train_button").disabled
    assert "training_worker" not in form.session_state


def test_the_train_page_names_no_server_path(tmp_path, monkeypatch):
    monkeypatch.setenv("BNN_CACHE_DIR", str(tmp_path))
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT).run()
    at.selectbox(key="train_dataset").set_value("mnist-small").run()
    from dashboard.ui import PROJECT_ROOT

    shown = [e.value for kind in ("markdown", "caption", "error", "warning", "info") for e in at.get(kind)]
    shown += [str(o) for s in at.selectbox for o in s.options] + [s.help or "" for s in at.selectbox]
    for text in shown:
        assert str(tmp_path) not in unescaped(text) and str(PROJECT_ROOT) not in unescaped(text), text


def test_messages_from_core_name_no_server_path(tmp_path, monkeypatch):
    monkeypatch.setenv("BNN_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("BNN_DATA_DIR", str(tmp_path / "data-dir"))
    from dashboard.ui import PROJECT_ROOT, without_server_paths

    assert (
        without_server_paths(f"run ab: {tmp_path}/runs/ab/manifest.json is missing")
        == "run ab: the run store/ab/manifest.json is missing"
    )
    assert without_server_paths(f"cannot read {tmp_path}/data-dir/uci/x.csv") == "cannot read $BNN_DATA_DIR/uci/x.csv"
    assert without_server_paths(f"subset {PROJECT_ROOT}/core/data/bundled/m.npz") == "subset core/data/bundled/m.npz"
    assert (
        without_server_paths("cannot read '/srv/elsewhere/train.csv'; see https://example.org/a/b")
        == "cannot read '.../train.csv'; see https://example.org/a/b"
    )

"""The Streamlit app under streamlit.testing.v1.AppTest, with tiny runs in a temporary store."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from tests.support import clear_dashboard_caches

APP = Path(__file__).resolve().parent.parent / "dashboard" / "app.py"
PAGES = ("views/inclusion.py", "views/pruning.py", "views/uncertainty.py")
TIMEOUT = 180


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A store with three tiny runs: two-moons, mnist-small and a 1-D regression toy."""
    from core.runs import RunConfig, train_run

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("BNN_CACHE_DIR", str(tmp_path_factory.mktemp("bnn-cache")))
        yield {
            "moons": train_run(RunConfig(dataset="two-moons", hidden=(8,), train={"epochs": 2})).run_id,
            "mnist": train_run(
                RunConfig(dataset="mnist-small", hidden=(8,), train={"epochs": 1, "batch_size": 500})
            ).run_id,
            "sine": train_run(RunConfig(dataset="toy-sine-gaps", hidden=(8,), train={"epochs": 2})).run_id,
        }


@pytest.fixture(autouse=True)
def fresh_caches():
    """Streamlit caches are process-wide: no test may see another store's runs."""
    clear_dashboard_caches()
    yield
    clear_dashboard_caches()


def open_app(run_id: str | None = None) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    if run_id is not None:
        at.session_state["selected_run_id"] = run_id
    return at.run()


def assert_clean(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


def metric_value(at: AppTest, label: str) -> str:
    matches = [m.value for m in at.metric if m.label == label]
    assert matches, f"no metric {label!r}; have {[m.label for m in at.metric]}"
    return matches[0]


@pytest.mark.parametrize("name", ["moons", "mnist", "sine"])
def test_every_page_renders_without_errors(store, name):
    at = open_app(store[name])
    assert_clean(at)
    assert at.session_state["selected_run_id"] == store[name]
    for page in PAGES:
        at.switch_page(page).run()
        assert_clean(at)
        assert not at.info or all("No run selected" not in i.value for i in at.info)


def test_inclusion_density_table_follows_the_threshold(store):
    from core.runs import load_run

    model = load_run(store["mnist"]).model
    at = open_app(store["mnist"])
    at.switch_page("views/inclusion.py").run()
    assert_clean(at)
    for threshold in (0.5, 0.8):
        slider = at.slider(key=f"widget:threshold:{store['mnist']}")
        slider.set_value(threshold).run()
        assert_clean(at)
        table = at.dataframe[0].value
        table = getattr(table, "data", table)  # a Styler or a DataFrame
        overall = table.set_index("layer").loc["all"]
        expected = model.density(model.keep_masks(threshold))
        assert overall["density"] == pytest.approx(expected)
        assert overall["total"] == model.n_weights()


def test_pruning_cards_match_a_direct_prediction(store):
    from core.predict import predict
    from core.runs import load_run

    run = load_run(store["mnist"])
    dataset = run.dataset()
    at = open_app(store["mnist"])
    at.switch_page("views/pruning.py").run()
    assert_clean(at)
    # The page opens in prune with mean weights: the mode the threshold acts on.
    assert at.selectbox(key=f"widget:mode:{store['mnist']}").value == "prune"
    assert at.radio(key=f"widget:weights:{store['mnist']}").value == "mean"
    at.slider(key=f"widget:threshold:{store['mnist']}").set_value(0.7).run()
    assert_clean(at)
    expected = predict(run, dataset.x_test, mode="prune", threshold=0.7, weights="mean")
    accuracy = float(np.mean(expected.probs.argmax(1) == dataset.y_test))
    assert metric_value(at, "accuracy") == f"{accuracy:.4f}"
    assert metric_value(at, "density") == f"{expected.density:.4f}"
    # mpm-mean is the median probability model: the family's default cut, whatever the slider says
    at.selectbox(key=f"widget:mode:{store['mnist']}").set_value("mpm-mean").run()
    assert_clean(at)
    median = predict(run, dataset.x_test, mode="mpm-mean", threshold=run.model.spec.default_threshold)
    assert metric_value(at, "accuracy") == f"{float(np.mean(median.probs.argmax(1) == dataset.y_test)):.4f}"
    assert metric_value(at, "density") == f"{median.density:.4f}"
    assert at.slider(key=f"widget:threshold:{store['mnist']}").disabled
    assert at.slider(key=f"widget:samples:{store['mnist']}").disabled  # mpm-mean draws nothing


@pytest.mark.slow  # every page, twice: 3 s CPU
def test_settings_survive_a_page_switch(store):
    at = open_app(store["moons"])
    at.switch_page("views/pruning.py").run()
    at.radio(key=f"widget:weights:{store['moons']}").set_value("sample").run()
    at.slider(key=f"widget:samples:{store['moons']}").set_value(7).run()
    at.slider(key=f"widget:threshold:{store['moons']}").set_value(0.3).run()
    at.switch_page("views/uncertainty.py").run()
    assert_clean(at)
    assert at.slider(key=f"widget:samples:{store['moons']}").value == 7
    assert at.slider(key=f"widget:threshold:{store['moons']}").value == pytest.approx(0.3)


def test_ood_table_lists_every_set_with_an_auroc(store):
    at = open_app(store["mnist"])
    at.switch_page("views/uncertainty.py").run()
    assert_clean(at)
    tables = [getattr(d.value, "data", d.value) for d in at.dataframe]
    (ood,) = [t for t in tables if "OOD set" in t.columns]
    assert list(ood["OOD set"]) == ["fashion-mnist-small", "uniform-noise", "inverted", "rotated"]
    # Each AUROC against a hand computation from the page's own settings: entropies of the same
    # prediction on the test set and on the OOD inputs, then the fraction of (in, out) pairs where
    # the OOD input has the higher entropy (ties count one half).
    from core.data import load_ood
    from core.predict import predict
    from core.runs import load_run

    run_id = store["mnist"]
    mode = at.selectbox(key=f"widget:mode:{run_id}").value
    samples = at.slider(key=f"widget:samples:{run_id}").value
    assert mode == "bma"  # the default: no threshold enters the prediction
    run = load_run(run_id)
    dataset = run.dataset()

    def entropy(x):
        probs = np.asarray(predict(run, x, mode, samples=samples, seed=0).probs, dtype=np.float64)
        return -np.sum(np.where(probs > 0, probs * np.log(np.where(probs > 0, probs, 1.0)), 0.0), axis=1)

    scores_in = entropy(dataset.x_test)
    for row in ood.to_dict("records"):
        scores_out = entropy(load_ood(dataset, row["OOD set"], seed=0, n=min(1000, len(dataset.x_test))))
        above = (scores_out[None, :] > scores_in[:, None]).sum() + 0.5 * (
            scores_out[None, :] == scores_in[:, None]
        ).sum()
        assert row["inputs"] == len(scores_out)
        assert row["mean entropy"] == pytest.approx(scores_out.mean(), rel=1e-6)
        assert row["AUROC (entropy)"] == pytest.approx(above / (len(scores_in) * len(scores_out)), abs=1e-9), row


def test_empty_store_opens_on_the_train_page(tmp_path, monkeypatch):
    monkeypatch.setenv("BNN_CACHE_DIR", str(tmp_path))
    at = open_app()
    assert_clean(at)
    assert any("Train" in h.value for h in at.header)
    assert at.selectbox(key="train_dataset").value == "mnist-small"
    assert at.session_state["selected_run_id"] is None
    for page in PAGES:
        at.switch_page(page).run()
        assert not at.exception
        assert any("No run selected" in i.value for i in at.info)


def test_bad_hyperparameters_show_an_error_message_not_a_traceback(tmp_path, monkeypatch):
    monkeypatch.setenv("BNN_CACHE_DIR", str(tmp_path))
    at = open_app()
    at.text_input(key="train_hidden").input("8, lots").run()
    assert not at.exception
    assert any("hidden" in e.value and "lots" in e.value for e in at.error)
    assert at.button(key="train_button").disabled

    at.text_input(key="train_hidden").input("8").run()
    at.text_input(key="train_lr_weights").input("-1").run()
    # validated as you type: the message at once, Train disabled, nothing started
    assert not at.exception
    assert any("learning\\_rates\\.weights" in e.value for e in at.error), [e.value for e in at.error]
    assert at.button(key="train_button").disabled
    assert "training_worker" not in at.session_state

    at.text_input(key="train_lr_weights").input("1e-2").run()
    assert not at.error and not at.button(key="train_button").disabled
    at.text_input(key="train_opt_lbbnn_prior_inclusion").input("1.5").run()
    assert not at.exception
    assert any("prior\\_inclusion" in e.value and "1\\.5" in e.value for e in at.error), [e.value for e in at.error]
    assert at.button(key="train_button").disabled


@pytest.mark.slow  # trains through the form: 10 s CPU
def test_training_from_the_form_stores_and_selects_the_run(tmp_path, monkeypatch):
    monkeypatch.setenv("BNN_CACHE_DIR", str(tmp_path))
    at = open_app()
    at.selectbox(key="train_dataset").set_value("two-moons").run()
    at.text_input(key="train_hidden").input("4").run()
    at.text_input(key="train_epochs").input("2").run()
    assert at.selectbox(key="train_lr_schedule").value == "constant"
    at.selectbox(key="train_lr_schedule").set_value("cosine").run()
    at.button(key="train_button").click().run()
    assert_clean(at)
    worker = at.session_state["training_worker"]
    snapshot = worker.join(timeout=120)
    assert snapshot.status.value == "done", snapshot.error
    assert [record["epoch"] for record in snapshot.history] == [1, 2]
    # the schedule reached core: full step in the first epoch, half in the second of two
    assert [record.get("learning_rate_factor") for record in snapshot.history] == pytest.approx([1.0, 0.5])
    at.run()
    assert_clean(at)
    assert at.session_state["selected_run_id"] == snapshot.run_id
    assert any(snapshot.run_id in s.value for s in at.success)
    from core.runs import list_runs

    assert [info.run_id for info in list_runs()] == [snapshot.run_id]
    at.switch_page("views/inclusion.py").run()
    assert_clean(at)


def test_the_main_script_resolves_no_path_on_its_reruns_and_its_paths_are_the_app_s_files():
    """dashboard/app.py runs again on every rerun of every session: its files come from dashboard.paths,
    resolved once per process (each Path.resolve() is a few system calls a run)."""
    import ast

    from dashboard import paths

    tree = ast.parse(APP.read_text())
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "attr", "") == "resolve"]
    assert not calls, f"Path.resolve() in app.py at lines {[c.lineno for c in calls]}"
    assert paths.PAGES_DIR == APP.parent / "views" and (paths.PAGES_DIR / "pruning.py").is_file()
    assert not (APP.parent / "pages").exists()  # that name would switch Streamlit to its legacy multipage mode
    assert paths.PAGE_ICON.is_file() and paths.PROJECT_ROOT == APP.parent.parent

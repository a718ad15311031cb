"""The Train page's upload (dashboard/upload_panel.py): every malformed file of the command line's
corpus shows that one message on the page (one st.error, no exception, nothing stored); a good
table is stored by the command line's function and submitted through the normal form, with the id
the command line gives; ?hide=dataset hides the upload with the dataset's choice."""

from __future__ import annotations

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from core.cli import main
from core.data import user_table
from core.validate import plain
from tests.test_dashboard_app import APP, TIMEOUT, fresh_caches  # noqa: F401
from tests.test_dashboard_forms import config_after_train
from tests.test_user_table import MALFORMED, _good_rows

# What the page sets for the corpus's flags (its pickers are filled from the header: a misspelt
# target cannot be picked, so the typo case is the command line's only).
PICKERS = {"--task": "upload_task", "--split-column": "upload_split"}
PAGE_CASES = [m for m in MALFORMED if "--target" not in m[2]]


@pytest.fixture
def cache(isolated_data_env):
    user_table._parsed.cache_clear()
    user_table._info.cache_clear()
    return isolated_data_env


def open_train_page() -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.run()
    return at.switch_page("views/train.py").run()


def cli_message(path, argv, capsys) -> str:
    capsys.readouterr()  # (the page's log lines so far)
    assert main(["train", "--data", str(path), "--target", "label", *argv, "--epochs", "1", "--quiet"]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1
    return lines[0][len("error: ") :]


def stored(cache) -> list:
    tables = cache / "tables"
    return sorted(tables.iterdir()) if tables.exists() else []


def upload(at: AppTest, name: str, data: bytes) -> AppTest:
    at.file_uploader(key="upload_table_file").set_value((name, data, "text/csv")).run()
    return at


@pytest.mark.slow
def test_the_page_shows_the_command_line_message_for_every_malformed_file(cache, tmp_path, monkeypatch, capsys):
    assert len(PAGE_CASES) == len(MALFORMED) - 1
    at = open_train_page()
    assert not at.exception and not at.error, [e.value for e in at.error]
    for name, content, argv, env, expected in PAGE_CASES:
        with monkeypatch.context() as patch:
            for key, value in env.items():
                patch.setenv(key, value)
            path = content(tmp_path) if callable(content) else tmp_path / name
            if not callable(content):
                path.write_bytes(content)
            patch.chdir(path.parent)  # the command line names the file as typed: here, its name
            message = cli_message(path.name, argv, capsys)
            assert expected in message
            user_table._parsed.cache_clear()
            upload(at, name, path.read_bytes())
            # A refusal that only the options cause: the file with the default pickers may be a valid table
            # (stored then, as the command line would with those options); the refused choice stores nothing.
            before = stored(cache)
            flags = dict(zip(argv[::2], argv[1::2]))
            for flag, value in flags.items():
                if any(box.key == PICKERS[flag] for box in at.selectbox):  # absent when the file did not parse
                    before = stored(cache)
                    at.selectbox(key=PICKERS[flag]).set_value(value).run()
            assert not at.exception, (name, [e.value for e in at.exception])
            assert [e.value for e in at.error] == [plain(message)], name
            assert at.button(key="train_button").disabled, name
            assert stored(cache) == before, f"{name}: a refused table was stored"
            if not argv:
                assert not before, f"{name}: a refused table was stored"
        for path in stored(cache):
            path.unlink()
        at.file_uploader(key="upload_table_file").set_value(None).run()
        assert not at.error, name


@pytest.mark.slow
def test_a_table_uploaded_trains_through_the_form_with_the_command_line_id(cache, tmp_path, monkeypatch):
    from core.runs import RunConfig

    text = _good_rows(60)
    at = open_train_page()
    upload(at, "mine.csv", text.encode())
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert at.selectbox(key="upload_target").value == "label"  # the last column by default
    assert at.selectbox(key="upload_target").options == ["a", "b", "color", "label"]
    assert "classification" in at.selectbox(key="upload_task").format_func("inferred")
    assert not any(s.key == "train_dataset" for s in at.selectbox)  # the table replaces the dataset list
    stored = list((cache / "tables").glob("*.csv"))
    assert len(stored) == 1 and stored[0].read_bytes() == text.encode()
    # another target of the same table: the same stored file, another task
    at.selectbox(key="upload_target").set_value("a").run()
    assert not at.error, [e.value for e in at.error]
    assert "regression" in at.selectbox(key="upload_task").format_func("inferred")
    assert len(list((cache / "tables").glob("*.csv"))) == 1
    at.selectbox(key="upload_target").set_value("label").run()
    # the choice outlives a visit to another page (Streamlit empties its uploader)
    at.selectbox(key="upload_missing").set_value("drop").run()
    at.switch_page("views/glossary.py").run()
    at.switch_page("views/train.py").run()
    assert at.selectbox(key="upload_target").value == "label"
    assert at.selectbox(key="upload_missing").value == "drop"
    assert not at.exception and not at.error
    at.text_input(key="train_epochs").input("2").run()
    at.text_input(key="train_hidden").input("4").run()
    config = config_after_train(at, monkeypatch)
    path = tmp_path / "mine.csv"
    path.write_text(text)
    cli = RunConfig.from_dict(
        {"data": str(path), "target": "label", "missing": "drop", "hidden": [4], "train": {"epochs": 2}},
    )
    assert config.dataset == cli.dataset and config.dataset_params == cli.dataset_params
    assert config.canonical_json() == cli.canonical_json()  # the same run id as the command line's


def test_a_table_above_the_size_limit_is_refused_before_reading(cache, monkeypatch):
    monkeypatch.setenv("BNN_MAX_TABLE_MB", "0.001")
    read = []

    class Upload:
        name, size, file_id = "big.csv", 1001, "x"

        def getvalue(self):
            read.append(True)
            return b""

    from dashboard import upload_panel

    held = upload_panel.receive(Upload())
    assert held["error"] == "data: 'big.csv' is larger than 0.001 MB ($BNN_MAX_TABLE_MB)" and not read


def test_streamlit_accepts_uploads_at_least_as_large_as_the_setting():
    from pathlib import Path

    import tomllib

    from core import limits

    config = tomllib.loads((Path(APP).parent.parent / ".streamlit" / "config.toml").read_text())
    assert config["server"]["maxUploadSize"] >= limits.MAX_TABLE_MB.default


def test_hide_dataset_hides_the_upload(cache):
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.query_params["hide"] = "dataset"
    at.run()
    at.switch_page("views/train.py").run()
    assert not at.exception
    assert not at.file_uploader and not any(s.key == "train_dataset" for s in at.selectbox)
    assert np.all([s.key != "upload_target" for s in at.selectbox])


@pytest.mark.slow
def test_train_again_on_a_table_run_keeps_its_table(cache, tmp_path, monkeypatch):
    from core.runs import RunConfig, train_run

    path = tmp_path / "mine.csv"
    path.write_text(_good_rows(40))
    run = train_run(
        RunConfig.from_dict(
            {"data": str(path), "target": "label", "missing": "drop", "hidden": [3], "train": {"epochs": 1}},
        ),
    )
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.session_state["selected_run_id"] = run.run_id
    at.run()
    at.switch_page("views/train.py").run()
    at.button(key="again_fill").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    config = config_after_train(at, monkeypatch)
    assert (config.dataset, config.dataset_params) == (run.config.dataset, run.config.dataset_params)
    assert config.seed == run.config.seed + 1 and config.hidden == (3,)

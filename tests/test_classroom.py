"""Classroom mode and the shared caches: students cannot delete, the teacher can, and deleting
a run drops that run's cache entries only; sessions asking for one config share one training."""

from __future__ import annotations

from pathlib import Path

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

APP = Path(__file__).resolve().parent.parent / "dashboard" / "app.py"
TOKEN = "s3cret-teacher"


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("BNN_CACHE_DIR", str(tmp_path))
    from core.runs import RunConfig, train_run

    ids = [
        train_run(RunConfig(dataset="two-moons", hidden=(4,), seed=seed, train={"epochs": 1})).run_id for seed in (0, 1)
    ]
    st.cache_data.clear()
    st.cache_resource.clear()
    yield ids
    st.cache_data.clear()
    st.cache_resource.clear()


def open_app(run_id: str) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=120)
    at.session_state["selected_run_id"] = run_id
    return at.run()


def delete_buttons(at: AppTest) -> list:
    return [b for b in at.button if b.key == "delete_run"]


@pytest.mark.slow  # trains and opens two sessions
def test_students_cannot_delete_but_the_teacher_can(store, monkeypatch):
    monkeypatch.setenv("BNN_CLASSROOM", "1")
    monkeypatch.setenv("BNN_TEACHER_TOKEN", TOKEN)
    student = open_app(store[0])
    assert not student.exception
    assert delete_buttons(student) == []
    assert any("teacher deletes runs" in c.value for c in student.caption)
    assert not [b for b in student.button if b.key == "clear_caches"]
    student.text_input(key="teacher_token_input").input("guess")
    student.button(key="teacher_unlock").click().run()
    assert any("not the teacher token" in e.value for e in student.error)
    assert delete_buttons(student) == []

    # The student's wrong guess made the whole server wait 2 s (tests/test_queue_ownership.py):
    # a fresh throttle, so the teacher need not.
    from dashboard import settings

    monkeypatch.setattr(settings, "_throttles", [])
    teacher = open_app(store[0])
    teacher.text_input(key="teacher_token_input").input(TOKEN)
    teacher.button(key="teacher_unlock").click().run()
    assert not teacher.exception and not teacher.error
    assert len(delete_buttons(teacher)) == 1
    assert [b for b in teacher.button if b.key == "clear_caches"]
    teacher.selectbox(key="cached_run_choice").set_value(store[1]).run()
    teacher.button(key="delete_run").click().run()
    teacher.button(key="confirm_delete").click().run()  # delete asks first (a mis-click must not lose a class's run)
    assert not teacher.exception and not teacher.error
    from core.runs import list_runs

    assert [info.run_id for info in list_runs()] == [store[0]]
    # the student's session is still a student's
    student.run()
    assert delete_buttons(student) == []


def test_without_classroom_mode_everyone_can_delete(store, monkeypatch):
    monkeypatch.delenv("BNN_CLASSROOM", raising=False)
    at = open_app(store[0])
    assert len(delete_buttons(at)) == 1
    assert not [e for e in at.expander if e.label == "Teacher"]


def test_forgetting_a_run_drops_only_its_cache_entries(store, monkeypatch):
    from dashboard import backend, cache

    computed = []
    original = backend.native_statistics

    def counting(model):
        computed.append(model)
        return original(model)

    monkeypatch.setattr(backend, "native_statistics", counting)
    first, second = store
    run_first, run_second = cache.cached_run(first), cache.cached_run(second)
    cache.statistics(first)
    cache.statistics(second)
    assert len(computed) == 2
    cache.statistics(first)
    cache.statistics(second)
    assert len(computed) == 2  # cached
    cache.forget_run(first)
    cache.statistics(second)
    assert len(computed) == 2  # the other run's entry survived
    assert cache.cached_run(second) is run_second  # and so did its loaded model
    cache.statistics(first)
    assert len(computed) == 3  # the forgotten run's entry did not
    assert cache.cached_run(first) is not run_first


def test_forgetting_a_run_drops_only_its_kept_draws(store, monkeypatch):
    from core.predict import DrawCache
    from dashboard import backend, cache

    monkeypatch.setattr(backend, "DRAW_CACHE", DrawCache())
    first, second = store
    for run_id in store:
        cache.test_prediction(run_id, "bma", 5, None, 0)
    assert sorted(key.owner for key in backend.DRAW_CACHE.keys()) == sorted(store)
    held = backend.DRAW_CACHE.nbytes
    cache.forget_run(first)
    assert [key.owner for key in backend.DRAW_CACHE.keys()] == [second]
    assert 0 < backend.DRAW_CACHE.nbytes < held
    cache.clear_all()
    assert len(backend.DRAW_CACHE) == 0


def test_runs_of_one_dataset_share_one_loaded_copy(store):
    from dashboard import cache

    first, second = (cache.cached_run(run_id) for run_id in store)
    assert first.dataset() is second.dataset()


@pytest.mark.slow  # trains in a child process: 11 s CPU
def test_two_sessions_asking_for_one_config_share_one_training(tmp_path, monkeypatch):
    monkeypatch.setenv("BNN_CACHE_DIR", str(tmp_path))
    st.cache_data.clear()
    st.cache_resource.clear()
    sessions = []
    for _ in range(2):
        at = AppTest.from_file(str(APP), default_timeout=120).run()
        at.selectbox(key="train_dataset").set_value("two-moons").run()
        at.text_input(key="train_hidden").input("4").run()
        at.text_input(key="train_epochs").input("100").run()
        sessions.append(at)
    for at in sessions:
        at.button(key="train_button").click().run()
        assert not at.exception and not at.error
        assert at.session_state["training_worker"].snapshot().is_active
    first, second = (at.session_state["training_worker"] for at in sessions)
    assert not first.joined and second.joined
    assert first.snapshot().sharers == 2
    snapshots = [request.join(timeout=600) for request in (first, second)]
    assert [s.status.value for s in snapshots] == ["done", "done"]
    assert snapshots[0].run_id == snapshots[1].run_id
    from core.runs import list_runs

    assert len(list_runs()) == 1
    st.cache_resource.clear()


def test_streamlit_own_clear_cache_request_is_refused_in_classroom_mode(store, monkeypatch):
    from streamlit.runtime.app_session import AppSession

    from dashboard import cache, settings

    original = AppSession._handle_clear_cache_request
    monkeypatch.setattr(AppSession, "_handle_clear_cache_request", original)  # restored afterwards
    fake_session = type("FakeSession", (), {"_session_state": {}})()
    monkeypatch.setenv("BNN_CLASSROOM", "1")
    assert settings.refuse_streamlit_cache_clearing()
    loaded = cache.cached_run(store[0])
    AppSession._handle_clear_cache_request(fake_session)
    assert cache.cached_run(store[0]) is loaded  # nothing was cleared
    monkeypatch.setenv("BNN_CLASSROOM", "0")
    fake_session._session_state = type("State", (), {"clear": lambda self: None})()
    AppSession._handle_clear_cache_request(fake_session)
    assert cache.cached_run(store[0]) is not loaded  # outside classroom mode Streamlit's request works


def test_a_shared_link_opens_its_run(store):
    at = AppTest.from_file(str(APP), default_timeout=120)
    at.query_params["run"] = store[0][:10]
    at.run()
    assert not at.exception
    assert at.session_state["selected_run_id"] == store[0]
    at.switch_page("views/pruning.py").run()
    assert any(store[0] in c.value for c in at.caption)


def test_compute_threads_default_to_one_in_classroom_mode(monkeypatch):
    from core.errors import ConfigError
    from dashboard import settings

    monkeypatch.delenv(settings.COMPUTE_THREADS_VARIABLE, raising=False)
    monkeypatch.setattr(settings, "_secret", lambda name: None)
    monkeypatch.setenv("BNN_CLASSROOM", "1")
    assert settings.compute_threads() == 1
    monkeypatch.setenv("BNN_CLASSROOM", "0")
    assert settings.compute_threads() is None  # PyTorch's own default
    monkeypatch.setenv(settings.COMPUTE_THREADS_VARIABLE, "3")
    assert settings.compute_threads() == 3
    monkeypatch.setattr(settings, "_secret", lambda name: 2 if name == "compute_threads" else None)
    monkeypatch.delenv(settings.COMPUTE_THREADS_VARIABLE)
    assert settings.compute_threads() == 2
    for bad in ("0", "-1", "two"):
        monkeypatch.setenv(settings.COMPUTE_THREADS_VARIABLE, bad)
        with pytest.raises(ConfigError, match="BNN_COMPUTE_THREADS"):
            settings.compute_threads()


def test_compute_threads_are_applied_once_per_process(monkeypatch):
    import torch

    from dashboard import settings

    calls = []
    monkeypatch.setattr(torch, "set_num_threads", calls.append)
    monkeypatch.setattr(settings, "_threads_applied", [])
    monkeypatch.setenv(settings.COMPUTE_THREADS_VARIABLE, "1")
    assert settings.apply_compute_threads() == 1
    monkeypatch.setenv(settings.COMPUTE_THREADS_VARIABLE, "2")  # a later run does not flip it
    assert settings.apply_compute_threads() == 1
    assert calls == [1]


def test_the_switch_interval_is_applied_once_per_process_and_refused_out_of_range(monkeypatch):
    import sys

    from core.errors import BNNError
    from dashboard import settings

    calls = []
    monkeypatch.setattr(sys, "setswitchinterval", calls.append)
    monkeypatch.setattr(settings, "_switch_applied", [])
    monkeypatch.delenv("BNN_GIL_SWITCH_SECONDS", raising=False)
    monkeypatch.setattr(settings, "_secret", lambda key: None)
    assert settings.apply_switch_interval() == 0.001  # the default, measured (core.dashboard_settings)
    monkeypatch.setenv("BNN_GIL_SWITCH_SECONDS", "0.002")  # a later run does not flip it
    assert settings.apply_switch_interval() == 0.001
    assert calls == [0.001]
    monkeypatch.setattr(settings, "_switch_applied", [])
    assert settings.apply_switch_interval() == 0.002 and calls == [0.001, 0.002]
    for bad in ("0", "1", "nan", "-0.001", "fast"):
        monkeypatch.setattr(settings, "_switch_applied", [])
        monkeypatch.setenv("BNN_GIL_SWITCH_SECONDS", bad)
        with pytest.raises(BNNError, match="BNN_GIL_SWITCH_SECONDS"):
            settings.apply_switch_interval()
    assert calls == [0.001, 0.002]  # nothing applied from a refused value


def test_a_training_child_gets_the_compute_threads(monkeypatch):
    import dashboard.worker as worker
    from dashboard import settings

    started = []

    class FakeProcess:
        def __init__(self, target, args, name, daemon):
            started.append(args)
            raise RuntimeError("stop here")

    class FakeContext:
        Queue = staticmethod(lambda: None)
        Event = staticmethod(lambda: None)
        Process = FakeProcess

    import multiprocessing

    monkeypatch.setattr(multiprocessing, "get_context", lambda kind: FakeContext)
    monkeypatch.setenv(settings.COMPUTE_THREADS_VARIABLE, "1")
    monkeypatch.setenv("BNN_TRAINING_NICENESS", "17")
    with pytest.raises(RuntimeError, match="stop here"):
        worker.train_in_subprocess(object())
    assert started[0][-2:] == (1, 17)  # (threads, niceness) go to the child

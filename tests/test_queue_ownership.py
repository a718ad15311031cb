"""Who may cancel a training, the teacher's queue panel and the teacher token's throttle, under
AppTest (the Train page) and directly (dashboard/settings.py).

The queue's training function is a fake that holds every training until the test releases it,
so nothing is trained; no test needs a run in the store."""

from __future__ import annotations

import logging
import re
import threading
from types import SimpleNamespace

import pytest
from streamlit.testing.v1 import AppTest

from tests.support import clear_dashboard_caches
from tests.test_dashboard_app import APP, TIMEOUT

TOKEN = "s3cret-teacher"


@pytest.fixture(autouse=True)
def held_training(monkeypatch, tmp_path):
    """An empty store, and the queue's training function replaced by one that waits for `release`."""
    from core.errors import TrainingCancelled
    from dashboard import worker as worker_module

    monkeypatch.setenv("BNN_CACHE_DIR", str(tmp_path))
    release = threading.Event()

    def train(config, progress=None, cancel=None):
        progress({"epoch": 1, "phase": "train", "loss": 1.0, "density": 0.5})
        while not release.wait(0.02):
            if cancel is not None and cancel.is_set():
                raise TrainingCancelled("cancelled")
        return SimpleNamespace(run_id="not-stored")

    monkeypatch.setattr(worker_module, "train_in_subprocess", train)
    clear_dashboard_caches()
    yield release
    release.set()
    clear_dashboard_caches()


def open_train_page(params: dict | None = None) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    for key, value in (params or {}).items():
        at.query_params[key] = value
    at.run()
    at.switch_page("views/train.py").run()
    return at


def start(at: AppTest, hidden: str, epochs: int = 2, dataset: str = "two-moons") -> None:
    at.selectbox(key="train_dataset").set_value(dataset).run()
    at.text_input(key="train_hidden").input(hidden).run()
    at.text_input(key="train_epochs").input(str(epochs)).run()
    at.button(key="train_button").click().run()


def token_of(at: AppTest) -> str:
    token = at.query_params["train"]
    return token[0] if isinstance(token, list) else token


def buttons(at: AppTest, prefix: str) -> list:
    return [b for b in at.button if (b.key or "").startswith(prefix)]


@pytest.mark.slow  # several AppTest sessions: 6-12 s here
def test_a_copied_link_shows_the_progress_but_never_hands_over_cancel():
    owner = open_train_page()
    start(owner, "5")
    assert not owner.exception and not owner.error
    assert owner.button(key="cancel_training")
    # A classmate behind the same NAT (in AppTest: the same address) opens the copied link, as
    # does the owner's own reloaded page: a new session either way.
    other = open_train_page(params={"train": token_of(owner)})
    assert not other.exception and not other.error
    assert other.session_state["training_worker"] is owner.session_state["training_worker"]
    assert any("epoch 1/2" in (p.proto.text or "") for p in other.get("progress"))
    assert not buttons(other, "cancel_")
    assert any("only the browser that asked for it" in c.value for c in other.caption)
    assert not other.button(key="train_button").disabled  # the viewer may train its own
    owner.run()
    assert owner.button(key="cancel_training")  # the owner keeps it


@pytest.fixture
def browser(monkeypatch):
    """Which browser the next AppTest session runs in: its XSRF token (AppTest has no cookies)."""
    from dashboard import state

    current = {"token": None}
    monkeypatch.setattr(state, "browser_token", lambda: current["token"])
    return current


@pytest.mark.slow  # several AppTest sessions: 6-12 s here
def test_one_browser_is_one_owner_across_reloads_and_tabs_another_browser_is_not(monkeypatch, browser):
    from dashboard.state import xsrf_token

    monkeypatch.setenv("BNN_CLASSROOM", "1")
    # two page loads of one browser: the cookie is masked afresh, the token under the mask is the same
    browser["token"] = xsrf_token("2|083d8cb9|9442e6eae789ef420684eee8b48e71de|1795684499")
    assert browser["token"] == xsrf_token("2|d44aec79|4835862a3bfe8f82daf38e2868f9111e|1795684499")
    first_tab = open_train_page()
    start(first_tab, "5")
    reloaded = open_train_page(params={"train": token_of(first_tab)})
    assert not reloaded.exception and not reloaded.error
    assert reloaded.button(key="cancel_training")  # the reload keeps Cancel
    second_tab = open_train_page()
    start(second_tab, "6")  # the browser's second training: queued behind its first
    assert second_tab.session_state["training_worker"].snapshot().position == 1
    second_tab.text_input(key="train_hidden").input("7").run()
    assert second_tab.button(key="train_button").disabled  # three tabs do not make three sessions
    assert any("already have 2 training(s)" in e.value for e in second_tab.error)
    browser["token"] = bytes(range(16))  # a classmate's browser, the same address
    classmate = open_train_page(params={"train": token_of(first_tab)})
    assert not classmate.exception and not classmate.error
    assert not buttons(classmate, "cancel_")
    assert not classmate.button(key="train_button").disabled


@pytest.mark.slow  # several AppTest sessions: 6-12 s here
def test_a_session_queues_one_training_behind_its_running_one_and_no_more():
    at = open_train_page()
    start(at, "5")
    first = at.session_state["training_worker"]
    start(at, "6")  # one more may wait behind it
    assert not at.exception and not at.error
    second = at.session_state["training_worker"]
    assert second is not first and second.snapshot().position == 1
    assert [b.key for b in buttons(at, "cancel_request_")] == [f"cancel_request_{first.id}"]
    at.text_input(key="train_hidden").input("7").run()
    assert at.button(key="train_button").disabled
    assert any("already have 2 training(s) running or queued" in e.value for e in at.error)
    at.button(key=f"cancel_request_{first.id}").click().run()
    assert first.snapshot().status.value == "cancelled"
    assert not at.button(key="train_button").disabled


def test_a_training_above_the_time_cap_is_refused_with_what_would_fit(monkeypatch):
    monkeypatch.setenv("BNN_MAX_TRAINING_MINUTES", "10")
    at = open_train_page()
    at.text_input(key="train_epochs").input("100000").run()  # mnist-small: about 6 h by the estimate
    # One limit for the form and the queue (BNN_MAX_TRAINING_MINUTES): the form refuses first, with
    # the epochs that fit; the queue's own refusal is tested in test_queue_fairness.py.
    refusals = [e.value for e in at.error if "(limit 10 min)" in e.value]
    assert refusals and re.search(r"up to \d+ epochs fit", refusals[0]), [e.value for e in at.error]
    assert at.button(key="train_button").disabled


@pytest.mark.slow  # several AppTest sessions: 6-12 s here
def test_the_teacher_sees_every_training_and_cancels_any(monkeypatch):
    monkeypatch.setenv("BNN_CLASSROOM", "1")
    monkeypatch.setenv("BNN_TEACHER_TOKEN", TOKEN)
    student = open_train_page()
    start(student, "5")
    request = student.session_state["training_worker"]
    teacher = open_train_page()
    assert not buttons(teacher, "teacher_cancel_")
    teacher.text_input(key="teacher_token_input").input(TOKEN)
    teacher.button(key="teacher_unlock").click().run()
    assert not teacher.exception and not teacher.error
    rows = [t.value for t in teacher.text if request.label in t.value]
    assert rows and rows[0].startswith(request.who) and "running, epoch 1/2" in rows[0], rows
    assert request.who.startswith("student ") and len(request.who) == 14
    teacher.button(key=f"teacher_cancel_{request.job_id}").click().run()
    assert request.join(10).status.value == "cancelled"
    assert "teacher" in request.snapshot().error
    student.run()
    assert any("teacher cancelled" in w.value for w in student.warning)


def test_wrong_teacher_tokens_are_throttled_and_logged_without_their_text(monkeypatch, caplog):
    monkeypatch.setenv("BNN_CLASSROOM", "1")
    monkeypatch.setenv("BNN_TEACHER_TOKEN", TOKEN)
    from dashboard import settings

    monkeypatch.setattr(settings, "_throttles", [])
    at = open_train_page()
    with caplog.at_level(logging.INFO, logger="dashboard.settings"):
        at.text_input(key="teacher_token_input").input("guess-one")
        at.button(key="teacher_unlock").click().run()
        assert any("not the teacher token" in e.value and "in 2 s" in e.value for e in at.error)
        at.text_input(key="teacher_token_input").input(TOKEN)  # even the right one waits its turn
        at.button(key="teacher_unlock").click().run()
        assert any("was not checked" in e.value for e in at.error)
        assert not buttons(at, "clear_caches")
    assert "guess-one" not in caplog.text and TOKEN not in caplog.text
    from dashboard.state import session_label

    assert f"wrong teacher token from {session_label(at.session_state['session_owner'])}" in caplog.text


def test_the_throttle_backs_off_exponentially_per_session_and_per_server():
    from dashboard.settings import GuessThrottle, check_teacher_token

    now = [0.0]
    throttle = GuessThrottle(cap=60, clock=lambda: now[0])
    for k in range(1, 9):  # 2, 4, ... 60 (capped) seconds after k failures
        assert check_teacher_token("wrong", "tab a", throttle).ok is False
        assert throttle.wait("tab a") == min(2**k, 60)
        now[0] += throttle.wait("tab a")
    # another session waits for the server's back-off too, but less once only its own count is left
    assert throttle.wait("tab b") == 0 and throttle.wait("tab a") == 0
    check_teacher_token("wrong", "tab b", throttle)
    assert throttle.wait("tab c") == 60  # nine server-wide failures
    now[0] += 11 * 60  # a quiet spell forgets the counts
    assert throttle.wait("tab a") == 0 and throttle.wait("tab c") == 0
    check_teacher_token("wrong", "tab a", throttle)
    assert throttle.wait("tab a") == 2


def test_the_throttle_never_checks_a_throttled_try(monkeypatch):
    from dashboard import settings

    monkeypatch.setenv("BNN_TEACHER_TOKEN", TOKEN)
    checked = []
    monkeypatch.setattr(settings, "is_teacher_token", lambda text: checked.append(text) or text == TOKEN)
    throttle = settings.GuessThrottle(cap=60, clock=lambda: 0.0)
    assert not settings.check_teacher_token("wrong", "tab a", throttle).ok
    result = settings.check_teacher_token(TOKEN, "tab a", throttle)
    assert not result.ok and "Try again in 2 s" in result.message
    assert checked == ["wrong"]


def test_queue_limits_come_from_the_environment_then_secrets_then_the_defaults(monkeypatch):
    from core.errors import InputError
    from dashboard import settings

    for variable in (
        "BNN_QUEUE_PER_SESSION",
        "BNN_QUEUE_SESSION_SECONDS",
        "BNN_MAX_TRAINING_MINUTES",
        "BNN_QUEUE_GRACE_SECONDS",
        "BNN_SHORT_TRAINING_SECONDS",
    ):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setattr(settings, "_secret", lambda name: {"queue_grace_seconds": 30}.get(name))
    limits = settings.queue_limits()
    assert (
        limits.per_session,
        limits.session_seconds,
        limits.training_seconds,
        limits.grace_seconds,
        limits.short_seconds,
    ) == (2, 1200.0, 600.0, 30.0, 300.0)
    monkeypatch.setenv("BNN_QUEUE_PER_SESSION", "3")
    monkeypatch.setenv("BNN_QUEUE_GRACE_SECONDS", "5")
    limits = settings.queue_limits()
    assert (limits.per_session, limits.grace_seconds) == (3, 5.0)
    monkeypatch.setenv("BNN_QUEUE_PER_SESSION", "0")
    with pytest.raises(InputError, match="BNN_QUEUE_PER_SESSION"):
        settings.queue_limits()
    from core.settings import SETTINGS, describe

    assert "BNN_TEACHER_BACKOFF_MAX_SECONDS" in SETTINGS and "`teacher_backoff_max_seconds`" in describe()


@pytest.mark.slow  # several AppTest sessions: 6-12 s here
def test_behind_dashboard_serve_the_teacher_lists_and_cancels_another_processs_training(monkeypatch, tmp_path):
    """One of dashboard.serve's server processes (BNN_SERVE_DIR, BNN_SERVE_CHILD): its requests' tokens
    name it for the proxy, and the teacher's list holds process 1's waiting training, whose Cancel is a
    request to process 1."""
    import time

    from dashboard.shared_queue import SharedQueue

    shared = tmp_path / "serve"
    monkeypatch.setenv("BNN_SERVE_DIR", str(shared))
    monkeypatch.setenv("BNN_SERVE_CHILD", "0")
    monkeypatch.setenv("BNN_CLASSROOM", "1")
    monkeypatch.setenv("BNN_TEACHER_TOKEN", TOKEN)
    other = SharedQueue(shared, 1, 1)  # process 1, with one training waiting for the machine's slot
    waiting = {"job_id": 7, "who": "student b", "label": "seed 7", "status": "queued", "seconds": 60.0}
    waiting.update(lane=False, turn=[0, time.time() + 3600], finished_epochs=0, total_epochs=2)
    other.publish([waiting])
    try:
        student = open_train_page()
        start(student, "5")
        request = student.session_state["training_worker"]
        assert token_of(student).startswith("s0-") and request.token == token_of(student)
        teacher = open_train_page()
        teacher.text_input(key="teacher_token_input").input(TOKEN)
        teacher.button(key="teacher_unlock").click().run()
        assert not teacher.exception and not teacher.error
        rows = [t.value for t in teacher.text if "seed 7" in t.value]
        assert rows and rows[0].startswith("student b") and "queued, place 1" in rows[0], rows
        assert any("1 running" in m.value and "1 waiting" in m.value for m in teacher.markdown)
        # (under AppTest the click reruns the whole script, where the panel's fragment-scoped rerun
        # raises; a browser reruns the fragment: the same as test_the_teacher_sees_every_training_and_cancels_any)
        teacher.button(key="teacher_cancel_1-7").click().run()
        assert other.cancels() == [7]  # process 1 acts on it at its next poll
    finally:
        other.close()

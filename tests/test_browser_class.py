"""The browser-class benchmark's pure parts: its argument rules, the draws note it reads off the cards,
and the verdict its report gives (the browser run itself is a benchmark, not a test)."""

from __future__ import annotations

import contextlib
import io
import json
import math

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from benchmarks import browser_class
from benchmarks.classroom import protocol_students, server


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["--sessions", "0"], "--sessions"),
        (["--sessions", "61"], "--sessions"),
        (["--interactions", "1.5"], "--interactions"),
        (["--think-seconds", "nan"], "--think-seconds"),
        (["--think-seconds", "-1"], "--think-seconds"),
        (["--timeout", "1e99"], "--timeout"),
        (["--epochs", ""], "--epochs"),
        (["--hidden", "400,x"], "--hidden"),
        (["--hidden", "1,1,1,1,1"], "--hidden"),
        (["--protocol-sessions", "-1"], "--protocol-sessions"),
        (["--protocol-sessions", ""], "--protocol-sessions"),
        (["--protocol-sessions", "1e30"], "--protocol-sessions"),
        (["--protocol-sessions", "2.5"], "--protocol-sessions"),
        (["--protocol-sessions", "60"], "--protocol-sessions"),
        (["--sessions", "10", "--protocol-sessions", "51"], "--protocol-sessions"),
    ],
)
def test_bad_arguments_are_refused_with_the_flag_named(argv, flag, capsys):
    with pytest.raises(SystemExit) as stopped:
        browser_class.parse_args(argv)
    assert stopped.value.code == 2
    assert flag in capsys.readouterr().err


def test_good_arguments_become_numbers():
    args = browser_class.parse_args(["--sessions", "10", "--think-seconds", "0.5", "--hidden", "100,100"])
    assert (args.sessions, args.think_seconds, args.interactions) == (10, 0.5, 12)
    assert args.protocol_sessions == 0  # the class is the browsers alone unless asked
    mixed = browser_class.parse_args(["--sessions", "2", "--protocol-sessions", "58"])
    assert (mixed.sessions, mixed.protocol_sessions) == (2, 58)


def test_draws_note_is_read_from_the_accuracy_card():
    cards = json.dumps({"accuracy": ["0.9012", "3 of 20 draws"], "density": ["0.0712", None]})
    assert browser_class.draws_note(cards) == (3, 20)
    assert browser_class.draws_note(json.dumps({"accuracy": ["0.9", None]})) is None


def test_session_thresholds_are_distinct_slider_steps_inside_the_range():
    values = [browser_class.session_threshold(i) for i in range(30)]
    assert len(set(values)) == 30
    assert all(0.30 <= v <= 0.80 for v in values)
    assert all(math.isclose(round(v / 0.005), v / 0.005, abs_tol=1e-6) for v in values)


def test_report_verdict_follows_the_p95_of_first_updates():
    measured = browser_class.Measured()
    measured.complete["threshold"] = [0.5] * 20
    measured.first["threshold"] = [0.2] * 19 + [3.0]  # p95 interpolates to 0.34 s: within 1 s
    assert "**PASS** (p95 0.34 s)" in browser_class.report(measured, "cmd")
    measured.first["threshold"] = [0.2] * 17 + [3.0] * 3  # p95 3.0 s
    assert "**FAIL** (p95 3.00 s)" in browser_class.report(measured, "cmd")
    assert "**not measured**" in browser_class.report(browser_class.Measured(), "cmd")


def test_the_server_gets_its_own_scheduling_group_unless_asked_to_share_the_browsers(monkeypatch, tmp_path, capsys):
    from benchmarks.classroom import server as server_module

    seen = []
    monkeypatch.setattr(server_module.subprocess, "Popen", lambda *a, **kw: seen.append(kw) or object())
    for share, own in (("group", True), ("process", False)):
        args = browser_class.parse_args(["--browser-share", share])
        server_module.Server({}, tmp_path / "log", own_session=args.browser_share == "group")
        assert seen[-1]["start_new_session"] is own
    assert browser_class.parse_args([]).browser_share == "group"
    with pytest.raises(SystemExit):
        browser_class.parse_args(["--browser-share", "cores"])
    assert "--browser-share" in capsys.readouterr().err


def test_the_moves_wait_until_every_session_has_opened():
    import asyncio

    async def class_of(n):
        opened_all, order = browser_class.OpenedAll(n), []

        async def session(i):
            await asyncio.sleep(0.01 * i)  # the sessions open one after another
            order.append(("opened", i))
            await opened_all.wait()
            order.append(("moved", i))

        await asyncio.gather(*(session(i) for i in range(n)))
        return order

    order = asyncio.run(class_of(4))
    assert [kind for kind, _ in order] == ["opened"] * 4 + ["moved"] * 4


def test_frames_tell_moves_from_fragment_polls_and_split_the_first_update():
    from streamlit.proto.BackMsg_pb2 import BackMsg
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

    def back(fragment_id="", timer=False):
        message = BackMsg()
        message.rerun_script.query_string = "run=x"
        message.rerun_script.fragment_id = fragment_id
        message.rerun_script.is_auto_rerun = timer
        return message.SerializeToString()

    def finished(status):
        message = ForwardMsg()
        message.script_finished = status
        return message.SerializeToString()

    assert browser_class.rerun_request(back()) == "full"
    assert browser_class.rerun_request(back("f1", timer=True)) == "poll"  # a fragment's timer
    assert browser_class.rerun_request(back("body")) == "fragment move"  # a control in the page's body fragment
    assert browser_class.rerun_request("text frame") is None
    assert browser_class.rerun_request(finished(ForwardMsg.FINISHED_SUCCESSFULLY)) is None
    assert browser_class.run_finished(finished(ForwardMsg.FINISHED_SUCCESSFULLY)) == "full"
    assert browser_class.run_finished(finished(ForwardMsg.FINISHED_FRAGMENT_RUN_SUCCESSFULLY)) == "fragment"
    assert browser_class.run_finished(finished(ForwardMsg.FINISHED_EARLY_FOR_RERUN)) is None
    assert browser_class.run_finished(b"\xff\xff not a message") is None
    timer = ForwardMsg()
    timer.auto_rerun.fragment_id, timer.auto_rerun.interval = "abcdef0123", 1.0
    assert browser_class.timer_message(timer.SerializeToString()) == "timer of abcdef01 set every 1 s"
    stop = ForwardMsg()
    stop.stop_auto_rerun.fragment_ids.extend(["abcdef0123"])
    assert browser_class.timer_message(stop.SerializeToString()) == "timers stopped: abcdef01"
    assert browser_class.timer_message(finished(ForwardMsg.FINISHED_SUCCESSFULLY)) is None
    frames = browser_class.Frames()
    frames.on_sent(back("f1", timer=True))
    frames.on_received(timer.SerializeToString())
    assert len(frames.polls) == 1 and frames.polling(0.0).startswith("1 fragment polls sent since 0.0, the last at")
    assert "timer of abcdef01 set every 1 s" in frames.polling(0.0)
    assert not frames.sent
    # A poll queued before a move of the body: the first fragment end is the poll's, the second the move's.
    frames.on_sent(back("body"))
    frames.on_received(finished(ForwardMsg.FINISHED_FRAGMENT_RUN_SUCCESSFULLY))
    assert len(frames.sent) == 1 and not frames.finished
    frames.on_received(finished(ForwardMsg.FINISHED_FRAGMENT_RUN_SUCCESSFULLY))
    assert len(frames.finished) == 1 and frames.finished[0] >= frames.sent[0]
    # A full run drops the fragment runs queued before it: a later fragment end is not taken for a move's.
    frames.on_sent(back("body"))
    frames.on_sent(back())
    frames.on_received(finished(ForwardMsg.FINISHED_SUCCESSFULLY))
    frames.on_received(finished(ForwardMsg.FINISHED_FRAGMENT_RUN_SUCCESSFULLY))
    assert len(frames.sent) == 3 and len(frames.finished) == 2
    frames = browser_class.Frames()
    frames.sent, frames.finished = [0.5, 2.0], [1.0, 2.9]
    assert frames.split(1.8, 3.0) == pytest.approx((0.2, 0.9, 0.1))  # press 1.8, sent 2.0, done 2.9, drawn 3.0
    assert frames.split(3.1, 4.0) is None  # no rerun seen after the press


def test_the_first_update_is_split_at_the_server_s_own_log_of_its_runs():
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

    hello = ForwardMsg()
    hello.new_session.initialize.session_id = "s-1"
    assert browser_class.new_session_id(hello.SerializeToString()) == "s-1"
    assert browser_class.new_session_id(b"\xff not a message") is None
    frames = browser_class.Frames()
    frames.on_received(hello.SerializeToString())
    assert frames.session_id == "s-1"
    runs = [
        {"session": "s-1", "start": 9.0, "end": 9.5},  # before the press: not this move's
        {"session": "s-2", "start": 10.1, "end": 10.2},  # another session's run
        {"session": "s-1", "start": 10.3, "end": 10.7},  # this move's run
        {"session": "s-1", "start": 10.8, "end": 11.9},  # a later run (the complete numbers' rerun)
    ]
    moves = [
        ("s-1", 10.0, 11.0),  # press 10.0, cards drawn 11.0
        ("s-1", 11.5, 11.6),  # drawn before the next run ended: left out
        (None, 10.0, 11.0),  # the page's session never seen: left out
    ]
    split = browser_class.server_split(moves, runs)
    assert split == {
        "to the run": [pytest.approx(0.3)],
        "the run": [pytest.approx(0.4)],
        "after the run": [pytest.approx(0.3)],
        "to the run's end": [pytest.approx(0.7)],  # press 10.0 -> the run's end 10.7
    }


def test_an_error_row_keeps_the_pages_socket_and_console_events_once_each():
    """A session that fails says what its page went through: sockets opened and closed (with the last
    frame received), console errors (a message repeated by a fragment's timer kept once), failed requests."""
    from types import SimpleNamespace

    from benchmarks.browser_class import Frames

    frames = Frames()
    handlers: dict[str, object] = {}
    socket = SimpleNamespace(on=lambda name, handler: handlers.__setitem__(name, handler))
    frames._attach(socket)
    handlers["framereceived"](b"\x00")
    handlers["close"](socket)
    for _ in range(5):
        frames._console(SimpleNamespace(type="error", text="Cannot send rerun backMessage when disconnected"))
    frames._console(SimpleNamespace(type="log", text="ignored"))
    assert frames.events[0].endswith("socket opened")
    assert "socket closed (last frame received" in frames.events[1]
    assert sum("Cannot send rerun" in event for event in frames.events) == 1
    assert len(frames.events) == 3


def _refusal(main, value: str) -> str | None:
    """The one error line `main` ends with for --proxy-processes=value, None when it accepts the value."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            accepted = main(["--proxy-processes=" + value])
        except SystemExit as stopped:
            assert stopped.code == 2, stopped.code
            lines = err.getvalue().strip().splitlines()
            assert "Traceback" not in err.getvalue() and lines[-1].count("error:") == 1, err.getvalue()
            return lines[-1].split("error: ", 1)[1]
    return accepted


@given(st.one_of(st.integers(-(10**6), 10**6).map(str), st.text(max_size=30)))
@example(" 2 ")
@example("2.0")
@example("-0")
@example("1_0")
@example("0x2")
@example("8")
@example("9")
def test_proxy_processes_is_0_to_8_or_one_error_line_naming_the_flag(value):
    """--proxy-processes (benchmarks.classroom_load's flag and rule): 0 is one `streamlit run`, 1 to 8 the
    processes behind `python -m dashboard.serve`; anything else one `error:` line before anything starts."""
    refused = _refusal(lambda argv: browser_class.parse_args(argv).proxy_processes, value)
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if number in range(0, 9):
        assert refused == int(number)
    else:
        assert isinstance(refused, str) and refused.startswith("--proxy-processes: 1 to 8"), refused


@pytest.mark.parametrize("value", ["9", "-1", "1.5", "two", "", "nan", "1e9"])
def test_browser_class_and_classroom_load_refuse_a_proxy_count_alike(value):
    from benchmarks import classroom_load

    ours = _refusal(lambda argv: browser_class.parse_args(argv).proxy_processes, value)
    theirs = _refusal(classroom_load.main, value)
    assert isinstance(ours, str) and ours == theirs


def test_the_proxy_serves_the_class_with_proxy_processes(monkeypatch, tmp_path):
    """--proxy-processes 2 starts `python -m dashboard.serve --processes 2` (classroom_load's ProxiedServers)
    in its own scheduling group; without it, one `streamlit run` of the app."""
    from benchmarks.classroom import server as server_module

    started = []
    monkeypatch.setattr(server_module.subprocess, "Popen", lambda command, **kw: started.append((command, kw)))
    proxy = browser_class.start_server(browser_class.parse_args(["--proxy-processes", "2"]), {}, tmp_path)
    command, options = started[-1]
    assert isinstance(proxy, server_module.ProxiedServers) and proxy.log == tmp_path / "serve.log"
    assert command[1:5] == ["-m", "dashboard.serve", "--processes", "2"] and options["start_new_session"] is True
    single = browser_class.start_server(browser_class.parse_args(["--browser-share", "process"]), {}, tmp_path)
    command, options = started[-1]
    assert type(single) is server_module.Server and "run" in command and "dashboard.serve" not in command
    assert options["start_new_session"] is False
    assert "dashboard.serve --processes 2" in browser_class.serving(2)


def test_the_reported_command_can_be_pasted_again_and_leaves_the_note_out():
    argv = ["--sessions", "10", "--note", "load 3.2 (shared)", "--out", "a b.md", "--note=x"]
    assert browser_class.command_line(argv) == "python -m benchmarks.browser_class --sessions 10 --out 'a b.md'"


def test_background_browsers_need_the_autogroup_scheduler(tmp_path, monkeypatch, capsys):
    """--browser-share background starts the server in a session of its own, as group does, and is
    refused in one line where the autogroup scheduler is off or this process's group cannot be reniced."""
    enabled, group = tmp_path / "enabled", tmp_path / "autogroup"
    monkeypatch.setattr(browser_class, "AUTOGROUP_ENABLED", enabled)
    monkeypatch.setattr(browser_class, "AUTOGROUP", group)
    for state, writable, words in (
        ("0", True, "needs Linux's autogroup scheduler"),
        ("1", False, "cannot set this process's autogroup niceness"),
    ):
        enabled.write_text(state)
        group.write_text("/autogroup-1 nice 0\n")
        group.chmod(0o644 if writable else 0o444)
        monkeypatch.setattr(browser_class.os, "access", lambda path, mode, writable=writable: writable)
        with pytest.raises(SystemExit) as stopped:
            browser_class.parse_args(["--browser-share", "background"])
        assert stopped.value.code == 2
        assert words in capsys.readouterr().err.strip().splitlines()[-1]
    enabled.write_text("1")
    monkeypatch.setattr(browser_class.os, "access", lambda path, mode: True)
    args = browser_class.parse_args(["--browser-share", "background"])
    assert args.browser_share == "background"
    group.chmod(0o644)
    group.write_text("/autogroup-7 nice 3\n")
    restore = browser_class.lower_the_browsers_group()
    assert group.read_text() == "19"
    restore()
    assert group.read_text() == "3"


def test_the_browsers_cpu_counts_from_the_first_move_and_keeps_a_closed_pages_last_count(monkeypatch):
    """BrowserCpu: nothing before every session has opened; then each process's CPU since, a renderer
    that starts after (a page's) from zero, and one that ended (its session closed) at its last sample."""
    import asyncio

    before = {1: 5.0, 2: 1.0}  # every sample before every session has opened: not the start
    counts = [
        {1: 6.0, 2: 1.5},  # the start
        {1: 6.5, 2: 2.5, 3: 0.25},  # a new renderer
        {1: 7.0, 3: 0.75},  # process 2 ended: its 2.5 s stay (and this count from then on)
    ]
    calls = []
    opened = []

    def sampled(root):
        if not opened:
            return before
        calls.append(root)
        return counts[min(len(calls), len(counts)) - 1]

    monkeypatch.setattr(browser_class, "chromium_cpu", sampled)

    async def follow():
        opened_all, cpu = browser_class.OpenedAll(1), browser_class.BrowserCpu()
        follower = asyncio.ensure_future(cpu.follow(opened_all))
        for _ in range(400):  # a sample taken before the session opened, within 100 s
            if cpu.last:
                break
            await asyncio.sleep(0.25)
        assert cpu.last == before and math.isnan(cpu.seconds())
        opened.append(True)
        await opened_all.wait()
        for _ in range(400):  # every count sampled (a sample each quarter second), within 100 s
            if len(calls) > len(counts):
                break
            await asyncio.sleep(0.25)
        follower.cancel()
        return cpu.seconds()

    assert math.isclose(asyncio.run(follow()), (7.0 - 6.0) + (2.5 - 1.5) + 0.75)


def test_chromium_cpu_counts_the_chromium_processes_below_the_root_only():
    row = server.ProcessRow
    table = {
        10: row("python", 1, 5.0),  # the benchmark: the root, not chromium
        11: row("node", 10, 1.0),  # Playwright's driver
        12: row("chromium", 11, 2.0),  # the browser
        13: row("chromium", 12, 3.0),  # a page's renderer
        15: row("headless_shell", 10, 0.5),
        16: row("python3", 12, 4.0),  # below the root, not chromium
        14: row("chromium", 1, 9.0),  # another user's browser
        20: row("chromium", 21, 1.0),  # a parent loop (a table read while processes ended), not below the root
        21: row("chromium", 20, 1.0),
        22: row("chromium", 99, 1.0),  # its parent ended
    }
    assert browser_class.chromium_cpu(10, table) == {12: 2.0, 13: 3.0, 15: 0.5}


def test_the_process_table_reads_this_process_and_its_parent():
    import os
    import time

    start = time.process_time()
    while time.process_time() - start < 0.05:  # some CPU of its own to read back
        pass
    own = server.process_table()[os.getpid()]
    assert own.parent == os.getppid()
    assert own.cpu > 0
    assert os.getpid() in server.child_cpu(os.getppid(), own.name)


def test_the_server_s_script_runs_are_counted_full_and_body_apart():
    records = [
        {"session": "s-1", "page": "pruning", "start": 1.0, "end": 1.5, "cpu": 0.4},
        {"session": "s-1", "page": "pruning", "start": 2.0, "end": 2.1, "cpu": 0.05, "fragment": True},
        {"session": "s-2", "page": "pruning", "start": 2.0, "end": 2.2, "cpu": 0.07, "fragment": True},
        {"draw": 0, "run": "r", "threshold": 0.5},
        {"draw": 1, "run": "r", "threshold": 0.5},
    ]
    line = browser_class.script_runs_line(records)
    assert line == "1 full runs (0.4 s of CPU), 2 runs of a page's body alone (0.1 s); 2 draws computed"
    assert (
        browser_class.script_runs_line([])
        == "0 full runs (0.0 s of CPU), 0 runs of a page's body alone (0.0 s); 0 draws computed"
    )


def _interaction(kind: str, seconds: float, complete: float | None = None):
    from benchmarks.classroom.report import Interaction

    return Interaction(1000, kind, seconds, True, complete_seconds=seconds if complete is None else complete)


def test_protocol_students_get_their_own_table_and_their_failures_fail_the_run():
    measured = browser_class.Measured(students=protocol_students.protocol_report(8, 12, 1.0))
    measured.first["threshold"] = [0.3] * 20
    measured.students.interactions = [_interaction("threshold", 0.1 * (i + 1), 2.0) for i in range(20)]
    measured.students.interactions.append(_interaction("page switch", 0.5))
    text = browser_class.report(measured, "cmd")
    assert "N chromium sessions and 8 protocol students" in text
    # 20 slider moves of 0.1 .. 2.0 s: p50 1.05 s, p95 1.9 + 0.05 x 0.1 = 1.905 s by interpolation (1.91 in
    # float); complete 2.0 s for every one
    assert "| slider release -> first update (threshold, R) | 20 | 1.05 | 1.91 | 2.00 |" in text
    assert "| slider release -> complete R-draw numbers | 20 | 2.00 | 2.00 | 2.00 |" in text
    assert "| page switch | 1 | 0.50 | 0.50 | 0.50 |" in text
    # the verdict is the chromium pages' (0.3 s), not the students' slower moves
    assert "**PASS** (p95 0.30 s), the 20 moves of the chromium pages" in text
    assert measured.failures() == []
    measured.students.leaks.append("session 1003 saw run abc")
    measured.students.errors.append("session 1004 threshold: TimeoutError")
    assert measured.failures() == ["session 1004 threshold: TimeoutError", "session 1003 saw run abc"]
    assert "protocol students' errors: 1" in browser_class.report(measured, "cmd")


def test_a_class_of_browsers_alone_has_no_protocol_lines():
    text = browser_class.report(browser_class.Measured(), "cmd")
    assert "protocol" not in text
    assert protocol_students.students_lines(protocol_students.protocol_report(0, 12, 1.0)) == []


def test_protocol_students_wait_for_the_pages_then_each_browses_the_run(monkeypatch):
    import asyncio

    browsed: list[tuple[int, str, list[str]]] = []
    opened_at: list[bool] = []

    async def fake_browse(session, report, scenario, runs, deadline, labels, rng):
        opened_at.append(start.is_set())
        browsed.append((session.index, session.run_id, runs))
        if session.index == protocol_students.FIRST_INDEX + 1:
            raise ConnectionError("dropped")

    monkeypatch.setattr(protocol_students, "browse", fake_browse)
    report = protocol_students.protocol_report(3, 5, 1.0)

    async def scenario() -> None:
        students = protocol_students.protocol_students("http://127.0.0.1:1", "run1", report, start, 60)
        task = asyncio.ensure_future(students)
        await asyncio.sleep(0)
        assert browsed == []  # nobody moves before the pages have opened
        start.set()
        await task

    start = asyncio.Event()
    asyncio.run(scenario())
    assert [index for index, _, _ in browsed] == [1000, 1001, 1002]
    assert all(run == "run1" and runs == ["run1"] for _, run, runs in browsed)
    assert opened_at == [True] * 3
    assert report.errors == ["a protocol student: ConnectionError: dropped"]


def _cards(done: int, wanted: int) -> str:
    return json.dumps({"accuracy": ["0.91", f"{done} of {wanted} draws"], "density": ["0.40", None]})


class _RefiningPage:
    """A page whose opening cards refine 3 -> 6 -> 10 of 10 draws, one step per three reads (the page's
    polls are slower than the session's reads), and whose key press shows 10 of 11, then 11 of 11: what a
    session's first move meets on a cold class."""

    def __init__(self) -> None:
        self.shown = [_cards(3, 10)] * 3 + [_cards(6, 10)] * 3 + [_cards(10, 10)]
        self.at_press: list[str] = []
        self.keyboard = self

    def on(self, event, callback) -> None:
        pass

    async def goto(self, link, wait_until=None) -> None:
        self.link = link

    def get_by_role(self, role, name=None):
        return self

    async def focus(self) -> None:
        pass

    async def press(self, key) -> None:
        self.at_press.append(self.shown[0])
        self.shown = [_cards(10, 11), _cards(11, 11)]

    async def evaluate(self, expression):
        if expression == browser_class.EXCEPTION:
            return 0
        if len(self.shown) > 1:
            return [self.shown.pop(0), True]
        return [self.shown[0], True]


def test_the_first_move_waits_for_the_opening_s_draws_to_settle():
    import argparse
    import asyncio
    import time

    page = _RefiningPage()

    class Context:
        async def new_page(self):
            return page

        async def close(self):
            pass

    class Browser:
        async def new_context(self, viewport=None):
            return Context()

    args = argparse.Namespace(open_timeout=5.0, timeout=5.0, interactions=1, think_seconds=0.0)
    measured = browser_class.Measured()
    stop = time.perf_counter() + 60
    asyncio.run(
        browser_class.one_session(Browser(), "http://x", "run1", 0, args, measured, stop, browser_class.OpenedAll(1))
    )
    assert measured.errors == []
    # the key press came when the opening's 10 draws were all in, not while a poll was refining them
    assert page.at_press == [_cards(10, 10)]
    assert len(measured.first["threshold"] + measured.first["R"]) == 1
    assert len(measured.complete["threshold"] + measured.complete["R"]) == 1
    assert measured.refined == 1  # 10 of 11 first, then the wait for 11 of 11


def test_settled_cards_rest_on_all_their_draws():
    assert browser_class.settled(_cards(10, 10))
    assert not browser_class.settled(_cards(3, 10))
    assert browser_class.settled(json.dumps({"accuracy": ["0.9", None]}))  # a mode that draws once

"""The load test's two latencies of a slider move: to the first update and to the complete R-draw
numbers (benchmarks/classroom), read from what the Pruning page says its cards rest on."""

from __future__ import annotations

import math
import os

from benchmarks.classroom.client import RunResult
from benchmarks.classroom.report import Interaction, Report, table
from benchmarks.classroom.scenario import Scenario, partial


class Text:
    def __init__(self, body: str):
        self.body = body


def result_with(*captions: str) -> RunResult:
    result = RunResult()
    result.elements = [("markdown", Text(caption)) for caption in captions]
    return result


def test_partial_cards_are_told_from_complete_ones_by_the_page_caption():
    assert partial(result_with("Based on 7 of 20 draws: the others are being computed and the numbers refine."))
    assert partial(result_with("Based on 0 of 20 draws: computing the first."))
    assert not partial(result_with("Based on all 20 draws."))
    assert not partial(result_with("SIM-SIM: average over R sampled networks"))


def test_both_latencies_are_summarised_and_a_move_that_never_completed_is_the_slowest():
    report = Report(Scenario(sessions=3))
    # first update 0.1 .. 1.0 s; complete 2 s later, except the last, which never completed
    for index in range(10):
        seconds = 0.1 * (index + 1)
        complete = None if index == 9 else seconds + 2.0
        report.interactions.append(Interaction(index, "samples", seconds, True, complete_seconds=complete))
    first = report.summary(("samples",))
    assert first["n"] == 10 and math.isclose(first["p50"], 0.55) and math.isclose(first["max"], 1.0)
    assert math.isclose(first["p95"], 0.9 + 0.55 * 0.1)  # linear between the 9th and 10th order statistics
    complete = report.summary(("samples",), complete=True)
    assert complete["max"] == math.inf and math.isclose(complete["p50"], 2.55)
    text = table(report)
    assert "slider release -> complete R-draw numbers (threshold, R) | 10 | 2.55 |" in text
    assert "refined in place): 10 of 10; never completed: 1" in text
    # nine moves waited 2 s each for the rest of their draws
    assert "to the complete numbers 18 s in all (mean 1.8 s)" in text


# --- the server's CPU by thread --------------------------------------------------------------------


def test_the_server_thread_log_names_each_thread_and_gives_its_cpu_as_it_ends(tmp_path):
    """The patch the load test's server runs first: a thread that burns about 0.3 s of CPU and one that
    sleeps log their names and, as they end, their own CPU (time.thread_time), not the process's."""
    import json
    import os
    import subprocess
    import sys

    from benchmarks.classroom.server import THREAD_LOG_PATCH

    log = tmp_path / "threads.jsonl"
    code = THREAD_LOG_PATCH + (
        "def burn():\n"
        "    end = time.thread_time() + 0.3\n"
        "    while time.thread_time() < end:\n"
        "        pass\n"
        "a = threading.Thread(target=burn, name='burner'); a.start(); a.join()\n"
        "b = threading.Thread(target=time.sleep, args=(0.2,), name='sleeper'); b.start(); b.join()\n"
    )
    subprocess.run([sys.executable, "-c", code], env=dict(os.environ, BNN_THREAD_LOG=str(log)), check=True, timeout=60)
    records = [json.loads(line) for line in log.read_text().splitlines()]
    ends = {r["name"]: r["cpu"] for r in records if "cpu" in r}
    assert [r["name"] for r in records if "cpu" not in r] == ["burner", "sleeper"]
    assert 0.28 <= ends["burner"] < 1.0  # its own CPU, whatever the machine's load
    assert ends["sleeper"] < 0.05


def test_thread_cpu_counts_threads_alive_at_either_end_and_those_that_ended_in_between(tmp_path, monkeypatch):
    import json

    from benchmarks.classroom import server
    from benchmarks.classroom.report import thread_groups, thread_table

    samples = iter(
        [
            {100: 5.0, 101: 1.0, 102: 2.0},  # at the class's start: the main thread, a worker, a script run
            {100: 9.0, 101: 4.0, 104: 0.5},  # at its end: 102 ended, 104 began (103 began and ended between)
        ]
    )
    monkeypatch.setattr(server, "thread_cpu", lambda pid: next(samples))
    log = tmp_path / "threads.jsonl"
    before = [
        {"tid": 99, "name": "ScriptRunner.scriptThread"},
        {"tid": 99, "name": "ScriptRunner.scriptThread", "cpu": 7.0},
    ]
    log.write_text("".join(json.dumps(r) + "\n" for r in before))
    threads = server.ThreadCpu([100], log)
    threads.begin()  # 99 ended before the class: not counted
    during = [
        {"tid": 101, "name": "bnn-refiner"},
        {"tid": 102, "name": "ScriptRunner.scriptThread"},
        {"tid": 102, "name": "ScriptRunner.scriptThread", "cpu": 2.5},
        {"tid": 103, "name": "ScriptRunner.scriptThread"},
        {"tid": 103, "name": "ScriptRunner.scriptThread", "cpu": 0.25},
        {"tid": 104, "name": "bnn-refiner"},
    ]
    with log.open("a") as handle:
        handle.write("".join(json.dumps(r) + "\n" for r in during) + '{"tid": 105, "na')  # a line cut short
    threads.finish()
    used, names = threads.used()
    assert used == {100: 4.0, 101: 3.0, 102: 0.5, 103: 0.25, 104: 0.5}
    report = Report(Scenario(sessions=3), server_cpu_seconds=10.0, script_cpu_seconds=0.5, fragment_runs=5)
    report.thread_seconds, report.thread_names = used, names
    groups = thread_groups(report)
    assert groups["background draws (bnn-refiner threads)"] == (2, 3.5)
    assert groups["script runs and fragment polls (ScriptRunner threads)"] == (2, 0.75)
    assert groups["main thread: tornado event loop, websocket sends and receives"] == (1, 4.0)
    text = "\n".join(thread_table(report))
    assert "| not in any thread's record (process-wide work, rounding) | | 1.8 | 18% |" in text
    # fragment polls: the script-runner threads' 0.75 s less the full runs' 0.5 s, over 5 fragment runs
    assert "= 0.2 s, 0.050 s per fragment run" in text


def test_the_draw_processes_cpu_is_read_from_the_servers_children_by_name_and_added_to_the_table(tmp_path):
    """A child of this process named bnn-draws that burns CPU is found by child_cpu (and no other
    child), and the table adds the draw processes' CPU beside the server's, not inside it."""
    import subprocess
    import sys
    import time

    from benchmarks.classroom import server

    burn = (
        "import time\n"
        f"open('/proc/self/comm', 'w').write({server.DRAW_PROCESS_NAME!r})\n"
        "end = time.process_time() + 0.5\n"
        "while time.process_time() < end: pass\n"
        "time.sleep(30)\n"
    )
    drawer = subprocess.Popen([sys.executable, "-c", burn])
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        deadline = time.monotonic() + 60
        # Other tests in this worker may have left draw processes of their own: look at these two only.
        while server.child_cpu(os.getpid(), server.DRAW_PROCESS_NAME).get(drawer.pid, 0.0) < 0.4:
            assert time.monotonic() < deadline, server.child_cpu(os.getpid(), server.DRAW_PROCESS_NAME)
            time.sleep(0.1)
        found = server.child_cpu(os.getpid(), server.DRAW_PROCESS_NAME)
        assert drawer.pid in found and other.pid not in found
    finally:
        drawer.kill()
        other.kill()
        drawer.wait()
        other.wait()
    report = Report(Scenario(sessions=3))
    report.server_cpu_seconds = 10.0
    report.thread_seconds, report.thread_names = {1: 6.0, 2: 3.0}, {1: "ScriptRunner.scriptThread", 2: "MainThread"}
    report.draw_process_seconds = {101: 4.0, 102: 2.5}
    text = table(report)
    assert "| server process | | 10.0 | 100% |" in text  # the children's CPU is not the server's
    assert "in draw processes (bnn-draws children, their own interpreters, lower priority) | 2 | 6.5 | |" in text
    assert "| server process and draw processes | | 16.5 | |" in text

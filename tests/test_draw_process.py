"""Background draws in child processes (core.predict.draw_process): the same numbers as drawing in the
server, bit for bit, and a child that dies, hangs or grows is replaced without a session hanging.

Truth is `Run.predict` without any cache. The runs are rebuilt in the child by a module-level loader
(tests/draw_process_loaders.py: the same seed, the same weights, the same fingerprint), as the
dashboard's children load a stored run by id. Each child start imports torch (seconds on a loaded
machine): the tests share one set of children where they can.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import time
from collections import OrderedDict

import pytest

from core.errors import PredictionError
from core.predict import DrawCache
from core.predict.draw_process import DrawProcessError, DrawProcesses, DrawRequest, _Used, serve
from core.predict.progressive import Progress
from tests import draw_process_loaders as loaders
from tests.test_draw_cache import assert_same, classification_run

SAMPLING = [("bma", None, None), ("mpm", None, None), ("prune", 0.3, "sample")]
START = 240.0  # seconds a child may take to start on a loaded machine


def wait_until(condition, timeout=START):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def refine(cache, run, mode, samples, threshold, weights, owner="3", timeout=START):
    """Ask like a page that polls until its cards are complete: the last Progress."""
    refiner = cache.refiner()
    deadline = time.monotonic() + timeout
    while True:
        progress = refiner.ready(run, run.dataset().x_test, "test", owner, mode, samples, threshold, 0, weights)
        if progress.complete:
            return progress
        assert time.monotonic() < deadline, f"not complete after {timeout} s: {progress}"
        time.sleep(0.05)


@pytest.fixture(scope="module")
def processes():
    pool = DrawProcesses(loaders.load_tiny, processes=1, niceness=5, timeout=120)
    yield pool
    pool.close()


@pytest.mark.slow  # starts a Python process (importing torch: seconds)
@pytest.mark.parametrize("mode, threshold, weights", SAMPLING)
def test_draws_from_a_child_end_bit_for_bit_at_the_uncached_prediction(processes, mode, threshold, weights):
    run = classification_run(seed=3)  # the run the children rebuild (load_tiny("3"))
    x = run.dataset().x_test
    cache = DrawCache()
    cache.use_processes(processes)
    progress = refine(cache, run, mode, 9, threshold, weights)
    assert progress == Progress(9, 9)
    assert cache.draws_elsewhere == 9 and cache.draws_computed == 9  # every draw came from the child
    for samples in (1, 4, 9):  # a partial answer is the k-draw prediction, the complete one the R-draw one
        prediction = cache.predict(run, x, "test", "3", mode, samples, threshold, 0, weights)
        assert_same(prediction, run.predict(x, mode=mode, samples=samples, threshold=threshold, weights=weights))
    assert cache.draws_computed == 9  # and nothing was drawn again in this process


@pytest.mark.slow  # starts a Python process (importing torch: seconds)
def test_a_plan_the_child_cannot_load_is_drawn_in_the_server(processes):
    run = classification_run(seed=3)  # the run the children rebuild (load_tiny("3"))
    x = run.dataset().x_test
    cache = DrawCache()
    cache.use_processes(processes)
    refine(cache, run, "bma", 5, None, None, owner="not-a-run")  # the loader cannot build it: "unavailable"
    assert cache.draws_elsewhere == 0 and cache.draws_computed == 5
    assert_same(cache.predict(run, x, "test", "not-a-run", "bma", 5), run.predict(x, mode="bma", samples=5))


@pytest.mark.slow  # starts a Python process (importing torch: seconds)
def test_a_child_killed_mid_draw_is_replaced_and_the_numbers_are_the_same(monkeypatch):
    monkeypatch.setenv(loaders.SLOW_VARIABLE, "0.3")  # children inherit it: each draw takes 0.3 s or more
    pool = DrawProcesses(loaders.load_tiny, processes=1, niceness=0, timeout=120)
    try:
        run = classification_run(seed=3)  # the run the children rebuild (load_tiny("3"))
        x = run.dataset().x_test
        cache = DrawCache()
        cache.use_processes(pool)
        refiner = cache.refiner()
        ready = lambda: refiner.ready(run, x, "test", "3", "mpm", 12, None, 0, None)  # noqa: E731
        wait_until(lambda: ready().draws >= 2)
        (pid,) = pool.pids()
        os.kill(pid, signal.SIGKILL)  # mid-draw: the draws take 0.3 s and keep coming
        progress = refine(cache, run, "mpm", 12, None, None)
        assert progress == Progress(12, 12)
        assert pool.restarts >= 1 and pool.started == 2 and pool.pids() != [pid]
        assert_same(cache.predict(run, x, "test", "3", "mpm", 12), run.predict(x, mode="mpm", samples=12))
    finally:
        pool.close()


@pytest.mark.slow  # starts a Python process (importing torch: seconds)
def test_a_child_that_dies_again_is_a_clear_message_once_and_the_next_ask_recovers(tmp_path, monkeypatch):
    crash = tmp_path / "crash"
    crash.write_text("")
    monkeypatch.setenv(loaders.CRASH_FILE_VARIABLE, str(crash))  # while it exists, a child loading a run dies
    pool = DrawProcesses(loaders.load_tiny, processes=1, niceness=0, timeout=120)
    try:
        run = classification_run(seed=3)  # the run the children rebuild (load_tiny("3"))
        x = run.dataset().x_test
        cache = DrawCache()
        cache.use_processes(pool)
        refiner = cache.refiner()
        assert refiner.ready(run, x, "test", "3", "bma", 4, None, 0, None) == Progress(0, 4)
        assert refiner.wait(2 * START)
        with pytest.raises(DrawProcessError, match="stopped twice") as raised:
            refiner.ready(run, x, "test", "3", "bma", 4, None, 0, None)
        assert "Traceback" not in str(raised.value)
        crash.unlink()
        assert refine(cache, run, "bma", 4, None, None) == Progress(4, 4)  # the error was shown once; new child
        assert pool.started == 3
        assert_same(cache.predict(run, x, "test", "3", "bma", 4), run.predict(x, mode="bma", samples=4))
    finally:
        pool.close()


@pytest.mark.slow  # starts a Python process (importing torch: seconds)
def test_a_draw_past_its_cpu_time_stops_its_child_and_says_which_setting(monkeypatch):
    monkeypatch.setenv(loaders.SLOW_VARIABLE, "30")
    monkeypatch.setenv(loaders.BUSY_VARIABLE, "1")  # a loop that would spend 30 s of CPU
    pool = DrawProcesses(loaders.load_tiny, processes=1, niceness=0, timeout=1)
    try:
        run = classification_run(seed=3)  # the run the children rebuild (load_tiny("3"))
        from core.predict.draw_paths import fingerprint

        request = DrawRequest("3", "test", "bma", 2, None, None, 0, None, 0, None, fingerprint(run.model))
        pool.draw(request)  # the first draw is not slowed (the loader slows the ones after it)
        started = time.monotonic()
        with pytest.raises(DrawProcessError, match="BNN_DRAW_SECONDS"):
            pool.draw(dataclasses.replace(request, index=1, path="plain"))
        assert time.monotonic() - started < 20  # stopped after about 1 s of its CPU, not after the 30 s loop
        assert pool.pids() == []
    finally:
        pool.close()


@pytest.mark.slow  # starts a Python process
def test_a_slow_draw_that_uses_no_cpu_is_waited_for_up_to_its_wall_bound(monkeypatch):
    monkeypatch.setenv(loaders.SLOW_VARIABLE, "3")  # a sleep: a child starved by the scheduler uses no CPU either
    pool = DrawProcesses(loaders.load_tiny, processes=1, niceness=0, timeout=1)
    try:
        run = classification_run(seed=3)
        from core.predict.draw_paths import fingerprint

        request = DrawRequest("3", "test", "bma", 2, None, None, 0, None, 0, None, fingerprint(run.model))
        pool.draw(request)
        reply = pool.draw(dataclasses.replace(request, index=1, path="plain"))  # 3 s > 1 s, yet < 20 x 1 s
        assert reply.output.shape == (40, 3) and pool.started == 1
    finally:
        pool.close()


@pytest.mark.slow  # starts Python processes (importing torch: seconds)
def test_a_child_above_its_memory_bound_ends_after_answering_and_the_next_draw_starts_another():
    pool = DrawProcesses(loaders.load_tiny, processes=1, niceness=0, max_bytes=1, timeout=120)
    try:
        run = classification_run(seed=3)  # the run the children rebuild (load_tiny("3"))
        x = run.dataset().x_test
        cache = DrawCache()
        cache.use_processes(pool)
        assert refine(cache, run, "bma", 3, None, None) == Progress(3, 3)
        assert pool.started == 3  # each child ended after its one draw
        assert_same(cache.predict(run, x, "test", "3", "bma", 3), run.predict(x, mode="bma", samples=3))
    finally:
        pool.close()


class _Pipe:
    def __init__(self):
        self.polled = 0

    def poll(self, timeout):
        self.polled += 1
        return False


def test_a_child_ends_when_its_parent_is_gone():
    import torch

    pipe = _Pipe()
    threads = torch.get_num_threads()
    started = time.monotonic()
    serve(pipe, (loaders.load_tiny, 1, 0, 0, os.getppid() + 10**6))  # a parent that is not this process's
    torch.set_num_threads(threads)  # serve set this process's
    assert pipe.polled == 0 and time.monotonic() - started < 10  # returned, without polling a pipe nobody reads


def test_the_recorded_usage_is_the_draws_nonzero_weights():
    import torch

    used = _Used(7)
    assert used.n_draws == 7  # sampled_forward checks that draws come in order
    weights = [torch.tensor([[[0.0, 1.5], [-2.0, 0.0]]])]
    used.add(weights)
    assert [u.tolist() for u in used.used] == [[[[False, True], [True, False]]]]


def test_bad_settings_are_refused():
    with pytest.raises(PredictionError, match="processes must be >= 1"):
        DrawProcesses(loaders.load_tiny, processes=0)
    with pytest.raises(PredictionError, match="timeout must be > 0"):
        DrawProcesses(loaders.load_tiny, timeout=0)


@pytest.mark.slow  # starts Python processes
def test_warm_starts_every_child_before_the_first_draw():
    pool = DrawProcesses(loaders.load_tiny, processes=2, niceness=0, timeout=120)
    try:
        pool.warm()
        assert pool.started == 2 and len(pool.pids()) == 2
        run = classification_run(seed=3)
        cache = DrawCache()
        cache.use_processes(pool)
        assert refine(cache, run, "bma", 4, None, None) == Progress(4, 4)
        assert pool.started == 2 and cache.draws_elsewhere == 4  # the warm children drew them
    finally:
        pool.close()
    assert pool.pids() == []


@pytest.mark.slow  # starts Python processes
def test_ready_waits_until_every_child_has_answered_and_starts_a_dead_one_again():
    pool = DrawProcesses(loaders.load_tiny, processes=2, niceness=0, timeout=120)
    try:
        assert pool.ready() == 2
        assert pool.started == 2 and all(child.answered and child.alive() for child in pool._children)
        assert pool.ready() == 2 and pool.started == 2  # running children are only asked again
        first = pool._children[0].process.pid
        os.kill(first, signal.SIGKILL)
        wait_until(lambda: not pool._children[0].alive())
        assert pool.ready() == 2 and pool.started == 3 and pool._children[0].process.pid != first
    finally:
        pool.close()
    assert pool.ready() == 0  # closed: nothing started, no wait


def test_the_draw_process_settings_are_read_and_a_bad_value_is_refused_naming_its_variable(monkeypatch):
    from core import dashboard_settings
    from core.errors import InputError

    for name in ("BNN_DRAW_PROCESSES", "BNN_DRAW_NICENESS", "BNN_DRAW_PROCESS_MB", "BNN_DRAW_SECONDS"):
        monkeypatch.delenv(name, raising=False)
    assert dashboard_settings.draw_process_options() == {
        "processes": 2,
        "niceness": 10,
        "max_bytes": 1024 * 2**20,
        "timeout": 120.0,
    }
    monkeypatch.setenv("BNN_DRAW_PROCESSES", "0")
    monkeypatch.setenv("BNN_DRAW_PROCESS_MB", "512")
    options = dashboard_settings.draw_process_options()
    assert options["processes"] == 0 and options["max_bytes"] == 512 * 2**20
    for name, bad in (("BNN_DRAW_PROCESSES", "-1"), ("BNN_DRAW_NICENESS", "20"), ("BNN_DRAW_SECONDS", "nan")):
        monkeypatch.setenv(name, bad)
        with pytest.raises(InputError, match=name):
            dashboard_settings.draw_process_options()
        monkeypatch.delenv(name)
    monkeypatch.setenv("BNN_CARDS_POLL_SECONDS", "0")
    with pytest.raises(InputError, match="BNN_CARDS_POLL_SECONDS"):
        dashboard_settings.CARDS_POLL_SECONDS.read()


def test_use_processes_with_zero_keeps_the_draws_in_this_process():
    cache = DrawCache()
    cache.use_processes(0, loaders.load_tiny)
    assert cache.processes is None
    run = classification_run(seed=3)
    assert refine(cache, run, "bma", 3, None, None) == Progress(3, 3)
    assert cache.draws_elsewhere == 0 and cache.draws_computed == 3


def test_a_draw_runs_on_the_servers_thread_count_of_the_moment():
    """The server's thread count travels with each request: a child started at another count (or a
    server whose count changed after the children started) draws as the server would now."""
    import torch

    from core.predict.draw_paths import fingerprint
    from core.predict.draw_process import _answer

    before = torch.get_num_threads()
    other = 2 if before == 1 else 1
    run = classification_run(seed=3)
    request = DrawRequest("3", "test", "bma", 2, None, None, 0, None, 0, "plain", fingerprint(run.model), other)
    try:
        output, *_ = _answer(request, OrderedDict(), loaders.load_tiny)
        assert torch.get_num_threads() == other and output.shape == (40, 3)
    finally:
        torch.set_num_threads(before)


def test_the_training_niceness_is_a_setting_below_which_the_draws_come_first(monkeypatch):
    from core import dashboard_settings
    from core.errors import InputError
    from dashboard import settings, training_process

    monkeypatch.delenv("BNN_TRAINING_NICENESS", raising=False)
    assert settings.training_niceness() == training_process.TRAINING_NICENESS == 19
    assert dashboard_settings.TRAINING_NICENESS.default >= dashboard_settings.DRAW_NICENESS.default
    monkeypatch.setenv("BNN_TRAINING_NICENESS", "10")
    assert settings.training_niceness() == 10
    for bad in ("20", "-1", "x"):
        monkeypatch.setenv("BNN_TRAINING_NICENESS", bad)
        with pytest.raises(InputError, match="BNN_TRAINING_NICENESS"):
            settings.training_niceness()


@pytest.mark.slow  # starts two Python processes (importing torch: seconds)
def test_prepare_has_every_child_load_the_run_before_its_first_draw(tmp_path, monkeypatch):
    loads = tmp_path / "loads"
    monkeypatch.setenv(loaders.LOADS_VARIABLE, str(loads))  # children inherit it: each load, one line
    pool = DrawProcesses(loaders.load_tiny, processes=2, niceness=0, timeout=120)
    try:
        run = classification_run(seed=3)  # the run the children rebuild (load_tiny("3"))
        x = run.dataset().x_test
        cache = DrawCache()
        cache.prepare(run, "3")  # no draw processes yet: nothing to do
        cache.use_processes(pool)
        cache.prepare(run, "3")
        cache.prepare(run, "3")  # once per run
        wait_until(lambda: loads.exists() and loads.read_text().split() == ["3", "3"])
        assert refine(cache, run, "mpm", 6, None, None) == Progress(6, 6)
        assert loads.read_text().split() == ["3", "3"] and cache.draws_elsewhere == 6  # no draw loaded it again
        assert_same(cache.predict(run, x, "test", "3", "mpm", 6), run.predict(x, mode="mpm", samples=6))
    finally:
        pool.close()

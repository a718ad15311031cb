"""dashboard.prepare_lesson: a lesson's draws prepared before class are the ones the server reads, equal bit
for bit to an uncached prediction; a second preparation draws nothing; every bad input is one line."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from core.errors import BNNError
from core.lessons import parse_lesson
from core.predict import DrawCache
from dashboard import backend, cache, prepare_lesson

LESSON = """
title = "t"
summary = "s"
[[step]]
page = "pruning"
title = "a"
text = "b"
run = { dataset = "two-moons", method = "lbbnn", hidden = [16, 16] }
view = { threshold = 0.4, R = 3 }
"""


@pytest.fixture
def fresh_server(tmp_path, monkeypatch):
    """A store of its own with the shipped lessons' runs; one draw process; a fresh draw cache per call."""
    monkeypatch.setenv("BNN_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("BNN_SERVE_DIR", raising=False)
    monkeypatch.setenv("BNN_DRAW_PROCESSES", "1")
    monkeypatch.setenv("BNN_LESSON_RUNS", "1")  # the shipped lessons' runs installed, as on a first start
    caches = []

    def restart():  # a server started anew: nothing in memory, the kept folder on disk
        draws = DrawCache(backend.draw_cache_bytes(), compute_slots=1)
        monkeypatch.setattr(backend, "DRAW_CACHE", draws)
        monkeypatch.setattr(cache, "_draw_processes_set", False)
        caches.append(draws)
        return draws

    yield restart
    for draws in caches:
        if draws.processes is not None:
            draws.processes.close()


def _lines(lesson, samples=None, thresholds=()):
    lines = []
    code = prepare_lesson.prepare(
        lesson, samples or prepare_lesson.lesson_samples(lesson), list(thresholds), lines.append
    )
    return code, lines


def test_prepared_draws_are_read_by_the_next_server_and_equal_the_uncached_prediction(fresh_server):
    lesson = parse_lesson(LESSON, "t")
    fresh_server()
    code, lines = _lines(lesson, thresholds=[0.7])
    assert code == 0, lines
    # bma, mpm at the default cut, prune at the view's 0.4 and at 0.7: four plans of the view's R = 3, all drawn
    drawn = [line for line in lines if "R = 3: 3 draws kept (3 drawn, 0 read" in line]
    assert len(drawn) == 4 and any("prune at 0.4" in line for line in drawn), lines

    draws = fresh_server()  # the class's server: it reads what the teacher prepared
    cache.draw_processes_once()
    run_id = lesson.steps[0].run_id()
    run = backend.load_run(run_id)
    x = run.dataset().x_test
    for mode, threshold in (("bma", None), ("mpm", 0.4), ("mpm", 0.7)):
        before = draws.draws_shared
        assert draws.extend(run, x, "test", run_id, mode, 3, threshold, 0) == 3
        assert draws.draws_shared - before == 3 and draws.shared.written == 0  # read, none drawn again
        kept = draws.predict(run, x, "test", owner=run_id, mode=mode, samples=3, threshold=threshold, seed=0)
        plain = run.predict(x, mode=mode, samples=3, threshold=threshold, seed=0)
        assert torch.equal(torch.as_tensor(kept.probs), torch.as_tensor(plain.probs))

    fresh_server()  # preparing again computes nothing
    code, lines = _lines(lesson, thresholds=[0.7])
    assert code == 0 and sum("(0 drawn, 3 read" in line for line in lines) == 4, lines


def test_a_run_not_in_the_store_is_named_and_nothing_is_trained(fresh_server):
    lesson = parse_lesson(LESSON.replace("[16, 16]", "[7]"), "t")  # no such run ships
    fresh_server()
    code, lines = _lines(lesson)
    assert code == 1
    assert [line for line in lines if "not in the store; train it first" in line]
    assert backend.list_runs() and lesson.steps[0].run_id() not in {info.run_id for info in backend.list_runs()}


def test_a_threshold_outside_the_runs_range_is_left_out_with_a_line(fresh_server):
    lesson = parse_lesson(LESSON, "t")
    fresh_server()
    code, lines = _lines(lesson, samples=1, thresholds=[2.5])
    assert code == 0
    assert any("threshold 2.5 is outside this run's range 0 to 1" in line for line in lines)
    assert not any("prune at 2.5" in line for line in lines)


def test_without_draw_processes_nothing_is_kept_so_nothing_is_prepared(fresh_server, monkeypatch):
    monkeypatch.setenv("BNN_DRAW_PROCESSES", "0")
    fresh_server()
    code, lines = _lines(parse_lesson(LESSON, "t"))
    assert code == 1 and "BNN_DRAW_PROCESSES is 0" in lines[0]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["no-such-lesson"], "lesson: 'no-such-lesson' is not one of"),
        (["../etc/passwd"], "lesson:"),
        (["first-steps", "--samples", "0"], "--samples: '0' is out of range"),
        (["first-steps", "--samples", "101"], "--samples: '101' is out of range"),
        (["first-steps", "--samples", "ten"], "--samples"),
        (["first-steps", "--samples", ""], "--samples"),
        (["first-steps", "--samples", "-3"], "--samples"),
        ([""], "lesson:"),
        (["first-steps", "--thresholds", "1e300"], "--thresholds: '1e300' is out of range"),
        (["first-steps", "--thresholds", ""], "--thresholds"),
        (["first-steps", "--thresholds", "0.5,nan"], "--thresholds"),
        (["first-steps", "--thresholds", ",".join(["0.5"] * 51)], "--thresholds: how many: 51 is out of range"),
    ],
)
def test_bad_inputs_are_one_line_before_anything_starts(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("BNN_CACHE_DIR", str(tmp_path))
    with pytest.raises(SystemExit) as exit_info:
        prepare_lesson.main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []  # no store, no draws folder, no process


@given(
    st.lists(
        st.floats(-1e6, 1e6, allow_nan=False, allow_subnormal=False), min_size=1, max_size=prepare_lesson.MAX_THRESHOLDS
    )
)
def test_thresholds_read_back_as_written(values):
    assert prepare_lesson._thresholds(",".join(repr(v) for v in values)) == values


@given(st.text(max_size=20).filter(lambda t: t.strip() and not t.strip().lstrip("+-").replace(".", "", 1).isdigit()))
def test_a_part_that_is_no_number_is_refused(word):
    with pytest.raises(BNNError):
        prepare_lesson._thresholds(f"0.5,{word}")


def test_ctrl_c_ends_with_one_line_and_keeps_what_was_drawn(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("BNN_CACHE_DIR", str(tmp_path))

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(prepare_lesson, "prepare", interrupted)
    assert prepare_lesson.main(["first-steps"]) == 130
    err = capsys.readouterr().err
    assert "stopped; the draws kept so far stay kept" in err and "Traceback" not in err

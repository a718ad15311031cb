"""The load test's count of draws: waited for, computed ahead, unread, computed twice (no server)."""

from __future__ import annotations

import json

from benchmarks.classroom.draws import Wait, count_draws, read_draws


def draw(index, threshold=0.5, end=10.0, pid=1, run="a", where="process"):
    return {
        "draw": index,
        "run": run,
        "inputs": "test",
        "mode": "mpm",
        "threshold": threshold,
        "seed": 0,
        "where": where,
        "pid": pid,
        "start": end - 0.1,
        "end": end,
    }


def test_each_draw_is_waited_for_ahead_unread_or_twice():
    waits = [
        Wait(session=1, run="a", threshold=0.5, samples=2, start=9.0, end=12.0),
        Wait(session=2, run="a", threshold=0.25, samples=5, start=30.0, end=31.0),
    ]
    draws = [
        draw(0, end=10.0),  # session 1 waits for draws 0 and 1 at 0.5
        draw(1, end=11.0),
        draw(2, end=11.5),  # past session 1's R: nobody ever waits for it
        draw(0, threshold=0.25, end=20.0),  # nobody waits now; session 2 reads it later
        draw(1, threshold=0.25, end=21.0, run="b"),  # another run: nobody waits
        draw(0, end=13.0, pid=2),  # the same draw again, in another server process, after the wait ended
        draw(1, end=14.0, pid=1, where="request"),  # again in the same process
    ]
    counts = count_draws(draws, waits)
    assert counts.computed == 7 and counts.servers == 2 and counts.waits == 2
    assert (counts.waited, counts.ahead, counts.unread) == (2, 1, 4)
    assert (counts.twice, counts.twice_elsewhere) == (2, 1)
    assert counts.by_place == {"process": 6, "request": 1}
    text = "\n".join(counts.lines(moves=4, interactions=10, process_cpu=1.2))
    assert "the draw processes' CPU 1.2 s, 0.200 s per draw computed there" in text
    assert "draws computed: 7 by 2 server process(es)" in text and "1.8 per slider move (4)" in text
    assert "computed twice (the same run, threshold and draw computed before) 2 (29%), 1 of them" in text


def test_the_log_gives_only_draws_of_the_class(tmp_path):
    log = tmp_path / "reruns.jsonl"
    lines = [
        {"session": "s", "page": "Pruning", "start": 5.0, "end": 5.1, "cpu": 0.01},  # a script run
        draw(0, end=4.0),  # before the class
        draw(1, end=6.0),
    ]
    log.write_text("\n".join(json.dumps(line) for line in lines) + "\n\n")
    assert [d["draw"] for d in read_draws(log, since=5.0)] == [1]
    assert read_draws(tmp_path / "missing.jsonl", since=0.0) == []
    assert count_draws([], [], "emptied").lines(1, 1) == [
        "- kept draws (BNN_CACHE_DIR/draws): emptied; read from them in the class: 0",
        "- draws computed: none logged (no sampled predictions, all read, or no $BNN_RERUN_LOG)",
    ]


def test_draws_read_from_the_kept_folder_are_counted_apart_from_those_computed():
    waits = [Wait(session=1, run="a", threshold=0.5, samples=2, start=9.0, end=12.0)]
    draws = [draw(0, end=10.0, where="kept"), draw(1, end=11.0), draw(0, threshold=0.25, end=12.0, where="kept")]
    counts = count_draws(draws, waits, "3 files kept")
    assert counts.computed == 1 and counts.kept == 2 and counts.by_place == {"process": 1}
    assert counts.twice == 0  # a draw read is no second computation
    assert "read from them in the class: 2" in "\n".join(counts.lines(moves=1, interactions=1))


def test_a_cold_class_empties_the_kept_draws_and_a_kept_one_counts_them(tmp_path):
    from benchmarks.classroom.draws import kept_draws_at_start

    folder = tmp_path / "draws"
    assert kept_draws_at_start(tmp_path, keep=True) == "0 files (0 MB) kept from earlier classes (--kept-draws)"
    folder.mkdir()
    for name in ("a.draw.npz", "b.draw.npz"):
        (folder / name).write_bytes(b"x" * 1000)
    (folder / "other.txt").write_text("not a draw")
    assert kept_draws_at_start(tmp_path, keep=True).startswith("2 files")
    assert len(list(folder.iterdir())) == 3  # kept: nothing removed
    assert kept_draws_at_start(tmp_path, keep=False) == "emptied before the class (2 files removed): a cold class"
    assert [p.name for p in folder.iterdir()] == ["other.txt"]  # only draw files go


def test_the_draw_cache_tells_its_observer_of_each_draw_and_where_it_ran():
    from core.predict import DrawCache
    from tests.test_draw_cache import classification_run

    run = classification_run(seed=1)
    x = run.dataset().x_test
    cache = DrawCache()
    seen = []
    cache.observer = lambda key, index, where, started: seen.append((key.threshold, index, where))
    cache.predict(run, x, "test", "run", "mpm", 2, 0.5)  # a request that lacked them
    cache.extend(run, x, "test", "run", "mpm", 4, 0.5)  # the background's
    cache.predict(run, x, "test", "run", "mpm", 4, 0.5)  # all kept: nothing drawn
    assert seen == [(0.5, 0, "request"), (0.5, 1, "request"), (0.5, 2, "background"), (0.5, 3, "background")]

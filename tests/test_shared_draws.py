"""Draws shared by dashboard.serve's server processes (core.predict.shared_draws): a draw another
process computed is read, not drawn again, and the numbers stay bit for bit the uncached ones."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import torch

from core.predict import DrawCache
from core.predict.draw_paths import DrawPath, forget_paths
from core.predict.draw_process import DrawReply, _answer
from core.predict.shared_draws import SharedDraws
from tests import draw_process_loaders as loaders
from tests.test_draw_cache import assert_same, classification_run


class InProcess:
    """Stands in for core.predict.draw_process.DrawProcesses: answers as a child would, here, counting."""

    processes = 1

    def __init__(self):
        self.runs: OrderedDict = OrderedDict()
        self.asked = 0

    def serves(self, inputs):
        return inputs == "test"

    def draw(self, request):
        self.asked += 1
        output, packed, shapes, path = _answer(request, self.runs, loaders.load_tiny)
        used = [
            torch.from_numpy(np.unpackbits(bits, count=int(np.prod(shape))).reshape(shape).astype(bool))
            for bits, shape in zip(packed, shapes)
        ]
        return DrawReply(torch.from_numpy(output), used, path)


def server(folder, max_bytes=2**30):
    cache = DrawCache()
    cache.use_processes(InProcess())
    cache.shared = SharedDraws(folder, max_bytes)
    return cache


def test_a_draw_another_process_computed_is_read_and_the_numbers_are_the_uncached_ones(tmp_path):
    run = classification_run(seed=3)  # the run the stand-in rebuilds (load_tiny("3"))
    x = run.dataset().x_test
    first, second = server(tmp_path), server(tmp_path)
    assert first.extend(run, x, "test", "3", "mpm", 6, 0.5) == 6
    assert first.processes.asked == 6 and first.shared.written == 6
    # The other process (its own cache and, here, the same path table: one interpreter) reads them all.
    assert second.extend(run, x, "test", "3", "mpm", 8, 0.5) == 8
    assert second.processes.asked == 2 and second.draws_shared == 6 and second.draws_computed == 2
    uncached = run.predict(x, mode="mpm", samples=8, threshold=0.5)
    assert_same(second.predict(run, x, "test", "3", "mpm", 8, 0.5), uncached)
    assert_same(first.predict(run, x, "test", "3", "mpm", 8, 0.5), uncached)  # 6 kept, 2 read back
    assert first.processes.asked == 6


def test_a_draw_by_another_path_is_drawn_again(tmp_path):
    from core.predict.draw_paths import remember_path, shape_key
    from core.predict.engine import resolve_model

    run = classification_run(seed=3)
    x = run.dataset().x_test
    first = server(tmp_path)
    first.extend(run, x, "test", "3", "mpm", 3, 0.5)
    drawn_by = SharedDraws(tmp_path, 2**30).get(next(tmp_path.glob("*.draw.npz")).name)[2]
    # This process keeps another path for the plan than the one the files were drawn by.
    forget_paths()
    model = resolve_model(run)
    other = DrawPath.ACTIVE_DENSE if drawn_by == DrawPath.PLAIN.value else DrawPath.PLAIN
    remember_path(shape_key(model, 0.5, tuple(x.shape), model.keep_masks(0.5), None), other)
    second = server(tmp_path)
    second.extend(run, x, "test", "3", "mpm", 3, 0.5)
    assert second.draws_shared == 0 and second.processes.asked == 3
    forget_paths()


def test_damaged_files_are_drawn_again_and_the_folder_is_bounded(tmp_path):
    run = classification_run(seed=3)
    x = run.dataset().x_test
    first = server(tmp_path)
    first.extend(run, x, "test", "3", "mpm", 4, 0.5)
    files = sorted(tmp_path.glob("*.draw.npz"))
    assert len(files) == 4
    for file in files:
        file.write_bytes(b"not a draw")
    second = server(tmp_path)
    assert second.extend(run, x, "test", "3", "mpm", 4, 0.5) == 4 and second.draws_shared == 0
    third = server(tmp_path)  # the damaged files were replaced by the second's draws
    assert third.extend(run, x, "test", "3", "mpm", 4, 0.5) == 4 and third.draws_shared == 4
    assert_same(third.predict(run, x, "test", "3", "mpm", 4, 0.5), run.predict(x, mode="mpm", samples=4, threshold=0.5))
    bounded = server(tmp_path / "small", max_bytes=1)  # keeps nothing beyond 1 byte: each file goes at once
    bounded.extend(run, x, "test", "3", "mpm", 3, 0.5)
    assert list((tmp_path / "small").glob("*.draw.npz")) == [] and bounded.shared.written == 3


def test_a_file_whose_shape_asks_for_more_than_its_bits_is_refused_before_anything_is_made(tmp_path, monkeypatch):
    run = classification_run(seed=3)
    x = run.dataset().x_test
    first = server(tmp_path)
    first.extend(run, x, "test", "3", "mpm", 1, 0.5)
    (file,) = tmp_path.glob("*.draw.npz")
    with np.load(file) as held:
        arrays = dict(held)
    arrays["shape0"] = np.array([10**6, 10**6], dtype=np.int64)  # a terabit of "used weights" for one layer
    with open(file, "wb") as handle:
        np.savez(handle, **arrays)
    made = []
    real = np.unpackbits
    monkeypatch.setattr(np, "unpackbits", lambda *a, **k: made.append(k.get("count")) or real(*a, **k))
    assert first.shared.get(file.name) is None and not file.exists()  # refused and removed, nothing unpacked
    assert made == []


def test_a_folder_that_cannot_be_made_leaves_each_process_its_own_draws(tmp_path, monkeypatch):
    from dashboard import backend

    monkeypatch.setattr(backend, "DRAW_CACHE", DrawCache())
    blocked = tmp_path / "serve"
    blocked.write_text("a file where the folder should be")
    backend.DRAW_CACHE.share(blocked / "draws", 2**20)
    assert backend.DRAW_CACHE.shared is None
    backend.DRAW_CACHE.share(tmp_path / "ok" / "draws", 2**20)
    assert backend.DRAW_CACHE.shared is not None and (tmp_path / "ok" / "draws").is_dir()


def test_a_run_s_kept_draws_start_with_its_id_and_go_with_it(tmp_path):
    """Kept across restarts (the dashboard keeps them beside the run store): a deleted or retrained run's
    files are deleted with its entries, another run's stay."""
    run = classification_run(seed=3)
    x = run.dataset().x_test
    cache = server(tmp_path)
    owner, other = "0003", "00003"  # run ids the stand-in loads as classification_run(seed=3)
    assert cache.extend(run, x, "test", owner, "mpm", 3, 0.5) == 3
    assert cache.extend(run, x, "test", other, "mpm", 2, 0.5) == 2
    names = sorted(p.name for p in tmp_path.iterdir())
    assert len(names) == 5 and sum(n.startswith(owner + "-") for n in names) == 3
    cache.forget(owner)
    assert sorted(p.name for p in tmp_path.iterdir()) == [n for n in names if n.startswith(other + "-")]
    # a restarted server (a new cache on the same folder) reads the other run's draws, computes none
    restarted = server(tmp_path)
    assert restarted.extend(run, x, "test", other, "mpm", 2, 0.5) == 2
    assert restarted.processes.asked == 0 and restarted.draws_shared == 2
    assert_same(
        restarted.predict(run, x, "test", other, "mpm", 2, 0.5), run.predict(x, mode="mpm", samples=2, threshold=0.5)
    )
    # an owner that is no run id has no prefix: forgetting it deletes nothing
    assert SharedDraws(tmp_path, 2**20).forget("../x") == 0 and len(list(tmp_path.iterdir())) == 2


def test_the_dashboard_keeps_its_draws_beside_the_run_store(tmp_path, monkeypatch):
    from dashboard import backend, cache

    monkeypatch.setenv("BNN_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("BNN_SERVE_DIR", raising=False)
    assert cache.kept_draws_folder() == tmp_path / "draws"
    used = []
    monkeypatch.setattr(backend.DRAW_CACHE, "use_processes", lambda *args, **kwargs: None)
    monkeypatch.setattr(backend.DRAW_CACHE, "share", lambda folder, size: used.append((folder, size)))
    monkeypatch.setattr(cache, "_draw_processes_set", False)
    cache.draw_processes_once()
    assert used == [(tmp_path / "draws", backend.draw_cache_bytes())]  # a lone `streamlit run` too

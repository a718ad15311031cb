"""RunStore and train_run: caching, atomic writes, corruption detection, LRU eviction."""

from __future__ import annotations

import errno
import json
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest
import torch

import core.runs.store as store_module
import core.runs.store_disk as disk_module  # the store's doors: every disk change goes through them
from core.errors import RunStoreError, TrainingCancelled, TrainingDivergedError
from core.runs import RunConfig, RunStore, delete_run, list_runs, load_run, train_run
from core.runs.store import RunContents, sha256_file

TINY = RunConfig(dataset="two-moons", hidden=(16,), train={"epochs": 1}, device="cpu")


@pytest.fixture(scope="module")
def trained_store(tmp_path_factory) -> tuple[Path, str]:
    """One tiny run trained once; tests copy the store and may damage the copy."""
    cache = tmp_path_factory.mktemp("trained")
    run = train_run(TINY, cache_dir=cache)
    return cache, run.run_id


@pytest.fixture
def store_copy(trained_store, tmp_path) -> tuple[Path, str]:
    cache, run_id = trained_store
    copy = tmp_path / "cache"
    shutil.copytree(cache, copy)
    return copy, run_id


def test_second_train_returns_the_cached_run_without_training(store_copy):
    cache, run_id = store_copy
    calls = []
    run = train_run(TINY, cache_dir=cache, progress=calls.append)
    assert run.from_cache and run.run_id == run_id and calls == []
    fresh = train_run(TINY, cache_dir=cache, progress=calls.append, force=True)
    assert not fresh.from_cache and len(calls) == TINY.train.epochs


def test_loaded_run_matches_what_was_trained(tmp_path):
    run = train_run(TINY, cache_dir=tmp_path)
    loaded = load_run(run.run_id[:6], cache_dir=tmp_path)
    assert loaded.run_id == run.run_id and loaded.config == TINY and loaded.from_cache
    assert not loaded.model.training
    trained_state, loaded_state = run.model.state_dict(), loaded.model.state_dict()
    assert trained_state.keys() == loaded_state.keys()
    for name in trained_state:
        assert torch.equal(trained_state[name].cpu(), loaded_state[name]), name
    assert loaded.metrics == pytest.approx(run.metrics)
    assert [h["loss"] for h in loaded.history] == pytest.approx([h["loss"] for h in run.history])
    assert loaded.dataset().fingerprint == run.dataset().fingerprint
    assert loaded.created == pytest.approx(run.created)
    x = torch.from_numpy(loaded.dataset().x_test[:5])
    assert torch.allclose(
        loaded.model.forward_with_weights(x, loaded.model.mean_weights()),
        run.model.forward_with_weights(x, run.model.mean_weights()),
    )


def test_listing_and_deleting(store_copy):
    cache, run_id = store_copy
    [info] = list_runs(cache)
    assert info.run_id == run_id and info.dataset == "two-moons" and info.method == "lbbnn"
    assert info.status == "ok" and info.size_bytes > 0 and info.metrics == load_run(run_id, cache).metrics
    assert delete_run(run_id[:4], cache) == run_id
    assert list_runs(cache) == []
    with pytest.raises(RunStoreError, match="no cached run"):
        load_run(run_id, cache)


def test_ambiguous_prefix_is_refused(store_copy):
    cache, run_id = store_copy
    store = RunStore(cache)
    twin = run_id[:3] + ("0" if run_id[3] != "0" else "1") + run_id[4:]
    shutil.copytree(store.path(run_id), store.path(twin))
    with pytest.raises(RunStoreError, match="matches 2 runs"):
        store.resolve(run_id[:3])
    assert store.resolve(run_id) == run_id


def _flip_bytes(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


def test_corrupted_weights_are_reported_never_loaded(store_copy):
    cache, run_id = store_copy
    weights = RunStore(cache).path(run_id) / "weights.safetensors"
    _flip_bytes(weights, weights.stat().st_size - 3)  # inside the tensor data: the header still parses
    with pytest.raises(RunStoreError) as info:
        load_run(run_id, cache)
    message = str(info.value)
    assert "weights.safetensors" in message and f"python -m core rm {run_id}" in message
    # train_run does not trust it either: it retrains and replaces the run.
    rerun = train_run(TINY, cache_dir=cache)
    assert not rerun.from_cache and rerun.run_id == run_id
    RunStore(cache).verify(run_id)


def test_truncated_json_is_reported(store_copy):
    cache, run_id = store_copy
    store = RunStore(cache)
    history = store.path(run_id) / "history.json"
    history.write_text(history.read_text()[:20])
    with pytest.raises(RunStoreError, match="history.json"):
        load_run(run_id, cache)
    # The listing checks sizes against the manifest every time: a truncated file is never listed as healthy.
    row = store.info(run_id)
    assert row.status == "corrupt" and "history.json" in row.error and row.metrics == {}


def test_unparseable_json_with_a_matching_checksum_is_reported(store_copy):
    cache, run_id = store_copy
    folder = RunStore(cache).path(run_id)
    (folder / "metrics.json").write_text('{"accuracy": 0.9')
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["files"]["metrics.json"]["sha256"] = sha256_file(folder / "metrics.json")
    manifest["files"]["metrics.json"]["bytes"] = (folder / "metrics.json").stat().st_size
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(RunStoreError, match="cannot parse .*metrics.json"):
        load_run(run_id, cache)
    assert RunStore(cache).info(run_id).status == "corrupt"


def test_a_folder_without_manifest_is_incomplete(store_copy):
    cache, run_id = store_copy
    (RunStore(cache).path(run_id) / "manifest.json").unlink()
    [info] = list_runs(cache)
    assert info.status == "corrupt" and "incomplete" in info.error
    with pytest.raises(RunStoreError, match="incomplete"):
        load_run(run_id, cache)


def test_divergence_writes_nothing_and_keeps_earlier_runs(store_copy, monkeypatch):
    cache, run_id = store_copy
    import core.train

    def diverge(*args, **kwargs):
        raise TrainingDivergedError("the loss became NaN in epoch 1")

    monkeypatch.setattr(core.train, "train", diverge)
    with pytest.raises(TrainingDivergedError):
        train_run(TINY.replace(seed=5), cache_dir=cache)
    assert [r.run_id for r in list_runs(cache)] == [run_id]
    RunStore(cache).verify(run_id)


def test_cancel_leaves_nothing(tmp_path):
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(TrainingCancelled):
        train_run(TINY, cache_dir=tmp_path, cancel=cancel)
    assert list_runs(tmp_path) == []
    assert not any((tmp_path / "runs" / ".tmp").iterdir())


def test_interrupt_while_writing_removes_the_temporary_folder(tmp_path, monkeypatch):
    real = disk_module._write_json

    def interrupted(path, value):
        if path.name == "history.json":
            raise KeyboardInterrupt
        real(path, value)

    monkeypatch.setattr(disk_module, "_write_json", interrupted)
    with pytest.raises(KeyboardInterrupt):
        train_run(TINY, cache_dir=tmp_path)
    assert list_runs(tmp_path) == []
    assert list((tmp_path / "runs" / ".tmp").iterdir()) == []


def _contents(size: int, summaries=None) -> RunContents:
    return RunContents(
        config=TINY.to_dict(),
        info={"created": 1.0, "model": {"in_features": 2, "out_classes": 2}},
        state_dict={"w": torch.zeros(size)},
        metrics={"accuracy": float("nan")},
        history=[],
        summaries=summaries or {},
    )


def test_summaries_and_aliased_tensors_round_trip(tmp_path):
    store = RunStore(tmp_path)
    shared = torch.arange(6.0).reshape(2, 3)
    summaries = {
        "sorted_statistics": [np.linspace(0, 1, 5), np.arange(3)],
        "sweep": {"threshold": np.array([0.1, 0.5]), "label": "default", "accuracy": [0.5, 0.7]},
        "masks": np.array([True, False]),
        "r": 10,
    }
    contents = _contents(4, summaries)
    contents.state_dict = {"a": shared, "b": shared, "view": shared.t(), "flag": torch.tensor(True)}
    store.write("abc", contents)
    back = store.read("abc")
    assert torch.equal(back.state_dict["a"], shared) and torch.equal(back.state_dict["view"], shared.t())
    assert back.state_dict["flag"].dtype == torch.bool
    np.testing.assert_array_equal(back.summaries["sorted_statistics"][0], np.linspace(0, 1, 5))
    np.testing.assert_array_equal(back.summaries["sweep"]["threshold"], [0.1, 0.5])
    assert back.summaries["sweep"]["label"] == "default" and back.summaries["r"] == 10
    assert back.summaries["masks"].dtype == bool
    assert np.isnan(back.metrics["accuracy"])


def test_size_cap_evicts_least_recently_used(tmp_path):
    store = RunStore(tmp_path)
    for run_id in ("a1", "b2", "c3"):
        store.write(run_id, _contents(25_000))  # ~100 KB each
    one_run = store.total_bytes() // 3
    for age, run_id in enumerate(("a1", "b2", "c3")):
        store_module.os.utime(store.path(run_id) / "last_used", (1000 + age, 1000 + age))
    store.read("a1")  # loading makes a1 the most recently used
    capped = RunStore(tmp_path, max_bytes=int(2.5 * one_run))
    assert capped.enforce_cap() == ["b2"]
    assert capped.run_ids() == ["a1", "c3"]
    capped.write("d4", _contents(25_000))  # the new run is kept; the oldest other one goes
    assert capped.run_ids() == ["a1", "d4"]


def test_cache_dir_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("BNN_CACHE_DIR", str(tmp_path / "env-cache"))
    monkeypatch.setenv("BNN_CACHE_MAX_MB", "1.5")
    store = RunStore()
    assert store.root == tmp_path / "env-cache" / "runs"
    assert store.max_bytes == int(1.5 * 1024 * 1024)


class _Payload:
    """Unpickling this creates `marker`: the proof that something unpickled a file of the store."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _forbid_unpickling(monkeypatch) -> None:
    """Every unpickling entry point (pickle, _pickle, torch.load, numpy.load) raises when called."""
    import _pickle
    import pickle

    def forbidden(*args, **kwargs):
        raise AssertionError("the store unpickled something")

    for module in (pickle, _pickle):
        for name in ("load", "loads", "Unpickler"):
            monkeypatch.setattr(module, name, forbidden)
    monkeypatch.setattr(pickle, "_load", forbidden)
    monkeypatch.setattr(pickle, "_loads", forbidden)
    monkeypatch.setattr(pickle, "_Unpickler", forbidden)
    monkeypatch.setattr(torch, "load", forbidden)
    monkeypatch.setattr(torch.serialization, "load", forbidden)
    monkeypatch.setattr(np, "load", forbidden)


def test_loading_and_listing_runs_call_no_unpickler(store_copy, monkeypatch):
    cache, run_id = store_copy
    expected = RunStore(cache).read(run_id, touch=False).state_dict
    _forbid_unpickling(monkeypatch)
    loaded = load_run(run_id, cache_dir=cache)
    assert [info.run_id for info in list_runs(cache)] == [run_id]
    state = loaded.model.state_dict()
    assert state.keys() == expected.keys() and all(torch.equal(state[k], expected[k]) for k in expected)
    RunStore(cache).verify(run_id)


def test_a_pickle_planted_in_a_run_folder_is_never_executed(store_copy, tmp_path):
    """A pickle payload in place of each stored file, checksums updated so the manifest vouches for it:
    loading reports the file as unreadable and the payload never runs."""
    import pickle

    cache, run_id = store_copy
    folder = RunStore(cache).path(run_id)
    names = [
        "weights.safetensors",
        "summaries.safetensors",
        "config.json",
        "info.json",
        "metrics.json",
        "history.json",
        "summaries.json",
    ]
    for name in names:
        original = {path.name: path.read_bytes() for path in folder.iterdir() if path.is_file()}
        marker = tmp_path / f"executed-{name}"
        (folder / name).write_bytes(pickle.dumps(_Payload(marker)))
        manifest = json.loads(original["manifest.json"])
        manifest["files"][name]["sha256"] = sha256_file(folder / name)
        manifest["files"][name]["size"] = (folder / name).stat().st_size
        (folder / "manifest.json").write_text(json.dumps(manifest))
        with pytest.raises(RunStoreError, match=name.replace(".", r"\.")):
            load_run(run_id, cache_dir=cache)
        list_runs(cache)
        assert not marker.exists(), f"a pickle in {name} was executed"
        for file_name, data in original.items():
            (folder / file_name).write_bytes(data)
    assert load_run(run_id, cache_dir=cache).run_id == run_id  # the restored run still loads
    pickle.loads(pickle.dumps(_Payload(tmp_path / "self-check"))).close()
    assert (tmp_path / "self-check").exists()  # the payload does run when something unpickles it


def test_a_run_whose_manifest_predates_its_own_checksum_still_loads(store_copy):
    cache, run_id = store_copy
    manifest_path = RunStore(cache).path(run_id) / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    del manifest["own_sha256"]
    manifest_path.write_text(json.dumps(manifest))
    store_module._verdicts.clear()
    [info] = list_runs(cache)
    assert info.status == "ok"
    assert load_run(run_id, cache).run_id == run_id


def no_swap(first, second):
    raise OSError(errno.ENOSYS, "renameat2 is not available")


def test_retraining_killed_before_the_new_run_is_in_keeps_the_old_one(store_copy, monkeypatch):
    """--force on a stored run: killed after the old folder went to the trash and before the new one
    moved in, the next start finds the old run (not 'no runs')."""
    cache, run_id = store_copy
    before = load_run(run_id, cache).metrics
    real_rename, renames = disk_module._rename, []

    class Killed(BaseException):
        pass

    def rename(source, target):
        if renames:  # killed: nothing after the first rename happens
            raise Killed
        renames.append(target)
        real_rename(source, target)

    monkeypatch.setattr(disk_module, "_rename", rename)
    # the two-rename replace (where the file system cannot swap two folders in one step)
    monkeypatch.setattr(
        disk_module, "_exchange", lambda first, second: (_ for _ in ()).throw(OSError(errno.ENOSYS, ""))
    )
    with pytest.raises(Killed):
        train_run(TINY, cache_dir=cache, force=True)
    monkeypatch.setattr(disk_module, "_rename", real_rename)
    assert Path(renames[0]).name.endswith(".replaced") and not RunStore(cache).path(run_id).exists()
    [info] = list_runs(cache)
    assert info.run_id == run_id and info.status == "ok"
    assert load_run(run_id, cache).metrics == pytest.approx(before)
    assert list((cache / "runs" / ".trash").iterdir()) == [] and list((cache / "runs" / ".tmp").iterdir()) == []

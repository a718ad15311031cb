"""RunStore under attack: kills at every point of a write, replace or delete (fault injection and real
SIGKILLs), damaged files of every kind, threads writing, deleting and reading at once, a full or
read-only disk. "Restart" is a fresh RunStore on the same folder: its start-up recovers and cleans.

A simulated kill: the k-th change the store makes on disk (core.runs.store's _mkdir, _rename,
_unlink, _rmdir, _write_file, _open_lock_file) raises Killed, and so does every later one, so no
clean-up handler of the dead writer gets to run (a kill runs none); a file being written when it
dies is left with a prefix of its bytes.
"""

from __future__ import annotations

import errno
import json
import os
import random
import shutil
import signal
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import core.runs.store as store_module
import core.runs.store_disk as disk_module  # the store's doors: every disk change goes through them
from core.cli import main as cli_main
from core.errors import RunStoreError
from core.runs import RunConfig, RunStore, train_run
from core.runs.store import RunContents, sha256_file

TINY = RunConfig(dataset="two-moons", hidden=(16,), train={"epochs": 1}, device="cpu")
DOORS = ("_mkdir", "_rename", "_exchange", "_unlink", "_rmdir", "_write_file", "_open_lock_file")
FILE_KINDS = (
    "weights.safetensors",
    "summaries.safetensors",
    "snapshots.npz",
    "config.json",
    "info.json",
    "metrics.json",
    "history.json",
    "summaries.json",
    "manifest.json",
)
LEFTOVER_DIRS = (".tmp", ".trash", ".locks")


def contents(tag: int) -> RunContents:
    """A small run whose metrics carry `tag` (which version of a run was read back)."""
    return RunContents(
        config=TINY.to_dict(),
        info={"created": 1000.0 + tag, "model": {"in_features": 2, "out_classes": 2}},
        state_dict={"w": torch.arange(300.0) + tag},
        metrics={"tag": tag, "density": 0.5},
        history=[{"loss": 1.0, "epoch": 1}],
        summaries={"a": np.arange(4.0), "b": [1, 2]},
        snapshots={"density": np.linspace(0, 1, 5)},
    )


class Killed(BaseException):
    """The simulated SIGKILL (a BaseException: nothing catches it as an error)."""


class KillSwitch:
    """Counts the store's disk changes; at the `kill_at`-th it dies (see the module docstring)."""

    def __init__(self, kill_at: int | None = None, torn: float = 0.5):
        self.kill_at, self.torn = kill_at, torn
        self.calls, self.dead = 0, False

    def door(self, name: str, real):
        def changed(*args):
            if self.dead:
                raise Killed
            self.calls += 1
            if self.kill_at is not None and self.calls == self.kill_at:
                self.dead = True
                if name == "_write_file":  # torn: part of the file reached the disk
                    path, data = args
                    real(path, data[: int(len(data) * self.torn)])
                raise Killed
            return real(*args)

        return changed


@contextmanager
def injected(switch: KillSwitch | None = None, **replacements):
    """The store's doors wrapped by `switch` (and/or replaced), fsync a no-op (durability is not
    what these tests are about, and it costs milliseconds per file); everything restored after."""
    saved = {name: getattr(disk_module, name) for name in DOORS}
    saved_fsync = os.fsync
    try:
        os.fsync = lambda fd: None
        for name in DOORS:
            real = replacements.get(name, saved[name])
            setattr(disk_module, name, switch.door(name, real) if switch is not None else real)
        yield switch
    finally:
        os.fsync = saved_fsync
        for name, real in saved.items():
            setattr(disk_module, name, real)


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    """A store with runs a1 and b2 (tag 1 each), copied by every scenario."""
    root = tmp_path_factory.mktemp("template")
    store = RunStore(root)
    with injected():
        store.write("a1", contents(1))
        store.write("b2", contents(1))
    return root


def leftovers(root: Path) -> list[str]:
    runs = root / "runs"
    return sorted(
        f"{sub}/{entry.name}" for sub in LEFTOVER_DIRS if (runs / sub).is_dir() for entry in (runs / sub).iterdir()
    )


# What each operation of a scenario may leave: id -> the tags it may have after a kill (None: absent).
OPERATIONS = {
    "write-new": (lambda store: store.write("c3", contents(1)), {"a1": {1}, "b2": {1}, "c3": {None, 1}}),
    "replace": (lambda store: store.write("a1", contents(2), replace=True), {"a1": {1, 2}, "b2": {1}}),
    "delete": (lambda store: store.delete("b2"), {"a1": {1}, "b2": {None, 1}}),
}


def check_after_restart(root: Path, allowed: dict[str, set]) -> dict[str, int | None]:
    """A fresh store on `root`: nothing listed healthy is damaged (every row ok and loadable), every
    run complete before is there, the new one complete or absent, and no leftovers after start-up."""
    store = RunStore(root)
    rows = {row.run_id: row for row in store.list()}
    assert leftovers(root) == [], "start-up left stale temporary folders, trash or lock files"
    assert all(row.status == "ok" for row in rows.values()), [row.error for row in rows.values()]
    found = {}
    for run_id, tags in allowed.items():
        if run_id not in rows:
            assert None in tags, f"run {run_id} was lost"
            found[run_id] = None
            continue
        tag = store.read(run_id, touch=False).metrics["tag"]
        assert tag in tags, f"run {run_id} has tag {tag}, expected one of {tags}"
        assert rows[run_id].metrics["tag"] == tag
        found[run_id] = tag
    assert set(rows) <= set(allowed)
    return found


def run_with_kill(
    template: Path, operation: str, kill_at: int | None, torn: float = 0.5, recovery_kill_at: int | None = None
) -> tuple[KillSwitch, Path]:
    root = Path(tempfile.mkdtemp(prefix="kill-"))
    shutil.copytree(template, root, dirs_exist_ok=True)
    action, _ = OPERATIONS[operation]
    switch = KillSwitch(kill_at, torn)
    with injected(switch):
        try:
            action(RunStore(root))
        except Killed:
            pass
    if recovery_kill_at is not None:  # the restart itself is killed, then the store starts again
        with injected(KillSwitch(recovery_kill_at, torn)):
            try:
                RunStore(root).list()
            except Killed:
                pass
    return switch, root


_change_counts: dict[str, int] = {}


def count_changes(template: Path, operation: str) -> int:
    """How many disk changes the operation makes when nothing kills it."""
    if operation not in _change_counts:
        switch, root = run_with_kill(template, operation, None)
        shutil.rmtree(root)
        _change_counts[operation] = switch.calls
    return _change_counts[operation]


# --- kills at every point ---------------------------------------------------------------------------
@pytest.mark.parametrize("operation", sorted(OPERATIONS))
def test_a_kill_at_every_disk_change_loses_no_run(template, operation):
    """Every kill point of the operation, torn writes both nearly empty and nearly whole."""
    total = count_changes(template, operation)
    assert total >= 10  # the operation does change the disk through the doors
    points = 0
    for kill_at in range(1, total + 1):
        for torn in (0.0, 0.9):
            switch, root = run_with_kill(template, operation, kill_at, torn)
            try:
                assert switch.dead, f"kill point {kill_at} of {total} was not reached"
                check_after_restart(root, OPERATIONS[operation][1])
            finally:
                shutil.rmtree(root, ignore_errors=True)
            points += 1
    assert points == 2 * total


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    operation=st.sampled_from(sorted(OPERATIONS)),
    kill_percent=st.integers(0, 100),
    torn_percent=st.integers(0, 100),
    recovery_kill=st.one_of(st.none(), st.integers(1, 30)),
)
def test_random_kills_in_writes_and_in_the_restart_lose_no_run(
    template, operation, kill_percent, torn_percent, recovery_kill
):
    # (integers, not floats: torch sets flush-to-zero, and hypothesis refuses to draw floats then)
    total = count_changes(template, operation)
    kill_at = 1 + (kill_percent * (total - 1)) // 100
    switch, root = run_with_kill(template, operation, kill_at, torn_percent / 100, recovery_kill)
    try:
        assert switch.dead
        check_after_restart(root, OPERATIONS[operation][1])
    finally:
        shutil.rmtree(root, ignore_errors=True)


def no_swap(first, second):
    """_exchange where renameat2 cannot swap (not Linux, or a file system without RENAME_EXCHANGE)."""
    raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS))


def test_a_replace_killed_right_after_its_swap_keeps_the_new_run(template, tmp_path):
    """Killed after the swap, before the old folder (now in .tmp) was removed: the new run is live and
    the next start-up removes the old one."""
    shutil.copytree(template, tmp_path, dirs_exist_ok=True)
    dead, real_swap = [], disk_module._exchange

    def alive(real):
        def door(*args):
            if dead:  # killed: no clean-up after the swap happens
                raise Killed
            return real(*args)

        return door

    def swap_then_die(first, second):
        real_swap(first, second)
        dead.append(True)
        raise Killed

    doors = {name: alive(getattr(disk_module, name)) for name in DOORS if name != "_exchange"}
    with injected(_exchange=swap_then_die, **doors), pytest.raises(Killed):
        RunStore(tmp_path).write("a1", contents(2), replace=True)
    assert ".tmp" in {entry.split("/")[0] for entry in leftovers(tmp_path)}  # the old run, not yet removed
    assert check_after_restart(tmp_path, {"a1": {2}, "b2": {1}}) == {"a1": 2, "b2": 1}


def test_a_replace_killed_between_its_renames_keeps_the_old_run(template, tmp_path):
    """The window where the old folder is in .trash and the new one not yet in place."""
    shutil.copytree(template, tmp_path, dirs_exist_ok=True)
    renames = []

    def rename_then_die(source, target):
        if renames:  # dead: nothing after the kill happens
            raise Killed
        renames.append(Path(target))
        os.rename(source, target)
        raise Killed

    # where the file system cannot swap two folders in one step (test_a_replace_never_leaves_the_run_absent)
    with injected(_rename=rename_then_die, _exchange=no_swap), pytest.raises(Killed):
        RunStore(tmp_path).write("a1", contents(2), replace=True)
    assert renames[0].parent.name == ".trash" and not (tmp_path / "runs" / "a1").exists()
    # The next reader (any fresh store) finds the old run, not "no runs".
    assert RunStore(tmp_path).read("a1", touch=False).metrics["tag"] == 1
    assert check_after_restart(tmp_path, {"a1": {1}, "b2": {1}}) == {"a1": 1, "b2": 1}


def _writer_child(root: Path, ready_fd: int) -> None:
    """In a forked child: replace a1 and write/delete c3 over and over until killed."""
    try:
        store = RunStore(root)
        tag = 2
        while True:
            store.write("a1", contents(tag), replace=True)
            store.write("c3", contents(tag), replace=True)
            if tag == 2:
                os.write(ready_fd, b"x")
            store.delete("c3")
            tag += 1
    finally:
        os._exit(0)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_real_sigkills_of_a_writer_lose_no_run(template, tmp_path):
    rng = random.Random(0)
    for attempt in range(6):
        root = tmp_path / f"store{attempt}"
        shutil.copytree(template, root)
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read_end)
            _writer_child(root, write_end)
        os.close(write_end)
        try:
            assert os.read(read_end, 1) == b"x"  # it has replaced a1 once at least
            time.sleep(rng.uniform(0.0, 0.05))
        finally:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os.close(read_end)
        found = check_after_restart(root, {"a1": set(range(1, 10_000)), "b2": {1}, "c3": {None, *range(1, 10_000)}})
        assert found["a1"] >= 2


# --- damaged files ----------------------------------------------------------------------------------
def _damage(path: Path, how: str, where: float) -> None:
    data = path.read_bytes()
    if how == "truncate":
        path.write_bytes(data[: int(where * (len(data) - 1))])
    elif how == "flip":
        flipped = bytearray(data)
        flipped[int(where * (len(data) - 1))] ^= 0x01
        path.write_bytes(bytes(flipped))
    elif how == "delete":
        path.unlink()
    elif how == "empty-list":
        path.write_text("[]")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    kind=st.sampled_from(FILE_KINDS),
    how=st.sampled_from(("truncate", "flip", "delete", "empty-list")),
    where_percent=st.integers(0, 100),
)
def test_damaged_files_are_listed_as_damaged_and_never_loaded(template, kind, how, where_percent):
    where = where_percent / 100
    root = Path(tempfile.mkdtemp(prefix="damage-"))
    try:
        shutil.copytree(template, root, dirs_exist_ok=True)
        store = RunStore(root)
        assert [row.status for row in store.list()] == ["ok", "ok"]  # verdicts cached as healthy first
        _damage(store.path("a1") / kind, how, where)
        rows = {row.run_id: row for row in RunStore(root).list()}
        assert rows["a1"].status == "corrupt" and rows["a1"].metrics == {} and "\n" not in rows["a1"].error
        assert rows["b2"].status == "ok"
        with pytest.raises(RunStoreError, match="a1"):
            RunStore(root).read("a1")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_every_byte_flip_of_the_manifest_is_found(template, tmp_path):
    """Every byte of its own fields (run id, time, own checksum), which no file's checksum covers, and
    every 4th byte of the files' entries."""
    shutil.copytree(template, tmp_path, dirs_exist_ok=True)
    store = RunStore(tmp_path)
    manifest = store.path("a1") / "manifest.json"
    original = manifest.read_bytes()
    own_fields = original.index(b'"own_sha256"')
    for offset in [*range(0, own_fields, 4), *range(own_fields - 8, len(original))]:
        flipped = bytearray(original)
        flipped[offset] ^= 0x01
        manifest.write_bytes(bytes(flipped))
        row = store.info("a1")
        assert row.status == "corrupt", f"a flip at byte {offset} of {len(original)} went unnoticed"
    manifest.write_bytes(original)
    assert RunStore(tmp_path).info("a1").status == "ok"


def test_a_verdict_is_kept_in_the_folder_and_any_change_to_a_file_voids_it(template, tmp_path, monkeypatch):
    shutil.copytree(template, tmp_path, dirs_exist_ok=True)
    assert [row.status for row in RunStore(tmp_path).list()] == ["ok", "ok"]
    store_module._verdicts.clear()  # a new process: the verdicts in the folders are all it has
    real = RunStore._read_folder

    def no_hashing(self, run_id, folder):
        raise AssertionError("a listing hashed a run whose files did not change")

    monkeypatch.setattr(RunStore, "_read_folder", no_hashing)
    assert [row.status for row in RunStore(tmp_path).list()] == ["ok", "ok"]
    monkeypatch.setattr(RunStore, "_read_folder", real)
    weights = RunStore(tmp_path).path("a1") / "weights.safetensors"
    before = weights.stat()
    _damage(weights, "flip", 0.9)  # same size, and the modification time put back
    os.utime(weights, ns=(before.st_atime_ns, before.st_mtime_ns))
    store_module._verdicts.clear()
    rows = {row.run_id: row for row in RunStore(tmp_path).list()}
    assert rows["a1"].status == "corrupt" and "checksum" in rows["a1"].error and rows["b2"].status == "ok"


def _vouch(folder: Path, name: str) -> None:
    """Update the manifest so that it vouches for the file as it is now (checksums pass)."""
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["files"][name] = {"sha256": sha256_file(folder / name), "bytes": (folder / name).stat().st_size}
    (folder / "manifest.json").write_text(json.dumps(manifest))


WRONG_SHAPES = {
    "config-list": ("config.json", "[]"),
    "info-list": ("info.json", "[]"),
    "metrics-list": ("metrics.json", "[]"),
    "summaries-number": ("summaries.json", "7"),
    "history-object": ("history.json", "{}"),
    "metrics-5000-digits": ("metrics.json", '{"accuracy": ' + "9" * 5000 + "}"),
    "history-nested-100000": ("history.json", "[" * 100_000 + "]" * 100_000),
    "config-dataset-object": ("config.json", '{"dataset": {"not": "a name"}}'),
    "info-created-text": ("info.json", '{"created": "yesterday"}'),
    "manifest-list": ("manifest.json", "[]"),
    "manifest-escaping-name": ("manifest.json", '{"files": {"../../etc": {"sha256": "x", "bytes": 1}}}'),
}


@pytest.mark.parametrize("name, text", list(WRONG_SHAPES.values()), ids=list(WRONG_SHAPES))
def test_a_file_the_manifest_vouches_for_but_of_the_wrong_shape_breaks_nobody(template, tmp_path, capsys, name, text):
    shutil.copytree(template, tmp_path, dirs_exist_ok=True)
    folder = RunStore(tmp_path).path("a1")
    (folder / name).write_text(text)
    if name != "manifest.json":
        _vouch(folder, name)
    rows = {row.run_id: row for row in RunStore(tmp_path).list()}
    assert rows["a1"].status == "corrupt" and rows["b2"].status == "ok"
    with pytest.raises(RunStoreError):
        RunStore(tmp_path).read("a1")
    assert cli_main(["runs", "--cache-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "CORRUPT" in out and out.count("\n") == 3  # a header and one line per run
    assert cli_main(["runs", "--json", "--cache-dir", str(tmp_path)]) == 0
    assert {r["run_id"]: r["status"] for r in json.loads(capsys.readouterr().out)} == {"a1": "corrupt", "b2": "ok"}
    # The teacher can still delete it.
    assert cli_main(["rm", "a1", "--yes", "--cache-dir", str(tmp_path)]) == 0
    assert [row.run_id for row in RunStore(tmp_path).list()] == ["b2"]


def test_an_exception_reading_one_folder_becomes_its_row(template, tmp_path, monkeypatch):
    shutil.copytree(template, tmp_path, dirs_exist_ok=True)

    def broken(self, run_id, folder, seen):
        if run_id == "a1":
            raise ZeroDivisionError("something nobody foresaw")
        return real(self, run_id, folder, seen)

    real = RunStore._checked_row
    monkeypatch.setattr(RunStore, "_checked_row", broken)
    rows = {row.run_id: row for row in RunStore(tmp_path).list()}
    assert rows["a1"].status == "corrupt" and "ZeroDivisionError" in rows["a1"].error
    assert rows["b2"].status == "ok"


# --- a replace in one step ------------------------------------------------------------------------
SWAP = disk_module._renameat2() is not None


def watched_doors(root: Path, run_id: str) -> tuple[list[str], dict]:
    """Door wrappers that record, after every disk change, whether the run's folder was there."""
    seen: list[str] = []

    def watching(real):
        def door(*args):
            result = real(*args)
            seen.append("present" if (root / "runs" / run_id).is_dir() else "absent")
            return result

        return door

    return seen, {name: watching(getattr(disk_module, name)) for name in ("_rename", "_exchange")}


@pytest.mark.skipif(not SWAP and os.environ.get("CI") != "true", reason="no renameat2 here (not Linux)")
def test_a_replace_never_leaves_the_run_absent(template, tmp_path):
    """The two-rename replace left the id without a folder between its renames: a listing that read
    the folder names then and looked at the trash only after the whole replace had ended left the run
    out (seen in test_concurrent_writers_deleters_and_readers under load)."""
    shutil.copytree(template, tmp_path, dirs_exist_ok=True)
    seen, doors = watched_doors(tmp_path, "a1")
    with injected(**doors):
        RunStore(tmp_path).write("a1", contents(7), replace=True)
    assert seen and set(seen) == {"present"}, seen
    assert RunStore(tmp_path).read("a1").metrics["tag"] == 7
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("code", [errno.ENOSYS, errno.EINVAL])
def test_without_the_swap_a_replace_renames_in_two_steps(template, tmp_path, code):
    shutil.copytree(template, tmp_path, dirs_exist_ok=True)

    def unsupported(first, second):
        raise OSError(code, os.strerror(code))

    seen, doors = watched_doors(tmp_path, "a1")
    with injected(_exchange=unsupported, _rename=doors["_rename"]):
        RunStore(tmp_path).write("a1", contents(8), replace=True)
    assert "absent" in seen  # the old rename-away, rename-in (which readers and listings wait out)
    assert RunStore(tmp_path).read("a1").metrics["tag"] == 8
    assert leftovers(tmp_path) == []


def test_a_failing_swap_is_an_error_and_keeps_the_old_run(template, tmp_path):
    shutil.copytree(template, tmp_path, dirs_exist_ok=True)

    def denied(first, second):
        raise OSError(errno.EACCES, os.strerror(errno.EACCES))

    with injected(_exchange=denied), pytest.raises(RunStoreError):
        RunStore(tmp_path).write("a1", contents(9), replace=True)
    assert RunStore(tmp_path).read("a1").metrics["tag"] == 1
    assert leftovers(tmp_path) == []


# --- threads writing, deleting, reading, listing at once -------------------------------------------
def test_concurrent_writers_deleters_and_readers(template, tmp_path):
    """'keep' is replaced again and again and never deleted: every read of it succeeds. 'churn' is
    written and deleted: reading it may say it was deleted, never anything else. No row is ever
    listed damaged and no raw exception escapes."""
    shutil.copytree(template, tmp_path, dirs_exist_ok=True)
    with injected():
        RunStore(tmp_path).write("keep", contents(1))
    stop = threading.Event()
    problems: list[str] = []
    counts = {"keep-reads": 0, "churn-deleted": 0, "replaces": 0, "listings": 0}

    def guarded(work):
        def loop():
            try:
                while not stop.is_set():
                    work(RunStore(tmp_path))
            except BaseException as exc:  # noqa: BLE001 - the test reports whatever escaped
                problems.append(f"{type(exc).__name__}: {exc}")

        return loop

    def replace_keep(store):
        store.write("keep", contents(random.randint(2, 99)), replace=True)
        counts["replaces"] += 1

    def churn(store):
        store.write("churn", contents(1), replace=True)
        try:
            store.delete("churn")
        except RunStoreError as exc:
            if "not in the store" not in str(exc):
                raise

    def read_keep(store):
        assert store.read("keep", touch=False).metrics["tag"] >= 1
        counts["keep-reads"] += 1

    def read_churn(store):
        try:
            store.read("churn", touch=False)
        except RunStoreError as exc:
            if "was deleted" not in str(exc):
                raise
            counts["churn-deleted"] += 1

    def listing(store):
        rows = store.list()
        bad = [row.error for row in rows if row.status != "ok"]
        assert not bad, bad
        assert "keep" in {row.run_id for row in rows}
        counts["listings"] += 1

    workers = [replace_keep, replace_keep, churn, read_keep, read_churn, listing]
    with injected():
        threads = [threading.Thread(target=guarded(work)) for work in workers]
        for thread in threads:
            thread.start()
        time.sleep(2.0)
        stop.set()
        for thread in threads:
            thread.join(timeout=30)
    assert problems == []
    assert counts["replaces"] > 5 and counts["keep-reads"] > 5 and counts["listings"] > 2, counts
    check_after_restart(tmp_path, {"a1": {1}, "b2": {1}, "keep": set(range(1, 100)), "churn": {None, 1}})


def test_a_delete_racing_a_read_says_the_run_was_deleted(template, tmp_path, monkeypatch):
    shutil.copytree(template, tmp_path, dirs_exist_ok=True)
    real = store_module._Folder.read_bytes

    def read_then_delete(self, name):
        data = real(self, name)
        if name == "manifest.json" and self.path.name == "a1" and self.path.exists():
            RunStore(tmp_path).delete("a1")  # another session deletes it right now
        return data

    monkeypatch.setattr(store_module._Folder, "read_bytes", read_then_delete)
    with pytest.raises(RunStoreError, match="a1 was deleted") as info:
        RunStore(tmp_path).read("a1")
    assert "checksum" not in str(info.value) and "corrupt" not in str(info.value)
    assert [row.run_id for row in RunStore(tmp_path).list()] == ["b2"]  # gone, not "corrupt"


def test_a_replace_racing_a_read_gives_the_new_run(template, tmp_path, monkeypatch):
    shutil.copytree(template, tmp_path, dirs_exist_ok=True)
    real = store_module._Folder.read_bytes
    replaced = []

    def read_then_replace(self, name):
        data = real(self, name)
        if name == "manifest.json" and self.path.name == "a1" and not replaced:
            replaced.append(True)
            RunStore(tmp_path).write("a1", contents(2), replace=True)
        return data

    monkeypatch.setattr(store_module._Folder, "read_bytes", read_then_replace)
    assert RunStore(tmp_path).read("a1").metrics["tag"] == 2


# --- leftovers and the size cap ----------------------------------------------------------------------
def test_leftovers_count_towards_the_cap_until_cleaned_and_live_writers_keep_theirs(template, tmp_path):
    shutil.copytree(template, tmp_path, dirs_exist_ok=True)
    runs = tmp_path / "runs"
    for name in ("e9.12345.dead0001", "a1.99999.dead0002"):  # what two killed writers left
        (runs / ".tmp" / name).mkdir(parents=True)
        (runs / ".tmp" / name / "weights.safetensors").write_bytes(b"\0" * 50_000)
    (runs / ".locks" / "e9.lock").write_text("")
    live = runs / ".tmp" / "d7.1.live0003"  # a writer still at work: it holds d7's lock
    live.mkdir()
    (live / "weights.safetensors").write_bytes(b"\0" * 200_000)
    held, release = threading.Event(), threading.Event()

    def writer():
        with RunStore(tmp_path).lock("d7"):
            held.set()
            release.wait(30)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        held.wait(10)
        # the smaller of the two runs (their JSON can differ by a digit)
        one_run = min(store_module._folder_size(runs / name) for name in ("a1", "b2"))
        capped = RunStore(tmp_path, max_bytes=2 * one_run + 100_000)
        assert capped.total_bytes() >= 2 * one_run + 200_000  # the live writer's folder counts
        assert sorted(path.name for path in (runs / ".tmp").iterdir()) == ["d7.1.live0003"]
        assert not (runs / ".locks" / "e9.lock").exists()
        assert len(capped.enforce_cap()) >= 1  # its bytes push runs out of a full store
    finally:
        release.set()
        thread.join()
    RunStore(tmp_path).list()
    assert leftovers(tmp_path) == []


# --- full and read-only disks -----------------------------------------------------------------------
def _raise(code: int):
    def fail(*args, **kwargs):
        raise OSError(code, os.strerror(code), str(args[0]) if args else None)

    return fail


def test_a_full_disk_while_writing_leaves_no_partial_run_and_one_line(template, tmp_path):
    shutil.copytree(template, tmp_path, dirs_exist_ok=True)
    written = []
    real = disk_module._write_file

    def fill_up(path, data):
        written.append(path)
        if len(written) == 3:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        real(path, data)

    with injected(_write_file=fill_up), pytest.raises(RunStoreError, match="no space left") as info:
        RunStore(tmp_path).write("a1", contents(2), replace=True)
    assert "\n" not in str(info.value) and str(tmp_path) in str(info.value)
    assert RunStore(tmp_path).read("a1").metrics["tag"] == 1
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("code", [errno.EROFS, errno.EACCES])
def test_a_read_only_store_lists_and_loads_and_refuses_writes_in_one_line(template, tmp_path, capsys, code):
    shutil.copytree(template, tmp_path, dirs_exist_ok=True)
    failing = {
        name: _raise(code) for name in ("_mkdir", "_rename", "_unlink", "_rmdir", "_write_file", "_open_lock_file")
    }
    with injected(**failing):
        assert [row.status for row in RunStore(tmp_path).list()] == ["ok", "ok"]
        assert RunStore(tmp_path).read("a1").metrics["tag"] == 1
        for action in (lambda: RunStore(tmp_path).write("c3", contents(1)), lambda: RunStore(tmp_path).delete("a1")):
            with pytest.raises(RunStoreError, match="cannot be written") as info:
                action()
            assert "BNN_CACHE_DIR" in str(info.value) and "\n" not in str(info.value)
        calls = []
        with pytest.raises(RunStoreError, match="cannot be written"):
            train_run(TINY.replace(seed=7), cache_dir=tmp_path, progress=calls.append)
        assert calls == []  # refused before training, not after
        assert cli_main(["rm", "a1", "--yes", "--cache-dir", str(tmp_path)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: run a1: the run store") and "cannot be written" in err and err.count("\n") == 1
    assert RunStore(tmp_path).read("a1").metrics["tag"] == 1


def test_training_is_refused_before_it_starts_when_the_disk_is_too_full(tmp_path, monkeypatch):
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(store_module.shutil, "disk_usage", lambda path: usage._replace(free=300_000))
    calls = []
    with pytest.raises(RunStoreError, match=r"needs about \d+\.\d\d MB .* only 0\.29 MB are free"):
        train_run(TINY, cache_dir=tmp_path, progress=calls.append)
    assert calls == []
    assert leftovers(tmp_path) in ([], [".locks/" + p.name for p in (tmp_path / "runs" / ".locks").iterdir()])


def test_export_to_a_folder_that_cannot_be_written_is_one_line(tmp_path, monkeypatch):
    from core.models.network import ModelConfig, build_model
    from core.predict.export import export_pruned

    model = build_model(ModelConfig(in_features=2, out_classes=2, hidden=(4,), family="lbbnn"), "cpu")
    monkeypatch.setattr(Path, "mkdir", _raise(errno.EROFS))
    with pytest.raises(RunStoreError, match="export: cannot write .*--out"):
        export_pruned(model, None, tmp_path / "out")


# --- the dashboard's run list ------------------------------------------------------------------------
def test_the_dashboard_lists_a_damaged_run_for_deleting_and_never_as_a_run_to_show(template, tmp_path, monkeypatch):
    from dashboard import backend, cache
    from tests.support import clear_dashboard_caches

    shutil.copytree(template, tmp_path, dirs_exist_ok=True)
    folder = RunStore(tmp_path).path("a1")
    (folder / "config.json").write_text('{"dataset": "two-moons", "hidden": "16", "train": [1]}')
    _vouch(folder, "config.json")
    (RunStore(tmp_path).path("b2") / "config.json").write_text("[]")  # not vouched for: damaged
    monkeypatch.setenv("BNN_CACHE_DIR", str(tmp_path))
    clear_dashboard_caches()
    try:
        rows = {row["run_id"]: row for row in cache.cached_run_list()}
        assert set(rows) == {"a1", "b2"}
        assert rows["b2"]["status"] == "corrupt" and rows["b2"]["config"] == {} and rows["b2"]["metrics"] == {}
        assert rows["a1"]["hidden"] is None and rows["a1"]["epochs"] is None  # odd fields never break the list
        assert set(cache.cached_run_labels()) == {"a1"}
        backend.delete_run("b2")  # what the teacher's Delete button calls
        assert [row["run_id"] for row in cache.cached_run_list()] == ["a1"]
    finally:
        clear_dashboard_caches()

"""Runs shipped with the app, so that a class opening a shipped lesson waits for no training.

The bundle (assets/lessons/store/) is an ordinary run store: the same folders, manifests and
checksums as the user's, except that a bundled run keeps at most HISTORY_RECORDS of its per-epoch
history records (evenly spaced, each phase's first and last kept; every kept record is unchanged and
carries its own epoch number) and none of its per-epoch snapshots: a 3000-epoch toy run's full
history is about 1 MB, its weights tens of kB (a Laplace run's posterior eigenvectors, weights x rank
float64 numbers, are 0.17 MB for a 32-32 net). On the app's first start each bundled run the user's
store lacks is read through the bundle store's verified read (every checksum checked) and written
into the user's store by its atomic write, like any trained run; a damaged bundled run is skipped
and said, never copied.
`python -m scripts.bundle_lesson_runs` trains the shipped lessons' runs and writes the bundle.
"""

from __future__ import annotations

from pathlib import Path

from core.data.locations import ASSETS_DIR
from core.errors import RunStoreError
from core.runs.store import RunContents, RunStore

BUNDLE_DIR = ASSETS_DIR / "lessons" / "store"
# Enough for a readable loss curve; keeps the shipped lessons' runs inside assets/' 8 MiB budget.
HISTORY_RECORDS = 100


def bundle_store(folder: str | Path | None = None) -> RunStore:
    return RunStore(BUNDLE_DIR if folder is None else folder)


def bundled_run_ids(folder: str | Path | None = None) -> list[str]:
    store = bundle_store(folder)
    return [run_id for run_id in store.run_ids() if store.exists(run_id)]


def thin_history(history: list[dict], keep: int) -> list[dict]:
    """At most `keep` of the records (more only when a run has over keep / 2 phases), unchanged and in
    order: the first and last record of each phase (so no phase disappears), the rest evenly spaced."""
    n = len(history)
    if n <= keep:
        return list(history)
    starts = [i for i in range(1, n) if history[i].get("phase") != history[i - 1].get("phase")]
    ends = {0, n - 1, *starts, *(i - 1 for i in starts)}
    room = max(keep - len(ends), 0)
    spaced = {round(j * (n - 1) / (room + 1)) for j in range(1, room + 1)}
    return [history[i] for i in sorted(ends | spaced)]


def copy_run(
    source: RunStore,
    target: RunStore,
    run_id: str,
    with_snapshots: bool = True,
    history_records: int | None = None,
    replace: bool = False,
) -> None:
    """One run from `source` into `target`, verified on reading and written atomically; without its
    per-epoch snapshots when `with_snapshots` is False (the bundle: they are most of a run's bytes),
    and with at most `history_records` history records when that is given (thin_history)."""
    stored = source.read(run_id, touch=False)
    history = stored.history if history_records is None else thin_history(stored.history, history_records)
    contents = RunContents(
        config=stored.config,
        info=stored.info,
        state_dict=stored.state_dict,
        metrics=stored.metrics,
        history=history,
        summaries=stored.summaries,
        snapshots=source.read_snapshots(run_id) if with_snapshots else None,
    )
    target.write(run_id, contents, replace=replace)


def install_bundled_runs(
    store: RunStore | str | Path | None = None, folder: str | Path | None = None
) -> tuple[list[str], list[str]]:
    """Copy every bundled run the store lacks into it. Returns (installed ids, problems): a bundled
    run that fails its checks is a problem (one line), not an installed run."""
    target = store if isinstance(store, RunStore) else RunStore(store)
    source = bundle_store(folder)
    installed, problems = [], []
    for run_id in bundled_run_ids(folder):
        if target.exists(run_id):
            continue
        try:
            copy_run(source, target, run_id)
        except RunStoreError as exc:
            problems.append(f"bundled run {run_id} was not installed: {exc}")
            continue
        installed.append(run_id)
    return installed, problems

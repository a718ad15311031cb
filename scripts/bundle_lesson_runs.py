"""Train the bundled lessons' runs and write them into the bundle (assets/lessons/store/).

    python -m scripts.bundle_lesson_runs [--check]

Each distinct run of the lessons in BUNDLED_LESSONS (every shipped lesson) is trained (or taken from
the cache when it is there) and copied into the bundle without its per-epoch snapshots and with its
history thinned to HISTORY_RECORDS records (core/runs/bundled.py); a bundled run with a longer history
is thinned in place; runs no bundled lesson shows any more are removed from it. With --check nothing
is trained: the command fails, naming them, when a lesson's run is not bundled or not thinned.
"""

from __future__ import annotations

import argparse
import shutil
import sys

# The lessons whose runs ship with the app: all of them, so that no class waits for a training.
# assets/ stays under 8 MiB (tests/test_data_images.py): without snapshots and with a thinned history
# a run takes tens of kB (a 3000-epoch toy run's full history alone is about 1 MB).
BUNDLED_LESSONS = ("first-steps", "prior-sparsity", "gaps")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check that every lesson's run is bundled")
    args = parser.parse_args(argv)

    from core.lessons import lesson_names, load_lesson
    from core.runs import train_run
    from core.runs.bundled import BUNDLE_DIR, HISTORY_RECORDS, bundle_store, bundled_run_ids, copy_run
    from core.runs.store import RunStore

    wanted: dict[str, object] = {}
    for name in lesson_names():
        if name not in BUNDLED_LESSONS:
            continue
        for config in load_lesson(name).run_configs():
            wanted[config.run_id(config.load_dataset().fingerprint)] = (name, config)
    bundled, bundle = set(bundled_run_ids()), bundle_store()
    unthinned = {
        run_id
        for run_id in bundled
        if len(bundle.read(run_id, touch=False).history) > HISTORY_RECORDS or bundle.read_snapshots(run_id) is not None
    }
    if args.check:
        missing = [
            f"{run_id} ({name}: {config.method} on {config.dataset})"
            for run_id, (name, config) in wanted.items()
            if run_id not in bundled
        ]
        missing += [f"{run_id} (not thinned)" for run_id in sorted(unthinned)]
        if missing:
            print(
                "not bundled: " + "; ".join(missing) + ". Run `python -m scripts.bundle_lesson_runs`.", file=sys.stderr
            )
            return 1
        print(f"all {len(wanted)} lesson runs are bundled")
        return 0
    cache = RunStore()
    for run_id in sorted(unthinned):
        print(f"thinning {run_id}: {HISTORY_RECORDS} history records, no snapshots", flush=True)
        copy_run(bundle, bundle, run_id, with_snapshots=False, history_records=HISTORY_RECORDS, replace=True)
    for run_id, (name, config) in wanted.items():
        if run_id in bundled:
            continue
        print(f"{name}: training {config.method} on {config.dataset} ({run_id})", flush=True)
        run = train_run(config, cache_dir=None)
        copy_run(cache, bundle, run.run_id, with_snapshots=False, history_records=HISTORY_RECORDS)
    for run_id in bundled - set(wanted):
        print(f"removing {run_id}: no lesson shows it")
        shutil.rmtree(BUNDLE_DIR / "runs" / run_id)
    print(f"{len(wanted)} runs bundled in {BUNDLE_DIR}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

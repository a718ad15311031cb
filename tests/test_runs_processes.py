"""Real processes: killing a training run at a random moment, two processes training one id."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from core.runs import RunConfig, RunStore, list_runs, train_run

REPO = Path(__file__).resolve().parents[1]
TRAIN_ARGS = [
    "--dataset",
    "two-moons",
    "--hidden",
    "16",
    "--epochs",
    "8",
    "--batch-size",
    "100",
    "--device",
    "cpu",
    "--json",
]
SAME_CONFIG = RunConfig(dataset="two-moons", hidden=(16,), train={"epochs": 8, "batch_size": 100}, device="cpu")


def _start(cache: Path) -> subprocess.Popen:
    env = dict(os.environ, BNN_CACHE_DIR=str(cache), PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    return subprocess.Popen(
        [sys.executable, "-m", "core", "train", *TRAIN_ARGS],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for_first_epoch(process: subprocess.Popen, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = process.stderr.readline()
        if line.startswith("epoch"):
            return
        if not line and process.poll() is not None:
            pytest.fail(f"training exited early with {process.returncode}")
    pytest.fail("no epoch line within the timeout")


@pytest.mark.slow  # Python processes that train: 7 s CPU
def test_killing_a_training_process_leaves_the_store_consistent(tmp_path):
    process = _start(tmp_path)
    try:
        _wait_for_first_epoch(process)
        time.sleep(random.uniform(0.0, 1.0))  # anywhere in training, metrics or the write
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    runs = list_runs(tmp_path)
    assert all(run.status == "ok" for run in runs)  # either nothing or the complete run
    for run in runs:
        RunStore(tmp_path).verify(run.run_id)
    calls = []
    again = train_run(SAME_CONFIG, cache_dir=tmp_path, progress=calls.append)
    assert again.from_cache == bool(runs) and (calls == []) == bool(runs)
    RunStore(tmp_path).verify(again.run_id)
    assert [run.run_id for run in list_runs(tmp_path)] == [again.run_id]
    assert list((tmp_path / "runs" / ".tmp").iterdir()) == []  # the killed writer's leftovers are gone


@pytest.mark.slow  # two Python processes that train: 13 s CPU
def test_two_processes_training_the_same_run_agree(tmp_path):
    first, second = _start(tmp_path), _start(tmp_path)
    outputs = [p.communicate(timeout=120) for p in (first, second)]
    assert first.returncode == second.returncode == 0, [err[-2000:] for _, err in outputs]
    results = [json.loads(out) for out, _ in outputs]
    assert results[0]["run_id"] == results[1]["run_id"]
    assert sorted(r["from_cache"] for r in results) == [False, True]  # trained once, reused once
    [run] = list_runs(tmp_path)
    RunStore(tmp_path).verify(run.run_id)
    assert run.metrics == pytest.approx(results[0]["metrics"])

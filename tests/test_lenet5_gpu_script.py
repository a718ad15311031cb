"""benchmarks/lenet5_gpu.sh, the LeNet-5 recipes for a lent GPU: its recipes are valid run configs and a
wrong name is refused before anything starts (the GPU's minutes are too few to find either there)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "lenet5_gpu.sh"
RECIPES = ["long", "cosine", "d-long", "d-cut", "d-scales-0.1", "d-weights-1e-3"]
RECIPES += ["w-1e-3-s-0.1", "w-1e-3-300", "w-1e-3-s-0.1-300"]
NEXT = {"w-5e-4": {"weights": 0.0005}}  # not yet run: d-weights-1e-3 with one step changed

# Stands in for python: `-m benchmarks.front_recipes ...` builds the recipe's config (device cuda, as on the GPU)
# and writes its train settings where the script copies a result from; anything else runs the real python.
FAKE_PYTHON = """#!/bin/sh
if [ "$1" = "-m" ]; then exec {python} - "$@" <<'PY'
import json, sys
from pathlib import Path
from benchmarks.front_recipes import configure
args = sys.argv[1:]
value = lambda flag: args[args.index(flag) + 1]
config = configure(value("--preset"), 0, None, json.loads(value("--train")), None).replace(device=value("--device"))
out = Path(value("--results-dir"))
(out / "front_recipes.json").write_text(json.dumps([config.to_dict()["train"]]))
PY
fi
exec {python} "$@"
"""


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    fake = tmp_path / "python"
    fake.write_text(FAKE_PYTHON.format(python=sys.executable))
    fake.chmod(0o755)
    env = {"PATH": "/usr/bin:/bin", "PYTHON": str(fake), "OUT": str(tmp_path / "out"), "TMPDIR": str(tmp_path)}
    return subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=300)


def _measured(name: str) -> dict:
    """The train settings of the recipe's measured entry in front_recipes.json (label "lenet5 GPU NAME: ...")."""
    from benchmarks.time_to_quality import load_entries

    entries = load_entries(ROOT / "benchmarks" / "results" / "front_recipes.json")
    (entry,) = [e for e in entries if e["label"].startswith(f"lenet5 GPU {name}:")]
    return entry["config"]["train"]


def test_every_recipe_trains_what_was_measured_whatever_the_preset_says(tmp_path):
    done = _run(tmp_path, "5", *RECIPES)
    assert done.returncode == 0, done.stderr
    for name in RECIPES:
        train = json.loads((tmp_path / "out" / f"lenet5_gpu_{name}.json").read_text())[0]
        assert train == _measured(name), name  # cuda_graphs, the schedule, the cut: all as measured


def test_the_recipe_not_yet_run_differs_from_d_weights_1e_3_in_what_its_name_says(tmp_path):
    done = _run(tmp_path, "5", *NEXT)
    assert done.returncode == 0, done.stderr
    measured = _measured("d-weights-1e-3")
    for name, change in NEXT.items():
        train = json.loads((tmp_path / "out" / f"lenet5_gpu_{name}.json").read_text())[0]
        assert train == {**measured, "learning_rates": {**measured["learning_rates"], **change}}, name


def test_the_preset_is_the_best_measured_recipe():
    from benchmarks.time_to_quality import load_entries
    from core.runs.presets import get_preset

    entries = load_entries(ROOT / "benchmarks" / "results" / "front_recipes.json")
    at_target = {  # each GPU recipe's last epoch (after its cut) at Molchanov et al.'s density or below
        e["label"].split(":")[0]: e["rows"][-1]["mpm_mean_accuracy"]
        for e in entries
        if e["label"].startswith("lenet5 GPU ") and e["rows"][-1]["density"] <= 0.0036
    }
    assert max(at_target, key=at_target.get) == "lenet5 GPU w-1e-3-300"
    measured = {k: v for k, v in _measured("w-1e-3-300").items() if k != "cuda_graphs"}  # a device choice
    assert get_preset("lenet5-mnist").to_dict()["train"] == measured


@pytest.mark.parametrize("names", [["nonsense"], ["long", "Long"]])
def test_an_unknown_recipe_is_refused_before_any_starts(tmp_path, names):
    done = _run(tmp_path, "5", *names)
    assert done.returncode == 2
    assert "unknown recipe" in done.stderr and done.stderr.count("\n") == 1
    assert not (tmp_path / "out").exists()  # nothing started, nothing written

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


def test_every_recipe_is_a_valid_lenet5_config_with_replayed_steps(tmp_path):
    done = _run(tmp_path, "5", *RECIPES)
    assert done.returncode == 0, done.stderr
    trains = {name: json.loads((tmp_path / "out" / f"lenet5_gpu_{name}.json").read_text())[0] for name in RECIPES}
    assert all(train["cuda_graphs"] is True and train["target_density"] == 0.0036 for train in trains.values())
    assert trains["long"]["epochs"] == 200 and trains["long"].get("lr_schedule", "constant") == "constant"
    assert trains["cosine"]["lr_schedule"] == "cosine" and trains["cosine"]["batch_size"] == 100
    # the d-recipes differ from d-cut in one step size each, and only the cut ones post-train
    assert trains["d-cut"]["learning_rates"]["weights"] == 0.003 and trains["d-cut"]["learning_rates"]["scales"] == 0.05
    assert trains["d-scales-0.1"]["learning_rates"]["scales"] == 0.1
    assert trains["d-weights-1e-3"]["learning_rates"]["weights"] == 0.001
    assert trains["d-long"]["posttrain_epochs"] == 0 and trains["d-cut"]["posttrain_density"] == 0.0036


@pytest.mark.parametrize("names", [["nonsense"], ["long", "Long"]])
def test_an_unknown_recipe_is_refused_before_any_starts(tmp_path, names):
    done = _run(tmp_path, "5", *names)
    assert done.returncode == 2
    assert "unknown recipe" in done.stderr and done.stderr.count("\n") == 1
    assert not (tmp_path / "out").exists()  # nothing started, nothing written

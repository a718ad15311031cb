"""benchmarks/gpu_check.sh, its CPU parts: `--quick` runs every step tiny on the CPU and writes the
report the GPU run writes. (The GPU run itself needs a CUDA machine: see the script.)"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_check.sh"


@pytest.mark.slow  # 3.5 s: the script starts Python
def test_unknown_argument_is_refused_with_one_line():
    done = subprocess.run(["bash", str(SCRIPT), "--fast"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip() == "gpu_check.sh: unknown argument '--fast' (use --quick or nothing)"


@pytest.mark.slow
def test_quick_check_runs_every_step_and_writes_the_report(tmp_path):
    env = dict(os.environ, GPU_CHECK_OUT=str(tmp_path))
    done = subprocess.run(
        ["bash", str(SCRIPT), "--quick"], capture_output=True, text=True, timeout=900, env=env, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = (tmp_path / "gpu.md").read_text()
    steps = dict(re.findall(r"^\| ([^|]+?) \| ([^|]+?) \| \d+ \|$", report, flags=re.M))
    assert set(steps) == {
        "device tests (pytest -m gpu)",
        "epoch time vs plain MLP",
        "quick-mnist to Table 2's quality, steps replayed",
        "quick-mnist, eager steps",
        "prediction throughput",
    }, report
    # Without CUDA the device tests are not run, and the report says so rather than "ok".
    assert steps.pop("device tests (pytest -m gpu)").startswith("no test ran"), report
    assert set(steps.values()) == {"ok"}, report
    assert re.search(r"^\| lbbnn \| \d+\.\d+ \| \d+\.\d+ \| \d+ \|$", report, flags=re.M), report  # epoch row
    assert re.search(r"^\| lbbnn@500 \| \d+\.\d+ \| \d+\.\d+ \| \d+ \|$", report, flags=re.M), report
    assert re.search(r"^\| lbbnn \| \d+\.\d+ \| \d+\.\d \| ", report, flags=re.M), report  # throughput row
    assert "## Time to quality" in report
    # Nothing of the quick run lands in the committed results.
    assert (
        not (ROOT / "benchmarks" / "results" / "gpu.md").exists()
        or "--quick" not in (ROOT / "benchmarks" / "results" / "gpu.md").read_text()
    )

"""The server under test: `streamlit run dashboard/app.py` on 127.0.0.1 and a free port, with its own
run store (the browsed runs trained into it first when missing)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from benchmarks.classroom.serving import HOST, free_port, wait_until_healthy

if TYPE_CHECKING:
    from benchmarks.classroom.scenario import Scenario

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "dashboard" / "app.py"


# --- the server --------------------------------------------------------------------------------


def prepare_runs(scenario: Scenario, env: dict[str, str]) -> list[str]:
    """Train (or find cached) the runs the class browses; returns their ids."""
    if scenario.preset:
        configs = (
            f"[dataclasses.replace(get_preset({scenario.preset!r}), seed=s) for s in range({scenario.browsed_runs})]"
        )
    else:
        configs = (
            f"[RunConfig(dataset={scenario.dataset!r}, hidden={tuple(scenario.hidden)!r}, seed=s, "
            f"train={{'epochs': {scenario.train_epochs}}}) for s in range({scenario.browsed_runs})]"
        )
    code = (
        "import dataclasses, json, sys, torch; torch.set_num_threads(1)\n"
        "from core.runs import RunConfig, get_preset, train_run\n"
        f"ids = [train_run(config).run_id for config in {configs}]\n"
        "print(json.dumps(ids))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"training the browsed runs failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


class Server:
    """`streamlit run dashboard/app.py` on 127.0.0.1:<free port>, stopped on exit."""

    def __init__(self, env: dict[str, str], log: Path):
        self.port = free_port()
        self.url = f"http://{HOST}:{self.port}"
        self.log = log
        self._handle = open(log, "w")
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "streamlit",
                "run",
                str(APP),
                "--server.headless",
                "true",
                "--server.port",
                str(self.port),
                "--server.address",
                HOST,
                "--browser.gatherUsageStats",
                "false",
            ],
            cwd=ROOT,
            env=env,
            stdout=self._handle,
            stderr=subprocess.STDOUT,
        )

    def wait_healthy(self, timeout: float = 120) -> None:
        wait_until_healthy(self.url, self.process, self.log, timeout)

    def memory_mb(self) -> tuple[float, float]:
        """(resident, peak resident) memory of the server process in MB, from /proc."""
        values = {}
        try:
            for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
                if line.startswith(("VmRSS:", "VmHWM:")):
                    key, amount = line.split(":", 1)
                    values[key] = float(amount.split()[0]) / 1024
        except OSError:
            pass
        return values.get("VmRSS", float("nan")), values.get("VmHWM", float("nan"))

    def cpu_seconds(self) -> float:
        """User + system CPU time of the server process so far (not of its training children)."""
        try:
            fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError):
            return float("nan")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._handle.close()

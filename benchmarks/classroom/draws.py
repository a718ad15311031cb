"""Where the class's draws went: every draw the servers computed (dashboard/app.py logs each one to
$BNN_RERUN_LOG as {"draw": index, "run", "threshold", ...}) set against what the sessions waited for
(each slider move whose first update rested on k < R draws waits, from its release to the complete
numbers, for draws 0..R-1 of its (run, threshold)).

A draw is *waited for* when a session was waiting for it as it was kept; *ahead* when no session was,
but a later move read it (the cache kept it for them); *unread* when no session ever waited for it in
the class (a plan nobody asked for any more, or draws past every R asked); *twice* when the same draw
(run, inputs, mode, threshold, seed, index) was computed before, in this process or in another one.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SLACK_SECONDS = 0.05  # clock steps between the server's log line and the client's record


@dataclass(frozen=True)
class Wait:
    """A session waiting for draws 0..samples-1 of (run, threshold) from `start` to `end` (wall clock)."""

    session: int
    run: str
    threshold: float
    samples: int
    start: float
    end: float


@dataclass
class DrawCounts:
    computed: int = 0
    by_place: Counter = field(default_factory=Counter)  # "process", "background", "request" -> draws
    waited: int = 0
    ahead: int = 0  # no session waited as it was kept; a later move read it
    unread: int = 0  # no session ever waited for it
    twice: int = 0  # computed before (a second computation of the same draw)
    twice_elsewhere: int = 0  # of them, first computed by another server process
    servers: int = 0  # server processes that computed draws
    waits: int = 0  # slider moves (and page switches) that waited for draws
    kept: int = 0  # read from the kept draws on disk (an earlier class's or another process's), not computed
    kept_at_start: str = ""  # what the kept draws folder held when the class began (kept_draws_at_start)

    def lines(self, moves: int, interactions: int, process_cpu: float | None = None) -> list[str]:
        """The report's lines; `process_cpu`: the draw processes' CPU seconds in the class (per draw
        computed there: the cost of a draw, whatever the machine's load)."""
        kept = [f"- kept draws (BNN_CACHE_DIR/draws): {self.kept_at_start}; read from them in the class: {self.kept}"]
        if not self.computed:
            return [*kept, "- draws computed: none logged (no sampled predictions, all read, or no $BNN_RERUN_LOG)"]
        places = ", ".join(f"{n} {place}" for place, n in sorted(self.by_place.items()))
        share = lambda n: f"{n} ({n / self.computed:.0%})"  # noqa: E731
        return [
            *kept,
            f"- draws computed: {self.computed} by {self.servers} server process(es) ({places}; process: a draw "
            f"process, background: the server's refiner threads, request: a script run that lacked it), "
            f"{self.computed / max(moves, 1):.1f} per slider move ({moves}), "
            f"{self.computed / max(interactions, 1):.1f} per interaction ({interactions}); "
            f"{self.waits} moves waited for draws"
            + (
                f"; the draw processes' CPU {process_cpu:.1f} s, {process_cpu / self.by_place['process']:.3f} s "
                "per draw computed there"
                if process_cpu and self.by_place["process"]
                else ""
            ),
            f"- of them: waited for by a session as they were kept {share(self.waited)}; ahead (no session "
            f"waiting then, a later move read them) {share(self.ahead)}; unread (no session waited for them "
            f"in the class: a plan left or past every R asked) {share(self.unread)}; computed twice (the same "
            f"run, threshold and draw computed before) {share(self.twice)}, {self.twice_elsewhere} of them "
            "first in another server process",
        ]


def read_draws(rerun_log: Path, since: float) -> list[dict[str, Any]]:
    """The draw records of the log from `since` on (wall clock)."""
    try:
        lines = rerun_log.read_text().splitlines()
    except OSError:
        return []
    records = []
    for line in lines:
        if not line.strip():
            continue
        record = json.loads(line)
        if "draw" in record and record.get("end", 0.0) >= since:
            records.append(record)
    return records


def same_plan(draw: dict[str, Any], wait: Wait) -> bool:
    threshold = draw.get("threshold")
    return (
        draw.get("run") == wait.run
        and draw.get("inputs") == "test"
        and threshold is not None
        and abs(float(threshold) - wait.threshold) <= 1e-9
        and int(draw["draw"]) < wait.samples
    )


def kept_draws_at_start(cache_dir: Path, keep: bool) -> str:
    """Prepare the kept draws folder of the run store at `cache_dir` for a class and say what it holds:
    emptied unless `keep` (a cold class computes every draw; with `keep`, a lesson taught again reads
    what earlier classes kept, core.predict.shared_draws)."""
    folder = Path(cache_dir) / "draws"
    files = sorted(folder.glob("*.draw.npz")) if folder.is_dir() else []
    if not keep:
        for path in files:
            path.unlink(missing_ok=True)
        return f"emptied before the class ({len(files)} files removed): a cold class"
    size = sum(path.stat().st_size for path in files)
    return f"{len(files)} files ({size / 2**20:.0f} MB) kept from earlier classes (--kept-draws)"


def count_draws(draws: list[dict[str, Any]], waits: list[Wait], kept_at_start: str = "") -> DrawCounts:
    kept = [d for d in draws if d.get("where") == "kept"]
    draws = [d for d in draws if d.get("where") != "kept"]
    counts = DrawCounts(computed=len(draws), waits=len(waits), kept=len(kept), kept_at_start=kept_at_start)
    seen: dict[tuple, int] = {}  # draw -> the server process that first computed it
    counts.servers = len({d.get("pid") for d in draws})
    for draw in sorted(draws, key=lambda d: d["end"]):
        counts.by_place[draw.get("where", "?")] += 1
        key = (draw.get("run"), draw.get("inputs"), draw.get("mode"), draw.get("threshold"), draw.get("seed"))
        key += (draw["draw"],)
        if key in seen:
            counts.twice += 1
            counts.twice_elsewhere += seen[key] != draw.get("pid")
        else:
            seen[key] = draw.get("pid")
        kept = draw["end"]
        plan_waits = [w for w in waits if same_plan(draw, w)]
        if any(w.start - SLACK_SECONDS <= kept <= w.end + SLACK_SECONDS for w in plan_waits):
            counts.waited += 1
        elif any(w.start > kept for w in plan_waits):
            counts.ahead += 1
        else:
            counts.unread += 1
    return counts

"""The load test's two latencies of a slider move: to the first update and to the complete R-draw
numbers (benchmarks/classroom), read from what the Pruning page says its cards rest on."""

from __future__ import annotations

import math

from benchmarks.classroom.client import RunResult
from benchmarks.classroom.report import Interaction, Report, table
from benchmarks.classroom.scenario import Scenario, partial


class Text:
    def __init__(self, body: str):
        self.body = body


def result_with(*captions: str) -> RunResult:
    result = RunResult()
    result.elements = [("markdown", Text(caption)) for caption in captions]
    return result


def test_partial_cards_are_told_from_complete_ones_by_the_page_caption():
    assert partial(result_with("Based on 7 of 20 draws: the others are being computed and the numbers refine."))
    assert partial(result_with("Based on 0 of 20 draws: computing the first."))
    assert not partial(result_with("Based on all 20 draws."))
    assert not partial(result_with("SIM-SIM: average over R sampled networks"))


def test_both_latencies_are_summarised_and_a_move_that_never_completed_is_the_slowest():
    report = Report(Scenario(sessions=3))
    # first update 0.1 .. 1.0 s; complete 2 s later, except the last, which never completed
    for index in range(10):
        seconds = 0.1 * (index + 1)
        complete = None if index == 9 else seconds + 2.0
        report.interactions.append(Interaction(index, "samples", seconds, True, complete_seconds=complete))
    first = report.summary(("samples",))
    assert first["n"] == 10 and math.isclose(first["p50"], 0.55) and math.isclose(first["max"], 1.0)
    assert math.isclose(first["p95"], 0.9 + 0.55 * 0.1)  # linear between the 9th and 10th order statistics
    complete = report.summary(("samples",), complete=True)
    assert complete["max"] == math.inf and math.isclose(complete["p50"], 2.55)
    text = table(report)
    assert "slider release -> complete R-draw numbers (threshold, R) | 10 | 2.55 |" in text
    assert "refined in place): 10 of 10; never completed: 1" in text

"""A shipped lesson's link on a fresh server over an empty run store draws its first chart from the
bundled runs, with no training started (benchmarks/lesson_start.py times the same path)."""

from __future__ import annotations

import pytest

from benchmarks.lesson_start import first_chart_step, store_runs, wait_first_chart, wait_panel
from core.runs.bundled import bundled_run_ids
from tests.test_browser import assert_no_traceback, serve

# A fresh server's first pages import and compute everything: 22-68 s at load 30 on 2 cores
# (benchmarks/results/lesson_start.md), so a longer wait than the browser tests' 90 s.
FIRST_VISIT_TIMEOUT = 300_000  # ms


def test_first_chart_step_is_the_first_step_on_a_page_with_charts():
    from core.lessons import load_lesson

    for name, expected in (("first-steps", 2), ("gaps", 1), ("prior-sparsity", 1)):
        assert first_chart_step(name) == expected
        assert load_lesson(name).step(expected).page != "train"


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_a_lesson_link_on_a_fresh_server_draws_its_chart_from_the_bundle_without_training(
    browser, tmp_path, monkeypatch
):
    monkeypatch.setenv("BNN_LESSON_RUNS", "1")  # the suite turns it off (tests/conftest.py); here it is the point
    cache = tmp_path / "store"
    cache.mkdir()
    with serve(cache) as (url, log):
        page = browser.new_page(viewport={"width": 1400, "height": 1800})
        page.goto(f"{url}/?lesson=first-steps")
        wait_panel(page, 1, FIRST_VISIT_TIMEOUT)
        for name in ("first-steps", "gaps"):
            page.goto(f"{url}/?lesson={name}&step={first_chart_step(name)}")
            wait_first_chart(page, FIRST_VISIT_TIMEOUT)
            assert_no_traceback(page)
            content = page.content()
            assert "not trained yet" not in content
            assert "training: epoch" not in content
            assert page.locator("[data-testid='stProgress']").count() == 0
        page.close()
        # the store holds the bundled runs and nothing else: nothing was trained
        assert store_runs(cache) == set(bundled_run_ids())
        assert "Traceback" not in log.read_text()


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_first_steps_is_walked_with_next_and_back_in_the_browser(browser, tmp_path, monkeypatch):
    """A student clicks through the README's lesson: every step's panel says which step it is and
    shows its title, the address follows the step, Next stops at the last step, Back goes one back,
    and no step ends in a traceback or starts a training."""
    from core.lessons import load_lesson

    monkeypatch.setenv("BNN_LESSON_RUNS", "1")
    lesson = load_lesson("first-steps")
    cache = tmp_path / "store"
    cache.mkdir()
    with serve(cache) as (url, log):
        page = browser.new_page(viewport={"width": 1400, "height": 1800})
        page.goto(f"{url}/?lesson=first-steps")
        sidebar = page.locator("[data-testid='stSidebar']")
        for number, step in enumerate(lesson.steps, start=1):
            wait_panel(page, number, FIRST_VISIT_TIMEOUT)
            assert step.title in sidebar.inner_text()
            assert f"step={number}" in page.url
            assert_no_traceback(page)
            next_button = sidebar.get_by_role("button", name="Next")
            if number < len(lesson.steps):
                next_button.click()
            else:
                assert next_button.is_disabled()
        sidebar.get_by_role("button", name="Back").click()
        wait_panel(page, len(lesson.steps) - 1, FIRST_VISIT_TIMEOUT)
        page.close()
        assert store_runs(cache) == set(bundled_run_ids())
        assert "Traceback" not in log.read_text()

"""Shared pytest fixtures.

Tests never touch the network: BNN_OFFLINE=1 is forced for the whole session.
A test that needs the full datasets requests the `data_dir` fixture or carries the `fulldata`
marker (either implies the other); without $BNN_DATA_DIR it skips, and under CI=true it fails.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

from tests.support import full_data_dir

# No wall-clock deadline on any property test (hypothesis' default is 200 ms an example): on the loaded
# 2-core CI machine a pause fails an example that passes when rerun. Speed belongs in benchmarks/; a
# test that must catch a hang bounds CPU time or what is allocated (tests/test_cli_parsers.py).
settings.register_profile("project", deadline=None)
settings.load_profile("project")

os.environ["BNN_OFFLINE"] = "1"
# The app places the shipped lessons' runs into every store it opens; tests open empty stores on
# purpose (tests/test_bundled_runs.py turns it on where that is the point).
os.environ["BNN_LESSON_RUNS"] = "0"
# Trainings started by the app run at niceness 19 by default (below its draw processes); beside the other
# pytest worker on the 2-core CI machine that starves them (weight 15 against 1024), and the tests that
# wait for a training have timeouts. The tests keep the earlier 10; test_draw_process.py checks the default.
os.environ.setdefault("BNN_TRAINING_NICENESS", "10")

# pytest-xdist (pyproject.toml's addopts run the suite on 2 workers): one torch thread per worker and per
# process it starts, so two workers do not oversubscribe the 2-core CI machine. A test that measures
# threads sets its own count; a serial run (`-n 0`) keeps torch's default.
if os.environ.get("PYTEST_XDIST_WORKER"):
    for _variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_variable, "1")
    import torch as _torch

    _torch.set_num_threads(1)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the xdist_group marks
def pytest_collection_modifyitems(config, items):
    _deselect_gpu_tests_without_cuda(config, items)
    for item in items:
        if "data_dir" in getattr(item, "fixturenames", ()) and item.get_closest_marker("fulldata") is None:
            item.add_marker(pytest.mark.fulldata)
    if hasattr(config, "workerinput"):  # a pytest-xdist worker; a serial run keeps its order
        _group_for_workers(items)


# --- parallel workers (pytest-xdist, --dist loadgroup) ---------------------------------------------
# The tests that serve the app (a Streamlit server, headless Chromium) run on one worker, one after the
# other: two servers and two browsers on 2 cores time each other out. A test using a module- or
# session-scoped fixture of the suite (a trained store, a server) stays with the other tests of its
# module that use it, so the fixture is built once, not once per worker. The serving group is the
# longest unit: it is queued first, then the units holding slow tests (most slow tests first), then the
# fast ones (largest units first), which fill both workers up to the end.
SERVING_GROUP = "serving"
SERVING_MARKERS = ("browser", "load")


def pytest_configure(config):
    # xdist reorders its work units by their number of tests unless told not to (--loadscope-reorder is
    # on by default): the 12-test serving group was queued seventh, behind 347 CLI cases and five other
    # groups, and started minutes late. The order set in _group_for_workers is kept instead.
    if getattr(config.option, "loadscopereorder", None) is not None:
        config.option.loadscopereorder = False


def _shared_fixture_module(item) -> str | None:
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return None
    tests_dir = str(Path(__file__).parent)
    for definitions in info.name2fixturedefs.values():
        for definition in definitions:
            func = getattr(definition, "func", None)
            source = getattr(getattr(func, "__code__", None), "co_filename", "")
            if definition.scope != "function" and source.startswith(tests_dir):
                return item.nodeid.split("::", 1)[0]
    return None


def _unit_of(item) -> str:
    """The work unit xdist's loadgroup makes of the item: its group, or the test alone."""
    mark = item.get_closest_marker("xdist_group")
    if mark is None:
        return item.nodeid
    return str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))


def _group_for_workers(items) -> None:
    for item in items:
        if item.get_closest_marker("xdist_group") is not None:
            continue  # the test's own group
        if any(item.get_closest_marker(name) is not None for name in SERVING_MARKERS):
            group = SERVING_GROUP
        else:
            group = _shared_fixture_module(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
    first: dict[str, int] = {}
    size: dict[str, int] = {}
    slow: dict[str, int] = {}
    for index, item in enumerate(items):
        unit = _unit_of(item)
        first.setdefault(unit, index)
        size[unit] = size.get(unit, 0) + 1
        slow[unit] = slow.get(unit, 0) + (item.get_closest_marker("slow") is not None)

    def queue_place(item) -> tuple[int, int, int, int]:
        unit = _unit_of(item)
        rank = 0 if unit == SERVING_GROUP else 1 if slow[unit] else 2
        # larger units before smaller ones of the same rank (what xdist's reorder did); a unit's tests
        # stay together, in their own order
        return rank, -slow[unit], -size[unit], first[unit]

    items.sort(key=queue_place)


def pytest_runtest_setup(item):
    # A fulldata test that reads $BNN_DATA_DIR itself (not through the fixture) gets the same rule.
    if item.get_closest_marker("fulldata") is not None:
        full_data_dir()


@pytest.fixture
def data_dir() -> Path:
    """The folder with the full datasets ($BNN_DATA_DIR); skips when absent, fails under CI=true."""
    return full_data_dir()


@pytest.fixture
def isolated_data_env(tmp_path, monkeypatch) -> Path:
    """No data dir and an empty download cache, so only bundled/generated data is found."""
    monkeypatch.delenv("BNN_DATA_DIR", raising=False)
    cache = tmp_path / "cache"
    cache.mkdir()
    monkeypatch.setenv("BNN_CACHE_DIR", str(cache))
    monkeypatch.setenv("BNN_OFFLINE", "1")
    return cache


# --- GPU tests (`-m gpu`, tests/test_gpu.py) ------------------------------------------------------
# Without CUDA they are deselected, never skipped-as-passed: the summary says how many did not run.
_GPU_NOT_RUN: list[str] = []


def _deselect_gpu_tests_without_cuda(config, items) -> None:
    import torch

    if torch.cuda.is_available():
        return
    gpu = [item for item in items if item.get_closest_marker("gpu") is not None]
    if gpu:
        _GPU_NOT_RUN.extend(item.nodeid for item in gpu)
        items[:] = [item for item in items if item.get_closest_marker("gpu") is None]
        config.hook.pytest_deselected(items=gpu)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if _GPU_NOT_RUN:
        terminalreporter.write_line(
            f"GPU tests NOT RUN: {len(_GPU_NOT_RUN)} (no CUDA device here; benchmarks/gpu_check.sh runs them "
            "on a CUDA machine)",
            yellow=True,
        )


@pytest.fixture(scope="module")
def browser():
    """Headless Chromium (Debian's, driven by Playwright) with the browser tests' flags; unavailable:
    fails under CI=true, skips locally (tests/test_browser.py, tests/test_sparsity_pages.py)."""
    from tests.support import require_module
    from tests.test_browser import CHROMIUM_ARGS, chromium_path

    sync_playwright = require_module("playwright.sync_api", "pip install playwright").sync_playwright
    executable = chromium_path()
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        yield _PatientBrowser(launched)
        launched.close()


class _PatientBrowser:
    """The launched browser, whose pages wait as long for an element to act on (fill, click) as the tests
    wait for a page to render (tests/test_browser.py RENDER_TIMEOUT), not Playwright's 30 s. (It was made for
    a Train form that did not show again within 30 s of a dataset being chosen in CI; the same step later failed
    at 90 s too, so the machine's load was not the cause: tests/test_browser.py, evidence_on_failure.)"""

    def __init__(self, launched):
        self._launched = launched

    def new_page(self, **options):
        from tests.test_browser import RENDER_TIMEOUT

        page = self._launched.new_page(**options)
        page.set_default_timeout(RENDER_TIMEOUT)
        return page

    def new_context(self, **options):
        from tests.test_browser import RENDER_TIMEOUT

        context = self._launched.new_context(**options)
        context.set_default_timeout(RENDER_TIMEOUT)
        return context

    def __getattr__(self, name):
        return getattr(self._launched, name)

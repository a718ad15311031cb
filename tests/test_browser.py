"""End to end: `streamlit run dashboard/app.py` driven by headless Chromium through Playwright.

Needs Debian's chromium (Playwright cannot download its own browser here).
Skipped with a reason when chromium or playwright is missing, except in CI
(CI=true), where a missing browser is a failure.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

from benchmarks.classroom.serving import free_port, wait_until_healthy
from benchmarks.dashboard_latency import SCRIPT_IDLE

# Each test starts a Streamlit server and Chromium (15-40 s on the CI machine, a server's first start up to
# 300 s when it is loaded): slow, with a longer limit than the suite's 600 s.
pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(1200)]

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "dashboard" / "app.py"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
START_TIMEOUT = 90
RENDER_TIMEOUT = 90_000  # ms
IDLE_WAIT = 5_000  # ms


def _unavailable(reason: str) -> None:
    if os.environ.get("CI", "").strip().lower() == "true":
        pytest.fail(f"{reason} (CI=true: browser tests must run)")
    pytest.skip(reason)


def chromium_path() -> str:
    found = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
    if found is None:
        _unavailable("chromium not installed: apt-get install chromium")
    return found


def train_runs(cache: Path, configs: str) -> list[str]:
    """Run ids of `configs` (Python source of a list of RunConfig) trained into the store `cache`."""
    env = dict(os.environ, BNN_CACHE_DIR=str(cache), BNN_OFFLINE="1")
    trained = subprocess.run(
        [
            sys.executable,
            "-c",
            "from core.runs import RunConfig, train_run\n"
            f"for config in {configs}:\n    print(train_run(config).run_id)",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert trained.returncode == 0, trained.stderr
    return trained.stdout.split()


SERVER_PIDS: dict[str, int] = {}  # url -> the streamlit process serving it


@contextmanager
def serve(cache: Path) -> Iterator[tuple[str, Path]]:
    """A dashboard server on a free port over the store `cache`: (url, its log); its script runs are logged
    in `cache`/reruns.jsonl (BNN_RERUN_LOG)."""
    env = dict(os.environ, BNN_CACHE_DIR=str(cache), BNN_OFFLINE="1", BNN_RERUN_LOG=str(cache / "reruns.jsonl"))
    port = free_port()
    log = cache / "streamlit.log"
    with open(log, "w") as handle:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "streamlit",
                "run",
                str(APP),
                "--server.headless",
                "true",
                "--server.port",
                str(port),
                "--server.address",
                "127.0.0.1",
                "--browser.gatherUsageStats",
                "false",
            ],
            cwd=ROOT,
            env=env,
            stdout=handle,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    SERVER_PIDS[url] = process.pid
    try:
        wait_until_healthy(url, process, log, START_TIMEOUT)
        yield url, log
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="module")
def server(tmp_path_factory, browser):
    """A dashboard server with one tiny cached run (two epochs) in a temporary store."""
    cache = tmp_path_factory.mktemp("bnn-cache")
    train_runs(cache, "[RunConfig(dataset='two-moons', hidden=(8,), train={'epochs': 2})]")
    with serve(cache) as running:
        yield running


@pytest.fixture(scope="module")
def lesson_server(tmp_path_factory, browser):
    """The README's first lesson: an lbbnn and a bnn trained on two-moons with the Train page's
    defaults (16-16, 600 epochs; about 3 s each), in their own store. (url, log, lbbnn run id)."""
    cache = tmp_path_factory.mktemp("bnn-lesson")
    lbbnn, bnn = train_runs(cache, "[RunConfig(dataset='two-moons'), RunConfig(dataset='two-moons', method='bnn')]")
    with serve(cache) as (url, log):
        yield url, log, lbbnn


def assert_no_traceback(page) -> None:
    # Checked once the script run that drew the page is over (an exception is drawn during the run)
    # instead of after a fixed half second; a page that keeps rerunning (the playground's fragment while it
    # trains) is checked after IDLE_WAIT at most.
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.wait_for_function(SCRIPT_IDLE, timeout=IDLE_WAIT, polling="raf")
    except PlaywrightTimeout:
        pass
    assert page.locator("[data-testid='stException']").count() == 0
    assert "Traceback" not in page.content()


def wait_for_charts(page, at_least: int = 1) -> None:
    page.wait_for_function(
        'document.querySelectorAll(\'[data-testid="stMain"] .vega-embed canvas, '
        f'[data-testid="stMain"] .vega-embed svg\').length >= {at_least}',
        timeout=RENDER_TIMEOUT,
    )


def test_pages_render_in_chromium(server, browser, tmp_path):
    url, log = server
    page = browser.new_page(viewport={"width": 1400, "height": 2200})
    # A deep link as the server's very first request works (no legacy pages/ folder).
    page.goto(f"{url}/pruning")
    page.get_by_role("heading", name="Pruning", exact=True).wait_for(timeout=RENDER_TIMEOUT)
    wait_for_charts(page, 1)
    assert_no_traceback(page)
    page.goto(url)
    page.get_by_role("heading", name="Train a sparse Bayesian network").wait_for(timeout=RENDER_TIMEOUT)
    page.get_by_text("Sparse BNN Explorer").first.wait_for(timeout=RENDER_TIMEOUT)
    # The newest cached run is selected on start (the sidebar's run picker shows it).
    picker = page.get_by_role("combobox", name="Current run")
    picker.wait_for(timeout=RENDER_TIMEOUT)
    assert "two-moons" in picker.input_value()
    assert_no_traceback(page)
    page.screenshot(path=str(tmp_path / "train.png"), full_page=True)

    for link, heading, charts in (
        ("Inclusion & masks", "Inclusion statistics and masks", 3),
        ("Pruning", "Pruning", 1),
        ("Uncertainty", "Uncertainty", 2),
    ):
        page.locator("[data-testid='stSidebarNav'] a", has_text=link).first.click()
        page.get_by_role("heading", name=heading, exact=True).wait_for(timeout=RENDER_TIMEOUT)
        wait_for_charts(page, charts)
        assert_no_traceback(page)
        assert page.locator("[data-testid='stAlert']", has_text="Unexpected error").count() == 0
        page.screenshot(path=str(tmp_path / f"{link.split()[0].lower()}.png"), full_page=True)
    page.close()
    for name in ("train", "inclusion", "pruning", "uncertainty"):
        assert (tmp_path / f"{name}.png").stat().st_size > 10_000
    assert "Traceback" not in log.read_text()


# --- click to tune, share the view, take the model away; screenshots for the README ----------------

SCREENSHOT_DIR_VARIABLE = "BNN_SCREENSHOT_DIR"  # set it (e.g. to assets/screenshots) to keep the screenshots


def _threshold_in(address: str) -> float:
    from urllib.parse import parse_qs, urlparse

    return float(parse_qs(urlparse(address).query)["threshold"][0])


def test_click_on_the_curve_moves_the_threshold_and_the_link_reproduces_the_view(server, browser, tmp_path):
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    url, log = server
    page = browser.new_page(viewport={"width": 1400, "height": 2000}, accept_downloads=True)
    page.goto(f"{url}/pruning")
    page.get_by_role("heading", name="Pruning", exact=True).wait_for(timeout=RENDER_TIMEOUT)
    wait_for_charts(page, 1)
    page.wait_for_function("location.search.includes('threshold=')", timeout=RENDER_TIMEOUT)
    before = _threshold_in(page.url)
    # a click near the curve's sparse end selects the nearest point: its threshold becomes the slider's
    curve = page.locator("[data-testid='stMain'] .vega-embed").first  # the sidebar has the colour key
    moved = f"!location.search.includes('threshold={before:g}&') && !location.search.endsWith('threshold={before:g}')"
    # A click while the chart is still being laid out can be lost (seen 1 run in 4): click again, at
    # the box measured afresh, a bounded number of times.
    for attempt in range(5):
        box = curve.bounding_box()
        page.mouse.click(box["x"] + box["width"] * 0.12, box["y"] + box["height"] * 0.5)
        try:
            page.wait_for_function(moved, timeout=RENDER_TIMEOUT if attempt == 4 else 10_000)
            break
        except PlaywrightTimeout:
            if attempt == 4:
                raise
    after = _threshold_in(page.url)
    assert after != before
    # The click reran the page's body alone (one st.fragment), not the navigation and sidebar: the server
    # logs a fragment run of the Pruning page (when the run ends, which may be after the address changed).
    for _ in range(100):
        lines = (log.parent / "reruns.jsonl").read_text().splitlines()
        runs = [json.loads(line) for line in lines if '"page"' in line]
        if any(run["page"] == "pruning" and run.get("fragment") for run in runs):
            break
        time.sleep(0.2)
    else:
        raise AssertionError(f"no fragment run of the Pruning page logged: {runs[-5:]}")
    slider = page.get_by_role("slider", name="threshold on inclusion_probability (keep above)")
    page.wait_for_function(
        "value => [...document.querySelectorAll('[data-testid=\"stSliderThumbValue\"]')]"
        ".some(e => Math.abs(parseFloat(e.textContent) - value) < 1e-3)",
        arg=after,
        timeout=RENDER_TIMEOUT,
    )
    assert slider.count() == 1
    assert_no_traceback(page)

    # the downloads: the curve as CSV and the pruned model that load_exported reads
    with page.expect_download(timeout=120_000) as info:  # the export runs on a shared 2-core machine
        page.get_by_role("button", name="Download the curve (CSV)").click()
    csv_path = tmp_path / "curve.csv"
    info.value.save_as(csv_path)
    header, *rows = csv_path.read_text().splitlines()
    assert header == "threshold,density,accuracy" and len(rows) >= 10
    with page.expect_download(timeout=120_000) as info:  # the export runs on a shared 2-core machine
        page.get_by_role("button", name="Download the pruned model").click()
    zip_path = tmp_path / "model.zip"
    info.value.save_as(zip_path)
    import zipfile

    with zipfile.ZipFile(zip_path) as archive:
        archive.extractall(tmp_path / "model")
    from dashboard.backend import load_exported

    exported = load_exported(tmp_path / "model")
    assert exported.meta["threshold"] == pytest.approx(after)

    # a copied link, opened in a fresh browser context, shows the same view
    link = page.url
    other = browser.new_context(viewport={"width": 1400, "height": 2000}).new_page()
    other.goto(link)
    other.get_by_role("heading", name="Pruning", exact=True).wait_for(timeout=RENDER_TIMEOUT)
    wait_for_charts(other, 1)
    other.wait_for_function(
        "value => [...document.querySelectorAll('[data-testid=\"stSliderThumbValue\"]')]"
        ".some(e => Math.abs(parseFloat(e.textContent) - value) < 1e-3)",
        arg=after,
        timeout=RENDER_TIMEOUT,
    )
    assert _threshold_in(other.url) == pytest.approx(after)
    assert_no_traceback(other)
    other.close()
    page.close()
    assert "Traceback" not in log.read_text()


def compact_png(path: Path, colours: int = 128) -> None:
    """A screenshot in 128 colours, optimised: the README's pictures stay small (assets/ is under 8 MB)."""
    from PIL import Image

    with Image.open(path) as image:
        quantised = image.convert("RGB").quantize(
            colors=colours, method=Image.Quantize.FASTOCTREE, dither=Image.Dither.NONE
        )
    quantised.save(path, "PNG", optimize=True)


def test_screenshots_of_every_page(lesson_server, browser, tmp_path):
    """The README's first lesson shows these (BNN_SCREENSHOT_DIR=assets/screenshots keeps them), on
    runs that show what the lesson says: the network trained with the defaults separates the moons."""
    from core.runs import load_run

    url, log, run_id = lesson_server
    headline = load_run(run_id, cache_dir=log.parent).headline_metrics()
    assert headline["SIM-SIM R=10 accuracy"] >= 0.97, headline
    folder = Path(os.environ.get(SCREENSHOT_DIR_VARIABLE) or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    page = browser.new_page(viewport={"width": 1400, "height": 1800})
    for path, heading, charts in (
        ("", "Train a sparse Bayesian network", 0),
        ("inclusion", "Inclusion statistics and masks", 3),
        ("pruning", "Pruning", 1),
        ("uncertainty", "Uncertainty", 4),
        ("compare", "Compare runs", 2),
        ("playground", "Playground", 3),
        ("glossary", "Glossary", 0),
    ):
        page.goto(f"{url}/{path}?run={run_id}")
        page.get_by_role("heading", name=heading, exact=True).wait_for(timeout=RENDER_TIMEOUT)
        if charts:
            wait_for_charts(page, charts)
        page.wait_for_timeout(1000)
        assert_no_traceback(page)
        target = folder / f"{path or 'train'}.png"
        page.screenshot(path=str(target), full_page=True)
        compact_png(target)
        assert 10_000 < target.stat().st_size < 150_000
    page.close()


def test_the_playground_updates_while_it_trains(server, browser):
    url, log = server
    page = browser.new_page(viewport={"width": 1400, "height": 1800})
    page.goto(f"{url}/playground")
    page.get_by_role("heading", name="Playground", exact=True).wait_for(timeout=RENDER_TIMEOUT)
    progress = page.locator("[data-testid='stProgress']")
    seen: list[str] = []
    deadline = time.monotonic() + 300  # 3000 epochs with 40 pictures: about 20 s quiet, minutes under load
    while time.monotonic() < deadline:
        texts = progress.all_inner_texts()
        if texts and (not seen or seen[-1] != texts[0]):
            seen.append(texts[0])
        if texts and texts[0].startswith("done"):
            break
        page.wait_for_timeout(100)
    training = [t for t in seen if t.startswith("training: epoch")]
    assert len(training) >= 2, seen  # the picture changed while the training ran
    assert re.match(r"done: epoch (\d+)/\1\b", seen[-1]), seen  # trained to its last epoch
    wait_for_charts(page, 3)
    assert_no_traceback(page)
    page.close()


def test_a_reload_keeps_progress_and_cancel_a_copied_link_shows_progress_only(server, browser, tmp_path):
    url, log = server
    page = browser.new_page(viewport={"width": 1400, "height": 1800})
    with evidence_on_failure(page, tmp_path, log):
        reload_and_copied_link(page, url, browser)
    # the reload restored the form's remembered values into its widgets' keys (form_memory), on purpose:
    # Streamlit's warning about a widget's default and a Session State value is off for it (config.toml)
    assert "also had its value set via the Session State API" not in log.read_text()


def reload_and_copied_link(page, url: str, browser) -> None:
    page.goto(url)
    page.get_by_role("heading", name="Train a sparse Bayesian network").wait_for(timeout=RENDER_TIMEOUT)
    choose(page, "Dataset", "two-moons")
    hidden = page.get_by_role("textbox", name="Hidden widths")
    hidden.fill("6")
    hidden.press("Enter")
    epochs = page.get_by_role("textbox", name="Epochs (0:")
    epochs.fill("5000")
    epochs.press("Enter")
    page.wait_for_timeout(1500)
    page.get_by_role("button", name="Train", exact=True).click()
    page.get_by_role("button", name="Cancel", exact=True).wait_for(timeout=RENDER_TIMEOUT)
    page.wait_for_function("location.search.includes('train=')", timeout=RENDER_TIMEOUT)
    page.reload()
    # the reloaded page finds its training: Cancel (the same browser owns it), progress, the sidebar's
    # line; Train stays on (a browser may queue one more training behind its running one)
    page.get_by_role("button", name="Cancel", exact=True).wait_for(timeout=RENDER_TIMEOUT)
    assert not page.get_by_role("button", name="Train", exact=True).is_disabled()
    page.locator("[data-testid='stSidebar']").get_by_text("Training in the background").wait_for(timeout=RENDER_TIMEOUT)
    # the link copied into another browser (a classmate, the same address) shows the progress only
    classmate = browser.new_page(viewport={"width": 1400, "height": 1800})
    classmate.goto(page.url)
    classmate.get_by_text("only the browser that asked for it").wait_for(timeout=RENDER_TIMEOUT)
    classmate.locator("[data-testid='stSidebar']").get_by_text("Training in the background").wait_for(
        timeout=RENDER_TIMEOUT
    )
    assert classmate.get_by_role("button", name="Cancel", exact=True).count() == 0
    classmate.close()
    page.get_by_role("button", name="Cancel", exact=True).click()
    page.get_by_text("Training cancelled").wait_for(timeout=RENDER_TIMEOUT)
    assert not page.get_by_role("button", name="Train", exact=True).is_disabled()
    assert_no_traceback(page)
    page.close()


def wait_until_idle(page) -> None:
    """Until the page's script run is over (a user waits for the page to load before using it)."""
    page.wait_for_function(SCRIPT_IDLE, timeout=RENDER_TIMEOUT, polling="raf")


def choose(page, label: str, option: str) -> None:
    """Pick `option` in the select box `label` once the page is drawn, and wait until the box shows it and
    the run it started is over."""
    from playwright.sync_api import expect

    wait_until_idle(page)
    box = page.get_by_role("combobox", name=label)
    box.click()
    page.get_by_role("option", name=option).first.click()
    expect(box).to_have_value(re.compile(re.escape(option)), timeout=RENDER_TIMEOUT)
    wait_until_idle(page)


@contextmanager
def evidence_on_failure(page, folder: Path, log: Path) -> Iterator[None]:
    """A failing step says what the page showed: its text, a screenshot, its console errors, its closed
    sockets and the server log's tail (twice in CI the Train form's "Hidden widths" box did not appear
    within 30 or 90 s of a dataset being chosen, and never here: the next time says why)."""
    console: list[str] = []
    closed: list[str] = []
    page.on("console", lambda message: console.append(f"{message.type}: {message.text}"[:300]))
    page.on("websocket", lambda socket: socket.on("close", lambda _: closed.append(socket.url)))
    try:
        yield
    except Exception as error:
        shot = folder / "failure.png"
        try:
            page.screenshot(path=str(shot), full_page=True)
            text = page.locator("body").inner_text(timeout=5_000)
        except Exception as unreadable:  # the page itself is gone: say so
            text = f"(page unreadable: {unreadable})"
        raise AssertionError(
            f"{error}\n--- page text ---\n{text[:3000]}\n--- console ---\n"
            + "\n".join(console[-20:])
            + f"\n--- closed sockets: {closed}\n--- screenshot: {shot}\n--- server log tail ---\n"
            + log.read_text()[-3000:]
        ) from error


def test_play_replays_the_epochs_in_the_browser(server, browser):
    """The Play button's timer (a fragment that reruns itself) moves the epoch, in the address too,
    from the first epoch to the last and stops there."""
    from urllib.parse import parse_qs, urlparse

    url, log = server
    page = browser.new_page(viewport={"width": 1400, "height": 2200})
    page.goto(f"{url}/inclusion")
    page.get_by_role("heading", name="Inclusion statistics and masks", exact=True).wait_for(timeout=RENDER_TIMEOUT)
    play = page.get_by_role("button", name="Play", exact=True)
    play.wait_for(timeout=RENDER_TIMEOUT)
    page.wait_for_function("window.location.search.includes('epoch=2')", timeout=RENDER_TIMEOUT)
    play.click()
    seen: list[str] = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        epoch = parse_qs(urlparse(page.url).query).get("epoch", [None])[0]
        if epoch is not None and (not seen or seen[-1] != epoch):
            seen.append(epoch)
        if seen[-2:] == ["1", "2"] and page.get_by_role("button", name="Play", exact=True).count():
            break
        page.wait_for_timeout(100)
    assert seen[-2:] == ["1", "2"], seen  # started again at the first epoch, played to the last
    page.get_by_role("button", name="Play", exact=True).wait_for(timeout=RENDER_TIMEOUT)  # and stopped
    assert_no_traceback(page)
    page.close()
    assert "Traceback" not in log.read_text()


# --- a hostile student's links and requests ------------------------------------------------------------------


def unquote(text: str) -> str:
    from urllib.parse import unquote as decode

    return decode(text)


def resident_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


HOSTILE_LINKS = [  # (page, query, the parameter the warning names)
    ("pruning", "R=-5", "R"),
    ("uncertainty", "R=100000", "R"),
    ("pruning", "run=[Teacher says: log in again](http://evil.example/login)", "run"),
    ("pruning", "run=![x](http://evil.example/track.png)", "run"),
    ("pruning", "threshold=![x](http://evil.example/track.png)", "threshold"),
    ("pruning", "threshold=5", "threshold"),
    ("pruning", "mode=bogus", "mode"),
    ("", "page=nonsense", "page"),
    ("uncertainty", "ood=<img src=http://evil.example/t.png>", "ood"),
]


def test_hostile_links_and_oversized_requests_leave_the_server_whole(server, browser):
    """Each link is refused with one warning naming its parameter, nothing from it renders as a link or an
    image, no page breaks; oversized requests are refused before anything is built, and the server's
    memory stays within the default budget (BNN_MEMORY_BUDGET_MB, 1.5 GB) of where it started."""
    url, log = server
    pid = SERVER_PIDS[url]
    page = browser.new_page(viewport={"width": 1400, "height": 1800})
    page.goto(url)
    page.get_by_role("heading", name="Train a sparse Bayesian network").wait_for(timeout=RENDER_TIMEOUT)
    start_mb = resident_mb(pid)
    for path, query, param in HOSTILE_LINKS:
        page.goto(f"{url}/{path}?{query}")
        page.locator("[data-testid='stAlert']", has_text=f"The link's {param} was not applied").first.wait_for(
            timeout=RENDER_TIMEOUT
        )
        assert page.locator("a[href*='evil.example']").count() == 0, (
            query,
            [a.evaluate("e => e.parentElement.outerHTML") for a in page.locator("a[href*='evil.example']").all()],
        )
        assert page.locator("img[src*='evil.example']").count() == 0, query
        # the refused value left the address (the page may write its own setting there again)
        assert query not in unquote(page.url.replace("+", " ")), (query, page.url)
        assert_no_traceback(page)
        assert page.locator("[data-testid='stException']").count() == 0, query
    # the same session goes on working: a page switch after the refusals draws its charts
    page.goto(f"{url}/pruning")
    page.get_by_role("heading", name="Pruning", exact=True).wait_for(timeout=RENDER_TIMEOUT)
    wait_for_charts(page, 1)
    # oversized requests: refused from their sizes alone
    page.goto(f"{url}/playground")
    page.get_by_role("heading", name="Playground", exact=True).wait_for(timeout=RENDER_TIMEOUT)
    hidden = page.get_by_role("textbox", name="Hidden widths")
    for widths, said in (("35000, 35000", "limit 4096"), ("4000, 4000", "Too large for the playground")):
        hidden.fill(widths)
        hidden.press("Enter")
        page.locator("[data-testid='stAlert']", has_text=said).first.wait_for(timeout=RENDER_TIMEOUT)
    page.goto(url)
    page.get_by_role("heading", name="Train a sparse Bayesian network").wait_for(timeout=RENDER_TIMEOUT)
    choose(page, "Dataset", "two-moons")
    params = page.get_by_role("textbox", name=re.compile("Generator parameters"))
    params.fill("n=1e9, n_test=1000000")
    params.press("Enter")
    page.locator("[data-testid='stAlert']", has_text="BNN_MAX_GENERATED_POINTS").first.wait_for(timeout=RENDER_TIMEOUT)
    assert page.get_by_role("button", name="Train", exact=True).is_disabled()
    assert_no_traceback(page)
    grown = resident_mb(pid) - start_mb
    assert grown < 1536, f"the server grew by {grown:.0f} MB"
    page.close()
    assert "Traceback" not in log.read_text()

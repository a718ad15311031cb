"""Error display: every BNNError becomes st.error(message); nothing shows a traceback.

Messages are plain text (core's errors quote what was typed or linked: a file name, an option, a
run id), so they are escaped for Markdown and never rendered as links or images; they name no
absolute server path (without_server_paths).

    with guard("Loading the run"):
        ...  # a BNNError here is shown as an error box, the rest of the page still runs
"""

from __future__ import annotations

import functools
import logging
import re
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import streamlit as st

from core.errors import BNNError
from dashboard.backend import plain

log = logging.getLogger("dashboard")

# The server's log of its script runs ($BNN_RERUN_LOG, opened by dashboard/app.py, which sets this to a
# function of (start, end, thread CPU seconds, page) while the log is on): a page body's own fragment runs
# are logged through it, as app.py logs full runs, so the load tests see every run a move causes.
rerun_logger: Callable[[float, float, float, str], None] | None = None

UNEXPECTED_PREFIX = "Unexpected error"
PROJECT_ROOT = Path(__file__).resolve().parent.parent
# An absolute path in a message: after a start, a space, a quote, a bracket or '=', up to a space or quote.
_ABSOLUTE_PATH = re.compile(r"(?:(?<=^)|(?<=[\s'\"(\[=]))(/[^\s'\"),;\]]+)")


def _known_roots() -> list[tuple[str, str]]:
    """(server folder, what a page writes instead), the longest folder first."""
    from dashboard import backend

    roots = [*backend.server_folders(), (PROJECT_ROOT, "")]
    pairs = {str(Path(folder).expanduser().resolve()): name for folder, name in roots}
    pairs.update({str(Path(folder).expanduser()): name for folder, name in roots})
    return sorted(pairs.items(), key=lambda pair: -len(pair[0]))


def without_server_paths(text: str) -> str:
    """`text` as a page may show it: no absolute server path. core's messages name files for the
    command line; on a page the store's, cache's and data folder's paths become their names (a file
    under them stays relative: 'the download cache/mnist/...'), project files are relative to the
    project, and any other absolute path keeps only its last part ('.../train.csv')."""
    text = str(text)
    try:
        roots = _known_roots()
    except Exception:  # the folders cannot be resolved: the generic rule below still applies
        roots = []
    for folder, name in roots:
        if folder and folder != "/":
            text = text.replace(folder + "/", f"{name}/" if name else "").replace(folder, name or ".")
    return _ABSOLUTE_PATH.sub(lambda match: ".../" + (match.group(1).rstrip("/").rsplit("/", 1)[-1]), text)


def slots(count: int) -> tuple[Any, ...]:
    """`count` containers made at once, for a page's sections, before anything that appears only sometimes.

    A polled fragment's place is fixed when the script run that defines it draws it, and a poll of a
    fragment an earlier run defined writes at that run's place. Where an element before it appeared in
    one run and not the next (a warning, a widget of one mode, an error that stops the page), the poll
    wrote past the end of the page: the browser failed on the delta ("Bad delta path index 14 (should be
    between [0, 13])", benchmarks/results/browser_class.md), closed its websocket and stayed blank. A
    fragment in its own section's slot stands at the same place in every run (tests/test_fragment_places.py).
    """
    return tuple(st.container() for _ in range(count))


@contextmanager
def guard(what: str | None = None) -> Iterator[None]:
    """Show BNNErrors as their message; show anything else as a one-line error and log its traceback.

    st.stop()/st.rerun() raise BaseExceptions and pass through untouched.
    """
    try:
        yield
    except BNNError as exc:
        st.error(plain(without_server_paths(f"{what}: {exc}" if what else str(exc))))
    except Exception as exc:  # a bug: keep the page alive, the traceback goes to the server log
        log.exception("dashboard error")
        st.error(
            plain(
                f"{UNEXPECTED_PREFIX}{' while ' + what.lower() if what else ''} "
                f"({type(exc).__name__}): {without_server_paths(str(exc))}. The details are in the server log."
            )
        )


def body_fragment(page: str) -> Callable[[Callable[[], None]], Callable[[], None]]:
    """st.fragment for a page's body below its heading: a move of a control in it reruns the body alone,
    not the navigation, sidebar and heading; the body's own runs go to the server's rerun log."""
    from dashboard import streamlit_compat

    def decorate(body: Callable[[], None]) -> Callable[[], None]:
        @functools.wraps(body)  # the fragment's identity is the body's name and place
        def logged() -> None:
            logger = rerun_logger
            if logger is None or not streamlit_compat.fragment_only_run():
                return body()  # a full run: app.py logs it whole
            started, cpu = time.time(), time.thread_time()
            try:
                body()
            finally:
                logger(started, time.time(), time.thread_time() - cpu, page)

        return st.fragment(logged)

    return decorate

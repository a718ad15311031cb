"""Error display: every BNNError becomes st.error(message); nothing shows a traceback.

Messages are plain text (core's errors quote what was typed or linked: a file name, an option, a
run id), so they are escaped for Markdown and never rendered as links or images.

    with guard("Loading the run"):
        ...  # a BNNError here is shown as an error box, the rest of the page still runs
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from typing import Iterator

import streamlit as st

from core.errors import BNNError
from core.validate import plain

log = logging.getLogger("dashboard")

UNEXPECTED_PREFIX = "Unexpected error"


@contextmanager
def guard(what: str | None = None) -> Iterator[None]:
    """Show BNNErrors as their message; show anything else as a one-line error and log its traceback.

    st.stop()/st.rerun() raise BaseExceptions and pass through untouched.
    """
    try:
        yield
    except BNNError as exc:
        st.error(plain(f"{what}: {exc}" if what else str(exc)))
    except ImportError as exc:  # a core module still missing in this checkout
        log.exception("missing module")
        st.error(plain(f"{what + ': ' if what else ''}a core module is not available ({exc}). "
                       "Update the checkout or reinstall the project."))
    except Exception as exc:  # a bug: keep the page alive, the traceback goes to the server log
        log.exception("dashboard error")
        st.error(plain(f"{UNEXPECTED_PREFIX}{' while ' + what.lower() if what else ''} "
                       f"({type(exc).__name__}): {exc}. The details are in the server log."))

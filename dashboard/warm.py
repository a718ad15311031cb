"""dashboard.serve's warm-up page: ?warm=<its secret> starts the server process's draw processes and waits
until they have imported torch and core, before the class arrives.

Started with the class's first Pruning page instead, the four children of two server processes took 13.5-14.7 s
of CPU in the class's first 20 s on 2 cores, and the slider moves' first updates waited behind them
(benchmarks/results/classroom_kept_draws_lazy.md). The secret is $BNN_SERVE_WARM_TOKEN, which dashboard.serve
sets for its processes and sends only with its own warm-up page (dashboard/serve.py, WARM_UP). Any other value
is an unknown parameter, ignored as every unknown one is; the parameter never stays in the address.

A classroom server without that warm-up (one `streamlit run`) does the same at its first page, the teacher's
(`start_with_the_first_page`). Either way it happens once per process, so no page of the class waits for the
draw processes while they draw (benchmarks/results/classroom_warm_start.md).
"""

from __future__ import annotations

import hmac

import streamlit as st

WARM_PARAM = "warm"
_first_page_seen = False  # of this process


def warm_up() -> bool:
    """Whether this script run was the warm-up page (and the draw processes were started and waited for)."""
    global _first_page_seen
    from dashboard import cache, settings

    token = st.query_params.get(WARM_PARAM)
    if token is None:
        start_with_the_first_page()
        return False
    del st.query_params[WARM_PARAM]
    expected = settings.serve_warm_token()
    if not expected or not hmac.compare_digest(str(token).encode("utf-8", "replace"), expected.encode()):
        start_with_the_first_page()
        return False
    _first_page_seen = True  # this is the process's first page: no later page waits for the draw processes
    cache.warm_draw_processes()
    return True


def start_with_the_first_page() -> bool:
    """A classroom server's first page (the teacher's, on a server without dashboard.serve's warm-up, such as one
    `streamlit run`) starts the draw processes and waits until they have answered, as the warm-up page does:
    they import torch and core before the class, not beside its first Pruning pages. Once per process; not
    outside a Streamlit server (AppTest, the command line). Whether it started them now."""
    global _first_page_seen
    if _first_page_seen:
        return False
    _first_page_seen = True
    from core.errors import BNNError
    from dashboard import cache, settings
    from dashboard.streamlit_compat import serving_browsers

    try:
        if not serving_browsers() or not settings.classroom_mode():
            return False
    except BNNError:  # a bad BNN_CLASSROOM: the pages that read it say so
        return False
    cache.warm_draw_processes()
    return True

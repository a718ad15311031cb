"""dashboard.serve's warm-up page: ?warm=<its secret> starts the server process's draw processes and waits
until they have imported torch and core, before the class arrives.

Started with the class's first Pruning page instead, the four children of two server processes took 13.5-14.7 s
of CPU in the class's first 20 s on 2 cores, and the slider moves' first updates waited behind them
(benchmarks/results/classroom_kept_draws_lazy.md). The secret is $BNN_SERVE_WARM_TOKEN, which dashboard.serve
sets for its processes and sends only with its own warm-up page (dashboard/serve.py, WARM_UP). Any other value
is an unknown parameter, ignored as every unknown one is; the parameter never stays in the address.
"""

from __future__ import annotations

import hmac

import streamlit as st

WARM_PARAM = "warm"


def warm_up() -> bool:
    """Whether this script run was the warm-up page (and the draw processes were started and waited for)."""
    from dashboard import cache, settings

    token = st.query_params.get(WARM_PARAM)
    if token is None:
        return False
    del st.query_params[WARM_PARAM]
    expected = settings.serve_warm_token()
    if not expected or not hmac.compare_digest(str(token).encode("utf-8", "replace"), expected.encode()):
        return False
    cache.warm_draw_processes()
    return True

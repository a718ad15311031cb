"""Vega-Lite specs from Altair charts, safe while other sessions' threads convert charts too.

Altair's data transformer and theme are process-wide settings. `st.altair_chart` switches both for
the length of its own conversion, sending the data to a private dict, under a lock of its own;
a `chart.to_dict()` in another thread during that window lost its datasets (the spec named data
that was not in it: a chart with axes and no marks). The classroom load test saw it on the Pruning
page while two other sessions' Train pages drew training curves with `st.altair_chart`.

So every conversion in the dashboard goes through `spec()`, which holds the lock Streamlit holds
while it switches those settings, and the pages draw with `st.vega_lite_chart(spec(chart))`, never
`st.altair_chart`. Conversions are pure Python (the interpreter runs one thread at a time anyway),
so taking turns costs no throughput.
"""

from __future__ import annotations

from typing import Any

# the lock st.altair_chart holds while it switches Altair's global settings
from dashboard.streamlit_compat import ALTAIR_GLOBALS_LOCK


def spec(chart: Any, validate: bool = True) -> dict[str, Any]:
    """chart.to_dict() with the data inline as named datasets (no row limit: a long training's
    curves or a fine grid are drawn whole, as st.altair_chart drew them)."""
    import altair as alt

    with ALTAIR_GLOBALS_LOCK, alt.data_transformers.enable("default", max_rows=None):
        return chart.to_dict(validate=validate)

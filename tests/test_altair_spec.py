"""Chart specs keep their data while st.altair_chart converts charts in another thread.

Streamlit switches Altair's process-wide data transformer while it converts a chart (its data goes
to a private dict); a plain chart.to_dict() in another thread at that moment returned a spec naming
datasets it did not contain (seen in the 30-session classroom load test)."""

from __future__ import annotations

import pathlib
import threading

import altair as alt
import pandas as pd

from dashboard import altair_spec

ROOT = pathlib.Path(__file__).resolve().parents[1]


def line_chart(rows: int = 50) -> alt.Chart:
    frame = pd.DataFrame({"x": range(rows), "y": range(rows)})
    return alt.Chart(frame).mark_line().encode(x="x", y="y")


def test_specs_keep_their_data_while_streamlit_converts_charts_in_another_thread():
    from streamlit.elements.vega_charts import _convert_altair_to_vega_lite_spec

    chart = line_chart()
    stop = threading.Event()

    def streamlit_side():
        while not stop.is_set():
            _convert_altair_to_vega_lite_spec(chart)

    thread = threading.Thread(target=streamlit_side)
    thread.start()
    try:
        specs = [altair_spec.spec(chart) for _ in range(200)]
    finally:
        stop.set()
        thread.join()
    for spec in specs:
        names = {layer_data["name"] for layer_data in [spec["data"]]}
        assert names <= set(spec.get("datasets", {})), sorted(spec)


def test_large_data_is_inline_and_altair_settings_are_left_as_they_were():
    before = (alt.data_transformers.active, dict(alt.data_transformers.options))
    spec = altair_spec.spec(line_chart(6000))  # above Altair's default 5000-row limit
    assert sum(len(rows) for rows in spec["datasets"].values()) == 6000
    assert (alt.data_transformers.active, dict(alt.data_transformers.options)) == before


def test_the_pages_never_convert_charts_with_st_altair_chart():
    offenders = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "dashboard").rglob("*.py")
        if "st.altair_chart(" in path.read_text(encoding="utf-8")
    ]
    assert offenders == []

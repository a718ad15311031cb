"""A live playground for small problems: a small network trains in this process, drawn while it trains."""

from __future__ import annotations

import json
import time
from typing import Any

import numpy as np
import streamlit as st

from dashboard import (
    altair_spec,
    backend,
    charts,
    explain,
    playground_charts,
    playground_training,
    state,
    streamlit_compat,
)
from dashboard.backend import plain
from dashboard.ui import guard, slots, without_server_paths

JOB_KEY = "playground_job"
CHARTS_KEY = "playground_charts"  # the last picture's chart specs: a poll that finds no new picture reuses them
POLL_SECONDS = 0.5
# The training waits until the first picture (the data and the untrained fit) was sent and one poll
# later (time for the browser to draw it without a training competing for the CPU), at most this long.
FIRST_PICTURE_HOLD_SECONDS = 2.0
# While it trains, the network graph (one mark per kept edge: 4,000 on the default 64-64 net) and the
# histogram are rebuilt at most this often: rebuilding them with every picture took the interpreter
# from the training.
GRAPH_SECONDS = 3.0
# The picture's charts are rebuilt at most this often while it trains (the progress bar follows every
# poll): building them takes the interpreter (one process, one lock) from the training thread.
REDRAW_SECONDS = 1.0
PICTURES = 20  # pictures the training thread takes over a training (each predicts R draws on the grid)

st.header("Playground")
st.markdown(explain.PAGE_INTROS["playground"])

# The controls and the picture each in its slot: the picture's polled fragment stands at the same place
# whichever family's prior slider and whichever errors come before it (ui.slots).
controls_slot, picture_slot = slots(2)
with controls_slot:
    left, middle, right = st.columns(3)
    dataset = left.selectbox("Data", list(playground_training.PLAYGROUND_SETS), key="play_dataset")
    method = middle.selectbox("Family", ["lbbnn", "bnn", "horseshoe", "sparse-vd"], key="play_method")
    start = playground_training.playground_defaults(dataset)
    hidden_text = right.text_input(
        "Hidden widths",
        ", ".join(map(str, start["hidden"])),
        key=f"play_hidden_{dataset}",
        help=f"at most {playground_training.playground_max_weights() or 'any number of'} weights",
    )
    left, middle, right = st.columns(3)
    noise = left.number_input(
        "Data noise",
        value=start["noise"],
        step=0.01 if start["noise"] < 1 else 0.5,
        format="%.3f",
        key=f"play_noise_{dataset}",
        help="the noise level of the generated data (its own units)",
    )
    epochs = middle.slider(
        "Epochs",
        100,
        3000,
        start["epochs"],
        step=100,
        key="play_epochs",
        help="fewer epochs answer sooner; on the 1-D sets under about 3000 the fit stays a line",
    )
    kl_weight = right.slider("KL weight", 0.01, 1.0, 0.1, key="play_kl", help="1 = the ELBO; smaller tempers the prior")
    options: dict = {}
    if method == "lbbnn":
        options["prior_inclusion"] = st.slider(
            "Prior inclusion probability psi",
            0.01,
            0.99,
            0.135,
            step=0.005,
            key="play_psi",
            help="how likely the prior thinks each weight is needed",
        )
    elif method == "bnn":
        options["prior_variance"] = st.slider("Prior variance", 0.01, 10.0, 1.0, key="play_prior_variance")
    elif method == "horseshoe":
        options["global_scale"] = float(10 ** st.slider("log10 global scale", -7.0, 0.0, -5.0, step=0.5, key="play_gs"))

    values = None
    with guard("Invalid setting"):
        if noise < 0:
            st.error(f"Data noise: must be 0 or more, got {noise:g}")
            st.stop()
        values = {
            "dataset": dataset,
            "method": method,
            "hidden": list(backend.parse_hidden(hidden_text)),
            "dataset_params": {"noise": float(noise)},
            "family_options": options,
            "train": {"epochs": int(epochs), "batch_size": 500, "kl_weight": float(kl_weight)},
        }
    if values is None:
        st.stop()
    # Refused from the sizes alone, before a model or a dataset is built in this (shared) process.
    refusal = playground_training.playground_refusal(values)
    if refusal is not None:
        job = st.session_state.pop(JOB_KEY, None)
        if job is not None:
            job[1].cancel()
        st.error(f"Too large for the playground: {refusal}")
        st.stop()

    with guard("Counting the network's weights"):
        # Counted from the config, as the Train form counts them (core.cost): the default 64-64 net on a 1-D set
        # has 4,353, not "a few hundred".
        size = backend.training_estimate(backend.make_config(values))
        st.caption(
            f"This network: {' x '.join(map(str, values['hidden']))} hidden units on {dataset}, "
            f"{size['weights']:,} weights (biases included), {int(epochs):,} epochs of batches of 500."
        )

    # Any change restarts the training: the class sees a prior act within seconds.
    key = json.dumps(values, sort_keys=True)
    job = st.session_state.get(JOB_KEY)
    if job is None or job[0] != key:
        if job is not None:
            job[1].cancel()
        with guard("Cannot start the playground"):
            st.session_state[JOB_KEY] = (
                key,
                playground_training.PlaygroundTraining(
                    values,
                    every=max(1, int(epochs) // PICTURES),
                    hold_seconds=FIRST_PICTURE_HOLD_SECONDS,
                    present=state.session_presence(),
                ).start(),
            )
    job = st.session_state.get(JOB_KEY)
    if job is not None and job[0] != key:
        st.stop()


def picture_was_drawn(training: playground_training.PlaygroundTraining, picture: dict) -> bool:
    cached = st.session_state.get(CHARTS_KEY)
    return cached is not None and cached["training"] is training and cached["picture"] is picture


def chart_specs(training: playground_training.PlaygroundTraining, picture: dict, show_main: Any = None) -> dict:
    """Vega-Lite specs of the picture's three charts, built once per picture and at most every
    REDRAW_SECONDS while it trains; the histogram and the network graph (once per set of masks) at
    most every GRAPH_SECONDS while it trains; the last picture always. show_main(spec), when given, draws the main
    chart as soon as it is built, before the other two (the first picture appears sooner)."""
    cached = st.session_state.get(CHARTS_KEY)
    if picture_was_drawn(training, picture):
        return cached["specs"]
    if (
        cached is not None
        and cached["training"] is training
        and not training.done
        and time.monotonic() - cached["built"] < REDRAW_SECONDS
    ):
        return cached["specs"]
    data = training._dataset
    if data.task == "regression":
        true_mean = None if data.y_grid_mean is None else data.unstandardise(data.y_grid_mean)
        main = charts.regression_bands(
            picture["x_plot"],
            picture["mean"],
            picture["epistemic_std"],
            picture["total_std"],
            data.x_train,
            data.unstandardise(data.y_train),
            true_mean,
            colour=charts.family_colour(training.config.method),
        )
        if data.in_features == 1:  # the gap lesson's number, as the Uncertainty page prints it
            ratio = backend.gap_ratio(picture["x_plot"], data.x_train, picture["epistemic_std"])
            main = main.properties(title=f"{main.title}; gap ratio of the epistemic band {ratio:.2f}")
    else:
        xs = np.unique(picture["x_plot"][:, 0])
        ys = np.unique(picture["x_plot"][:, 1])
        main = charts.decision_surface(xs, ys, picture, data.x_train, data.y_train, size=200, samples=training.samples)
    main = altair_spec.spec(main, validate=False)
    if show_main is not None:
        show_main(main)
    masks_key = (picture["default"], tuple(np.packbits(m).tobytes() for m in picture["masks"]))
    same_training = cached is not None and cached["training"] is training
    side_built = cached["side_built"] if same_training else 0.0
    colour = charts.family_colour(training.config.method)
    if same_training and not training.done and time.monotonic() - side_built < GRAPH_SECONDS:
        histogram, graph, masks_key = cached["specs"]["histogram"], cached["specs"]["graph"], cached["masks_key"]
    else:
        histogram = playground_charts.histogram_spec(picture, colour)  # fixed axes: they do not jump between fits
        if same_training and cached["masks_key"] == masks_key:
            graph = cached["specs"]["graph"]
        else:
            graph = altair_spec.spec(
                charts.network_graph(
                    picture["masks"], title=f"kept at the default cut ({picture['default']:g})", colour=colour
                ),
                validate=False,
            )
        side_built = time.monotonic()
    specs = {"main": main, "graph": graph, "histogram": histogram}
    st.session_state[CHARTS_KEY] = {
        "training": training,
        "picture": picture,
        "masks_key": masks_key,
        "side_built": side_built,
        "built": time.monotonic(),
        "specs": specs,
    }
    return specs


def draw(training: playground_training.PlaygroundTraining) -> None:
    picture = training.snapshot()
    if training.error:
        st.error(plain(without_server_paths(f"Training failed: {training.error}")))
    if picture is None:
        if not training.error:
            st.info("Starting ...")
        return
    status = "done" if training.done else "training"
    st.progress(
        min(1.0, picture["epoch"] / max(1, picture["total_epochs"])),
        text=f"{status}: epoch {picture['epoch']}/{picture['total_epochs']}"
        + (f", loss {picture['loss']:.4f}" if picture["loss"] is not None else ""),
    )
    drawn_before = picture_was_drawn(training, picture)
    main = st.empty()
    specs = chart_specs(training, picture, show_main=lambda spec: main.vega_lite_chart(spec, width="content"))
    main.vega_lite_chart(specs["main"], width="content")
    # One chart per row: side by side, the graph and the two-panel histogram overflowed a 1400-px window.
    st.vega_lite_chart(specs["graph"], width="content")
    st.caption(playground_training.kept_text(picture))
    st.vega_lite_chart(specs["histogram"], width="content")
    if picture["statistic"] == "signal_to_noise":
        st.caption(
            f"Signal-to-noise ratios above {playground_charts.STATISTIC_DOMAINS['signal_to_noise'][1]:g} "
            "are counted in the last bin; the axes stay fixed between fits."
        )
    if drawn_before:  # the browser had a poll's time to draw it alone: the training may take the CPU now
        training.first_picture_drawn()
    else:
        training.first_picture_sent()


@st.fragment(run_every=POLL_SECONDS)
def live() -> None:
    training = st.session_state[JOB_KEY][1]
    if training.done:
        st.rerun()  # drawn once more without polling
    streamlit_compat.keep_fragment_polling(POLL_SECONDS)  # a poll: its timer again (streamlit_compat, 6)
    draw(training)


training = job[1]
with picture_slot:
    if training.done:
        draw(training)
        st.caption("Change any control to train again.")
    else:
        live()

"""Tune the pruning threshold: accuracy vs density (click to set), suggested threshold, metric
cards, accuracy vs R, and the pruned model and the curve to take away."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import streamlit as st

from dashboard import backend, cache, charts, explain, state, streamlit_compat
from dashboard.server_secrets import secret
from dashboard.ui import body_fragment, guard, slots

PAGE_DEFAULT_MODE = "prune"  # the mode the threshold acts on (mpm names the cut at the family default)
TOLERANCE_KEY = "suggest_tolerance"

run = state.run_page("Pruning")
run_id = run.run_id
dataset = run.dataset()
st.markdown(explain.PAGE_INTROS["pruning"])
curve_key = f"curve:{run_id}"
applied_key = f"curve_pick_applied:{run_id}"


def follow_curve_click() -> None:
    """A click on the curve (the chart's selection state) moves the threshold, once per click."""
    picked = charts.picked_threshold(st.session_state.get(curve_key))
    if picked is not None and picked != st.session_state.get(applied_key):
        st.session_state[applied_key] = picked
        state.store_setting(run_id, "threshold", picked)


def apply_suggestion(value: float) -> None:
    state.store_setting(run_id, "threshold", float(value))


# While a setting's draws are incomplete, its cards are redrawn this often ($BNN_CARDS_POLL_SECONDS).
POLL_SECONDS = backend.dashboard_settings.CARDS_POLL_SECONDS.read(fallback=secret)
# The accuracy-vs-R chart less often: its polls were half a class's fragment runs, and the dearer half (a
# new ladder and chart per new count of draws); the cards' poll reruns the page once all R are in.
CHART_POLL_SECONDS = max(2.0, POLL_SECONDS)


@dataclass(frozen=True)
class View:
    """The settings one run of the page's body read: what its cards and chart, and their polls, show."""

    spec: backend.ThresholdRange
    mode: str
    weights: str | None
    effective: float | None  # the threshold the mode cuts at
    draws: int


def refining(
    view: View, progress: tuple[int, int], draw: Callable[[int, int], None], what: str, every: float = POLL_SECONDS
) -> None:
    """draw(k, R) with the k of R draws kept now, and again every `every` seconds (an st.fragment) while
    k < R; once complete, one full run stops the polling. Only the page's thread calls st: the draws come
    from the draw cache's background workers."""
    latest = {"first": progress}

    @st.fragment(run_every=every if progress[0] < progress[1] else None)
    def part() -> None:
        with guard(what):  # a poll runs outside the page's guard
            first = latest.pop("first", None)
            ready, wanted = first or cache.test_draws_ready(
                run_id, view.mode, view.draws, view.effective, 0, view.weights
            )
            if first is None and ready >= wanted:
                st.rerun()  # complete: a full run stops the polling
            if first is None:  # a poll: its timer again, in case the run that defined it was cut short
                streamlit_compat.keep_fragment_polling(every)
            draw(ready, wanted)

    part()


def based_on(ready: int, wanted: int) -> str:
    """What the cards rest on, said on them (the load test reads "Based on k of R draws" as incomplete)."""
    if ready >= wanted:
        return f"Based on all {wanted} draws." if wanted > 1 else ""
    return (
        f"Based on {ready} of {wanted} draws: the others are being computed and the numbers refine as they arrive."
        if ready
        else f"Based on 0 of {wanted} draws: computing the first."
    )


def metric_cards(view: View, ready: int, wanted: int) -> None:
    """The test set's metric cards from `ready` of the `wanted` draws (0: placeholders until the first)."""
    mode = view.mode
    metrics = cache.test_metrics(run_id, mode, ready, view.effective, 0, view.weights) if ready else None

    def value(name: str, form: str = ".4f") -> str:
        return "..." if metrics is None or metrics[name] is None else format(metrics[name], form)

    if metrics is not None and metrics["disconnected"]:
        st.warning(
            "This network is disconnected: no input reaches an output, every prediction is the same. "
            "Lower the threshold."
        )
    expected = backend.expected_density(cache.statistics(run_id), view.spec.name) if mode == "bma" else None
    if mode == "bma":
        density_label, density_text = (
            ("expected density", f"{expected:.4f}") if expected is not None else ("density", "1 (every weight)")
        )
        density_help = (
            "bma samples the structure: the mean inclusion probability is the expected fraction of "
            "weights in one sampled network"
            if expected is not None
            else "this family's bma draws weights, never switches them off"
        )
    else:
        density_label, density_text, density_help = "density", value("density"), "fraction of weights kept"
    cards = st.columns(5)
    draws_note = None if wanted <= 1 else f"{ready} of {wanted} draws"
    first = dict(delta=draws_note, delta_color="off", delta_arrow="off") if draws_note else {}
    if dataset.task == "classification":
        cards[0].metric("accuracy", value("accuracy"), **first)
        cards[1].metric("NLL", value("nll"))
        cards[2].metric("ECE", value("ece"))
        cards[3].metric(density_label, density_text, help=density_help)
        doubt = "n/a" if metrics is not None and metrics["doubt_accuracy"] is None else value("doubt_accuracy")
        cards[4].metric(
            f"doubt@{backend.DOUBT_LEVEL:g} accuracy",
            doubt,
            help=f"accuracy on the test inputs whose model-averaged max probability exceeds {backend.DOUBT_LEVEL:g}",
            delta=None if metrics is None else f"{metrics['doubt_count']} of {dataset.n_test} decided",
            delta_color="off",
            delta_arrow="off",
        )
    else:
        cards[0].metric("RMSE", value("rmse"), help="in the target's original units", **first)
        cards[1].metric("test log-likelihood", value("log_likelihood"))
        cards[2].metric("95% coverage", value("coverage_95", ".3f"))
        cards[3].metric(density_label, density_text, help=density_help)
    if based_on(ready, wanted):
        st.caption(based_on(ready, wanted))


def accuracy_chart(view: View, ready: int, wanted: int) -> None:
    """Accuracy against R up to the draws kept now."""
    if ready:
        chart = cache.accuracy_by_samples_chart(run_id, view.mode, ready, view.effective, 0, view.weights)
        st.vega_lite_chart(chart)
    if ready < wanted:
        st.caption(based_on(ready, wanted))


# The body is one fragment: a move of the threshold (or any control below the intro) reruns it alone, not the
# navigation, sidebar and heading. The server's run for a move took 15-19 ms of CPU against about 28 ms for the
# whole page, and a class of ten made 58-64 full runs instead of 175-187; the browser's own work a move did not
# change measurably (benchmarks/results/page_fragment_landed.md, `python -m benchmarks.browser_class`).
@body_fragment("pruning")
def page_body() -> None:
    # Each section in its slot, made before anything that appears only sometimes (the weights radio, a
    # warning, the suggestion): the two polled fragments stand at the same place in every run (ui.slots).
    settings_slot, draws_note_slot, cards_slot, sweep_slot, accuracy_slot = slots(5)
    settings_read = False
    with settings_slot, guard("Reading the statistic"):
        spec = cache.threshold_range(run_id)
        follow_curve_click()
        left, middle, right = st.columns([2, 1, 1])
        with middle:
            mode = state.prediction_mode_select(run_id, default=PAGE_DEFAULT_MODE)
        weights = None
        if mode == "prune":
            weights = state.persistent_widget(
                st.radio,
                run_id,
                "weights",
                "mean",
                "Weights of the kept connections",
                options=list(backend.WEIGHT_CHOICES),
                horizontal=True,
                help="mean: one network, the posterior means of the kept weights (what the curve "
                "traces); sample: R draws of the kept weights (the R slider)",
            )
        with left:
            reason = state.threshold_off_reason(mode, spec)
            threshold = state.threshold_slider(run_id, spec, disabled_reason=reason)
        with right:
            samples = state.samples_slider(run_id, disabled=not backend.mode_draws_samples(mode, weights))
        st.caption(
            backend.MODE_HELP[mode] + (f". {reason} The slider moves only the point on the curve." if reason else "")
        )
        effective = backend.mode_threshold(mode, threshold, spec.default)
        settings_read = True
    if not settings_read:  # the error is shown above; without the settings every later section would fail too
        st.stop()

    draws_read = False
    with draws_note_slot, guard("Evaluating the test set"):
        draws = samples if backend.mode_draws_samples(mode, weights) else 1
        # R x test-set size is costed before predicting (a 1,000,000-point test set at R = 100 took 6.65 GB):
        # R is lowered to what fits, and the page says so.
        draws, lowered = backend.samples_allowed(run, dataset.n_test, draws)
        if lowered:
            (st.warning if draws >= 1 else st.error)(lowered)
            if draws < 1:
                st.stop()
        draws_read = True
    if not draws_read:  # the error is shown above
        st.stop()
    with cards_slot, guard("Evaluating the test set"):
        # The cards answer at once with the draws already kept (all of a mode that draws nothing) and refine
        # in place while the others are computed in the background (cache.test_draws_ready).
        view = View(spec, mode, weights, effective, draws)
        progress = cache.test_draws_ready(run_id, mode, draws, effective, 0, weights)
        refining(view, progress, lambda ready, wanted: metric_cards(view, ready, wanted), "Evaluating the test set")

    with sweep_slot, guard("Sweeping thresholds"):
        curve = cache.sweep(run_id)
        loss_unit = "accuracy points" if curve["metric"] == "accuracy" else "% of the best RMSE"
        tolerance_points = st.number_input(
            f"Suggest the sparsest threshold within this loss of the best ({loss_unit})",
            value=0.5,
            step=0.1,
            format="%.2f",
            key=TOLERANCE_KEY,
            help="0.5 accuracy points = 0.005; for RMSE the loss is relative to the best RMSE on the curve",
        )
        if tolerance_points < 0:
            st.error(f"The allowed loss must be 0 or more, got {tolerance_points:g}.")
            tolerance_points = 0.0
            st.stop()
        tolerance = float(tolerance_points) / 100
        suggested = backend.suggested_threshold(
            curve["thresholds"], curve["density"], curve["values"], curve["metric"], tolerance
        )
        st.vega_lite_chart(
            cache.tuning_chart(run_id, threshold, tolerance),
            on_select="rerun",
            key=curve_key,
            selection_mode=charts.PICK,
        )
        if suggested is not None:
            left, right = st.columns([3, 1])
            left.markdown(
                f"Suggested threshold **{suggested['threshold']:.4g}** (green star): density "
                f"{suggested['density']:.4f}, {curve['metric']} {suggested['value']:.4f} "
                f"(best {suggested['best']:.4f})."
            )
            right.button(
                "Apply the suggestion",
                key="apply_suggestion",
                on_click=apply_suggestion,
                args=(suggested["threshold"],),
                disabled=not backend.mode_uses_slider(mode),
                help=None if backend.mode_uses_slider(mode) else "choose mode prune to tune the threshold",
            )
        st.caption(
            f"Each point prunes at one threshold and predicts with the mean weights of the kept connections "
            f"(test {curve['metric']}"
            + (", original units" if curve["metric"] == "rmse" else "")
            + "); the red diamond is the current threshold. Click a point to prune there."
        )
        left, middle, right = st.columns(3)
        # A download does not rerun the page: a rerun gives the other button's deferred file a new id,
        # and a click on it before the browser has the new id fetched nothing (seen in the browser test).
        left.download_button(
            "Download the curve (CSV)",
            data=backend.curve_csv(curve["thresholds"], curve["density"], curve["values"], curve["metric"]),
            file_name=f"{run_id}-curve.csv",
            mime="text/csv",
            key="download_curve",
            on_click="ignore",
        )
        middle.download_button(
            f"Download the pruned model at {threshold:.4g} (zip)",
            data=lambda: cache.export_zip(run_id, float(threshold)),
            file_name=f"{run_id}-pruned-{threshold:.4g}.zip",
            mime="application/zip",
            key="download_model",
            on_click="ignore",
            help="what `python -m core export RUN --threshold T --out DIR` writes (model.safetensors, "
            "model.json and a README.md with a plain-PyTorch loader)",
        )
        right.download_button(
            f"Download it as ONNX at {threshold:.4g} (zip)",
            data=lambda: cache.export_zip(run_id, float(threshold), "onnx"),
            file_name=f"{run_id}-pruned-{threshold:.4g}-onnx.zip",
            mime="application/zip",
            key="download_onnx",
            on_click="ignore",
            help="`python -m core export RUN --threshold T --out DIR --format onnx`: the same files "
            "plus model.onnx (only the active units, mean weights) and an onnxruntime snippet",
        )
        counts = cache.kept_counts(run_id, float(threshold))
        st.caption(
            f"At threshold {threshold:.4g}: {counts['raw']:,} of {counts['total']:,} weights and biases kept "
            f"(raw, what the density counts); {counts['active']:,} of them lie on an input-to-output path, and "
            "those are what the downloads hold. The others leave units that reach no output or enter units no "
            "input reaches, so they change no prediction."
        )

    if dataset.task == "classification" and backend.mode_draws_samples(mode, weights):
        with accuracy_slot, guard("Accuracy vs R"):
            refining(
                view,
                cache.test_draws_ready(run_id, mode, draws, effective, 0, weights),
                lambda ready, wanted: accuracy_chart(view, ready, wanted),
                "Accuracy vs R",
                every=CHART_POLL_SECONDS,
            )


page_body()

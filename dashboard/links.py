"""The address's parameters: a shared link (`?run=..&page=..&threshold=..&mode=..&R=..&weights=..&ood=..&epoch=..`)
and the page's own training (`?train=..`).

Each parameter is read by one parser built on core.validate and checked against what the current
run allows (the run's threshold range, the R slider's top, the prediction modes, the run's OOD sets,
its recorded epochs, the pages). A value is either taken exactly or refused with one plain-text
message naming the parameter, what was given and what is allowed; a refused value is removed from the
address, and the session's settings only ever hold accepted values. Before this, `?R=-5` raised
Streamlit's slider error and every later name of the page failed with it for the rest of the session,
and a link's text was rendered as Markdown inside the app's own warnings (`?run=![x](url)` made every
recipient's browser fetch that url).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Sequence

import streamlit as st

from core.errors import BNNError, InputError
from dashboard.backend import validate

RUN, PAGE, THRESHOLD, MODE, SAMPLES = "run", "page", "threshold", "mode", "R"
OOD, EPOCH, TRAIN = "ood", "epoch", "train"
WEIGHTS = "weights"  # the Pruning page's mean / sample weights of the kept connections (it changes the numbers)
# Run ids are 16 hex characters (a unique prefix is enough); a training token is 16 URL-safe
# characters. Either is one word: anything longer or with other characters is no id of this app.
ID_CHARS = 64
ID_PATTERN = r"[A-Za-z0-9_-]+"
OOD_CHARS = 400  # every OOD set of a run, comma-separated, is under 100 characters
MAX_SAMPLES = 100  # the top of the R slider on every page
DEFAULT_SAMPLES = 10  # where the R slider starts (and dashboard.prepare_lesson's R when a lesson names none)

REFUSED_KEY = "link_refusals"  # messages not yet shown (a page switch reruns the script before the page draws)
VIEW_APPLIED_KEY = "view_link_applied"
OOD_LINK_KEY = "ood_sets_link"  # (run id, accepted OOD sets) for the Uncertainty page
EPOCH_LINK_KEY = "epoch_link"  # (run id, accepted epoch) for the Inclusion page's playback


# --- one parser per parameter: text in, an accepted value out, or InputError -------------------------------


def parse_run(text: Any, run_ids: Sequence[str]) -> str:
    """A cached run's id, or a prefix naming exactly one cached run."""
    prefix = validate.text_of(text, RUN, ID_CHARS, ID_PATTERN, "a run id (letters, digits, - and _)")
    matches = [run_id for run_id in run_ids if run_id.startswith(prefix)] if prefix else []
    if len(matches) != 1:
        problem = "names several cached runs" if matches else "is not a cached run"
        raise InputError(f"{RUN}: {validate.shown(text)} {problem}; give a run id from the sidebar's list")
    return matches[0]


def parse_page(text: Any, pages: Iterable[str]) -> str:
    return validate.one_of(text, PAGE, pages)


def parse_threshold(text: Any, spec: Any) -> float:
    """A threshold within the run's range (spec.low to spec.high, a ThresholdRange)."""
    return validate.real_number(text, THRESHOLD, float(spec.low), float(spec.high))


def parse_mode(text: Any, modes: Iterable[str]) -> str:
    return validate.one_of(text, MODE, modes)


def parse_weights(text: Any, choices: Iterable[str]) -> str:
    return validate.one_of(text, WEIGHTS, choices)


def parse_samples(text: Any, high: int = MAX_SAMPLES) -> int:
    return validate.whole_number(text, SAMPLES, 1, high)


def parse_ood(text: Any, choices: Sequence[str]) -> list[str]:
    """Comma-separated OOD sets of the run; empty is none (what the page writes when none is chosen)."""
    joined = validate.text_of(text, OOD, OOD_CHARS, what="comma-separated OOD set names")
    names = [part.strip() for part in joined.split(",") if part.strip()]
    if names and not choices:
        raise InputError(f"{OOD}: {validate.shown(text)} given, but this run has no OOD sets")
    return list(dict.fromkeys(validate.one_of(name, OOD, choices) for name in names))


def parse_epoch(text: Any, n_epochs: int) -> int:
    if n_epochs < 1:
        raise InputError(f"{EPOCH}: {validate.shown(text)} given, but this run recorded no epochs")
    return validate.whole_number(text, EPOCH, 1, n_epochs)


def parse_train_token(text: Any) -> str:
    """The format of a training request's token (whose it is, is the training queue's business)."""
    return validate.text_of(text, TRAIN, ID_CHARS, ID_PATTERN, "a training token (letters, digits, - and _)")


def link_number(value: float, low: float, high: float) -> str:
    """A threshold as the address shows it: 6 significant digits, unless that rounding falls outside
    [low, high] (a slider at its end), where the exact value is written so the link stays valid."""
    short = f"{value:.6g}"
    return short if low <= float(short) <= high else repr(float(value))


# --- taking a parameter or refusing it ---------------------------------------------------------------------


def refuse(param: str, reason: str) -> None:
    """Remove the parameter from the address and keep one message to show (see show_refusals)."""
    if param in st.query_params:
        del st.query_params[param]
    st.session_state.setdefault(REFUSED_KEY, []).append(
        f"The link's {param} was not applied and was removed from the address. {reason}"
    )


def accept(param: str, parse: Callable[[str], Any]) -> Any | None:
    """The address's value of `param` parsed, or None: absent, or refused (with its message)."""
    if param not in st.query_params:
        return None
    text = st.query_params.get(param)
    try:
        return parse(text)
    except InputError as exc:
        refuse(param, str(exc))
    except BNNError as exc:  # the run it is checked against could not be read
        refuse(param, f"{param}: {validate.shown(text)} could not be checked: {exc}")
    return None


def show_refusals() -> None:
    """The refusals kept so far, once each, as plain text (never Markdown from the address)."""
    for message in st.session_state.pop(REFUSED_KEY, []):
        st.warning(validate.plain(message))


VIEW = (THRESHOLD, MODE, SAMPLES, WEIGHTS, OOD, EPOCH)


def apply_view(run_id: str | None) -> None:
    """Once per session (a browser tab opening a link): the address's threshold, mode, R, weights, OOD
    sets and epoch, each checked against the run `run_id`, become that run's settings."""
    from dashboard import backend, cache, state

    if st.session_state.get(VIEW_APPLIED_KEY):
        return
    # Only the address the tab opened with is a link: later the page writes its own settings there.
    st.session_state[VIEW_APPLIED_KEY] = True
    if run_id is None:
        for param in VIEW:
            if param in st.query_params:
                refuse(
                    param,
                    f"{param}: {validate.shown(st.query_params.get(param))} given, but there is no "
                    "cached run to show it on",
                )
        return

    def recorded_epochs() -> int:
        snapshots = cache.snapshots(run_id)
        return 0 if snapshots is None else int(snapshots.n_epochs)

    threshold = accept(THRESHOLD, lambda text: parse_threshold(text, cache.threshold_range(run_id)))
    if threshold is not None:
        state.store_setting(run_id, "threshold", threshold)
    mode = accept(MODE, lambda text: parse_mode(text, backend.PREDICTION_MODES))
    if mode is not None:
        state.store_setting(run_id, "mode", mode)
        state.store_setting(run_id, "mode_chosen", True)
    samples = accept(SAMPLES, parse_samples)
    if samples is not None:
        state.store_setting(run_id, "samples", samples)
    weights = accept(WEIGHTS, lambda text: parse_weights(text, backend.WEIGHT_CHOICES))
    if weights is not None:
        state.store_setting(run_id, "weights", weights)
    ood = accept(OOD, lambda text: parse_ood(text, backend.ood_set_names(cache.cached_run(run_id).dataset())))
    if ood is not None:
        st.session_state[OOD_LINK_KEY] = (run_id, ood)
    epoch = accept(EPOCH, lambda text: parse_epoch(text, recorded_epochs()))
    if epoch is not None:
        st.session_state[EPOCH_LINK_KEY] = (run_id, epoch)


def linked_value(key: str, run_id: str) -> Any | None:
    """A link's accepted value for this run (OOD_LINK_KEY, EPOCH_LINK_KEY), taken once."""
    entry = st.session_state.get(key)
    if entry is None or entry[0] != run_id:
        return None
    del st.session_state[key]
    return entry[1]

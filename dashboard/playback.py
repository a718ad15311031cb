"""Playback of a run's training on the Inclusion page: an epoch slider and a Play button that
replay what training recorded after every epoch (histograms of the statistic, density per layer,
and for small networks the mask at the page's threshold).

The epoch lives in the address (`?epoch=12`, counted from 1 over every phase) like the page's
other controls. While playing, a fragment reruns every PLAY_SECONDS and moves the slider on.
"""

from __future__ import annotations

import time
from typing import Any, Sequence

import numpy as np
import streamlit as st

from dashboard import cache, charts, links, raster, state, streamlit_compat

PLAY_SECONDS = 0.6  # between frames while playing
FRAMES = 60  # a playback shows about this many frames, however long the training
EPOCH_PARAM = "epoch"  # read and checked against the run's recorded epochs in dashboard/links.py


def epoch_key(run_id: str) -> str:
    return f"playback_epoch:{run_id}"


def playing_key(run_id: str) -> str:
    return f"playback_playing:{run_id}"


def frame_key(run_id: str) -> str:
    return f"playback_frame:{run_id}"


def shown_key(run_id: str) -> str:
    return f"playback_shown:{run_id}"


def step_size(n_epochs: int, frames: int = FRAMES) -> int:
    """Epochs advanced per frame: every epoch for short trainings, about n/frames for long ones."""
    return max(1, int(np.ceil(int(n_epochs) / frames)))


def next_epoch(current: int, n_epochs: int, step: int) -> int | None:
    """The epoch after `current` (1-based) while playing, the last one included; None past the end."""
    if current >= n_epochs:
        return None
    return min(int(n_epochs), int(current) + int(step))


def render(run_id: str, family: str, snapshots: Any, threshold: float, labels: Sequence[str]) -> None:
    """The playback controls and charts for a run whose snapshots are `snapshots`."""
    n = int(snapshots.n_epochs)
    if n == 0:
        st.info("This run recorded no epochs.")
        return
    key, playing_now = epoch_key(run_id), playing_key(run_id)
    if key not in st.session_state:
        # Opens on the final model unless the link (checked against this run's epochs) says otherwise.
        st.session_state[key] = links.linked_value(links.EPOCH_LINK_KEY, run_id) or n
    st.session_state[key] = int(min(n, max(1, int(st.session_state[key]))))
    playing = bool(st.session_state.get(playing_now, False))

    def toggle() -> None:
        if st.session_state.get(playing_now):
            st.session_state[playing_now] = False
            return
        if int(st.session_state[key]) >= n:  # from the start again
            st.session_state[key] = 1
        st.session_state[playing_now] = True
        st.session_state.pop(shown_key(run_id), None)

    @st.fragment(run_every=PLAY_SECONDS if playing else None)
    def frame() -> None:
        # A frame moves on only from an epoch that was drawn, PLAY_SECONDS after it was drawn: a run that
        # starts or stops the timer draws nothing, and on a loaded server (CI at 95431ea) the full run after
        # Play came more than a frame after the click and used to skip the first epoch unseen.
        if (
            st.session_state.get(playing_now)
            and st.session_state.get(shown_key(run_id)) == int(st.session_state[key])
            and time.monotonic() - st.session_state.get(frame_key(run_id), 0.0) >= 0.8 * PLAY_SECONDS
        ):
            following = next_epoch(int(st.session_state[key]), n, step_size(n))
            if following is None:
                st.session_state[playing_now] = False
            else:
                st.session_state[key] = following
        if bool(st.session_state.get(playing_now, False)) != playing:
            st.rerun()  # start or stop the timer: the fragment's run_every is set on a full run
        if playing:  # a poll: its timer again, in case the run that defined it was cut short (streamlit_compat, 6)
            streamlit_compat.keep_fragment_polling(PLAY_SECONDS)
        left, right = st.columns([5, 1])
        epoch = int(
            left.slider(
                "Epoch",
                min_value=1,
                max_value=max(n, 2),
                key=key,
                disabled=n < 2,
                help="epochs counted over every phase (warm start included); the last is the trained model",
            )
        )
        epoch = min(epoch, n)
        if st.session_state.get(shown_key(run_id)) != epoch:
            st.session_state[shown_key(run_id)] = epoch
            st.session_state[frame_key(run_id)] = time.monotonic()
        right.button(
            "Pause" if playing else "Play",
            key=f"playback_button:{run_id}",
            on_click=toggle,
            help=f"replay the epochs, {step_size(n)} per frame" if step_size(n) > 1 else "replay the epochs one by one",
        )
        state.publish(EPOCH_PARAM, epoch)
        index = epoch - 1
        phase = str(snapshots.phase[index])
        density = float(snapshots.overall_density[index])
        note = (
            " Warm start: a deterministic net of the same shape trains; this network waits at its initial "
            "values until the warm start copies the weights in."
            if phase == "warm-start"
            else ""
        )
        st.caption(
            f"Epoch {epoch} of {n} ({phase}, epoch {int(snapshots.epoch[index])} of that phase): "
            f"density {density:.4f} at the default threshold {snapshots.default_threshold:g}.{note}"
        )
        # The threshold's rule is data (with_threshold_rules): a threshold step swaps it in the drawn chart.
        # Cached per run and epoch (dashboard/cache_charts.py): a rerun copies the specs, it does not rebuild them.
        st.vega_lite_chart(
            cache.with_small_rows_shipped(
                charts.with_threshold_rules(cache.playback_histograms_chart(run_id, index, tuple(labels)), threshold)
            )
        )
        st.vega_lite_chart(cache.playback_density_chart(run_id, index, tuple(labels)))
        replay = snapshots.masks_at(index, threshold)
        if replay is not None:
            recorded, masks = replay
            when = f"epoch {recorded + 1}" + (
                f" (the latest recorded up to epoch {epoch})" if recorded != index else ""
            )
            columns = st.columns(min(3, len(masks)))
            for layer, mask in enumerate(masks):
                columns[layer % len(columns)].vega_lite_chart(raster.mask_picture(mask, f"{labels[layer]} at {when}"))
            st.caption(
                f"Masks at the threshold above ({threshold:.4g}), replayed from the statistic recorded at "
                f"{when} (stored in half precision: a weight within about 0.1% of the threshold may flip)."
            )
        else:
            st.caption(
                "Masks are replayed for small networks only (at most a few thousand weights); this run "
                "has the histograms and densities of every epoch."
            )

    frame()

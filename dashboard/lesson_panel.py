"""The lesson panel: `?lesson=NAME&step=K` opens a shipped lesson (core/lessons.py, assets/lessons/)
and `?hide=a,b` hides controls, as TensorFlow Playground's per-control flags do.

A step is a shared link: moving to it writes the step's run (when it is cached) and view into the
address and lets dashboard/links.py apply them exactly as it applies any link, with the same checks
and messages, then opens the step's page. Lesson text is the shipped files' own Markdown; anything
taken from the address is checked by one parser (core.validate) and refused with one message.
"""

from __future__ import annotations

from typing import Any, Mapping

import streamlit as st

from core.errors import InputError
from dashboard import backend

LESSON, STEP, HIDE = "lesson", "step", "hide"
ACTIVE_KEY = "lesson_active"  # (lesson name, step number) being shown
SEEN_KEY = "lesson_address_seen"  # the (lesson, step) address last followed: a new one is a new link
HIDE_SEEN_KEY = "hide_address_seen"
HIDDEN_KEY = "hidden_controls"  # the address's accepted ?hide= names
VIEW_PARAMS = {"threshold": "threshold", "mode": "mode", "R": "R", "ood": "ood", "epoch": "epoch"}
HIDE_CHARS = 400  # every control name, comma-separated, is under 200 characters


def parse_hide(text: Any) -> tuple[str, ...]:
    """`?hide=`: comma-separated control names, each one of HIDEABLE_CONTROLS."""
    value = backend.validate.text_of(text, HIDE, HIDE_CHARS, r"[a-z_,]*", "control names separated by commas")
    return tuple(backend.validate.one_of(name, HIDE, backend.HIDEABLE_CONTROLS) for name in value.split(",") if name)


def hidden(control: str) -> bool:
    """Whether `control` is hidden now: by the address's ?hide= or by the lesson step shown."""
    if control in st.session_state.get(HIDDEN_KEY, ()):
        return True
    active = _active()
    return active is not None and control in active[1].hide


def _active() -> tuple[Any, Any, int] | None:
    """(lesson, step, number) shown, or None; a lesson that no longer loads ends the lesson."""
    entry = st.session_state.get(ACTIVE_KEY)
    if entry is None:
        return None
    try:
        lesson = backend.load_lesson(entry[0])
        return lesson, lesson.step(entry[1]), int(entry[1])
    except InputError:
        st.session_state.pop(ACTIVE_KEY, None)
        return None


def follow_address(pages: Mapping[str, Any]) -> None:
    """A new ?lesson= / ?step= / ?hide= in the address: checked, then followed (once per new value)."""
    from dashboard import links

    # A ?hide= link hides for the rest of the session (a page switch drops the address's parameters);
    # a new ?hide= replaces it, and an empty one shows everything again.
    hide = st.query_params.get(HIDE)
    if hide is not None and hide != st.session_state.get(HIDE_SEEN_KEY):
        st.session_state[HIDE_SEEN_KEY] = hide
        st.session_state[HIDDEN_KEY] = links.accept(HIDE, parse_hide) or ()
    name, step = st.query_params.get(LESSON), st.query_params.get(STEP)
    if name is None:
        if step is not None:
            links.refuse(STEP, f"{STEP}: {backend.validate.shown(step)} given without a lesson (?lesson=NAME)")
        st.session_state.pop(ACTIVE_KEY, None)
        st.session_state.pop(SEEN_KEY, None)
        return
    if (name, step) == st.session_state.get(SEEN_KEY):
        return
    st.session_state[SEEN_KEY] = (name, step)
    lesson = links.accept(LESSON, backend.load_lesson)
    if lesson is None:
        if STEP in st.query_params:
            del st.query_params[STEP]
        st.session_state.pop(ACTIVE_KEY, None)
        return
    number = 1 if step is None else links.accept(STEP, lambda text: lesson_step_number(lesson, text))
    go_to(lesson, number or 1, pages)


def lesson_step_number(lesson: Any, text: Any) -> int:
    return backend.validate.whole_number(text, STEP, 1, len(lesson.steps))


def cached_run_ids() -> set[str]:
    from dashboard import cache

    return {row["run_id"] for row in cache.cached_run_list() if row.get("status", "ok") == "ok"}


@st.cache_data(max_entries=64, show_spinner=False)
def step_run_id(name: str, number: int) -> str | None:
    """The id the step's run has once trained (computed from its config and data: no training)."""
    return backend.load_lesson(name).step(number).run_id()


def go_to(lesson: Any, number: int, pages: Mapping[str, Any]) -> None:
    """Show step `number`: its run and view become the address (a link, applied by dashboard/links.py),
    then its page opens."""
    from dashboard.links import VIEW_APPLIED_KEY

    step = lesson.step(number)
    st.session_state[ACTIVE_KEY] = (lesson.name, number)
    params: dict[str, str] = {LESSON: lesson.name, STEP: str(number)}
    st.session_state[SEEN_KEY] = (lesson.name, str(number))
    if st.query_params.get(HIDE) is not None:
        params[HIDE] = st.query_params.get(HIDE)
    run_id = step_run_id(lesson.name, number)
    if run_id is not None and run_id in cached_run_ids():
        params["run"] = run_id
        for key, param in VIEW_PARAMS.items():
            if key in step.view:
                value = step.view[key]
                params[param] = ",".join(value) if isinstance(value, list) else str(value)
    st.session_state.pop(VIEW_APPLIED_KEY, None)  # the step's view is a new link: applied as one
    st.switch_page(pages[step.page], query_params=params)


def render(pages: Mapping[str, Any]) -> None:
    """The panel in the sidebar while a lesson is open: the step's text, Back / Next, Leave."""
    active = _active()
    if active is None:
        return
    lesson, step, number = active
    with st.sidebar.container(border=True):
        st.markdown(f"**{backend.validate.plain(lesson.title)}**")
        st.caption(f"Step {number} of {len(lesson.steps)}: {backend.validate.plain(step.title)}")
        st.markdown(step.text)  # the shipped lesson's own Markdown (assets/lessons), not the address's
        run_id = step_run_id(lesson.name, number)
        if run_id is not None and run_id not in cached_run_ids():
            config = step.run_config()
            st.info(
                f"This step shows a run that is not trained yet ({config.method} on {config.dataset}, "
                f"hidden {'-'.join(map(str, config.hidden))}): train it on the Train page, then come back."
            )
        back, forward, leave = st.columns(3)
        if back.button("Back", key="lesson_back", disabled=number <= 1, width="stretch"):
            go_to(lesson, number - 1, pages)
        if forward.button("Next", key="lesson_next", disabled=number >= len(lesson.steps), width="stretch"):
            go_to(lesson, number + 1, pages)
        if leave.button("Leave", key="lesson_leave", width="stretch"):
            st.session_state.pop(ACTIVE_KEY, None)
            for param in (LESSON, STEP):
                if param in st.query_params:
                    del st.query_params[param]
            st.rerun()

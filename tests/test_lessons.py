"""Lessons as files (core/lessons.py): the shipped lessons load, and every malformed lesson is
refused with one message naming the file, the step and the key, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.errors import InputError
from core.lessons import HIDEABLE_CONTROLS, PAGES, lesson_names, load_lesson, parse_lesson

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ("first-steps", "prior-sparsity", "gaps")

GOOD_STEP = '[[step]]\npage = "train"\ntitle = "t"\ntext = "x"\n'


def test_the_three_lessons_ship_and_load():
    assert set(SHIPPED) <= set(lesson_names())
    for name in SHIPPED:
        lesson = load_lesson(name)
        assert lesson.steps and lesson.title
        for step in lesson.steps:
            assert (ROOT / "dashboard" / "views" / f"{step.page}.py").exists(), step.page


def test_first_steps_follows_the_readme_lesson():
    lesson = load_lesson("first-steps")
    assert [step.page for step in lesson.steps] == [
        "train",
        "inclusion",
        "pruning",
        "uncertainty",
        "compare",
        "playground",
    ]
    assert [c.method for c in lesson.run_configs()] == ["lbbnn", "bnn"]
    assert lesson.run_configs()[0].dataset == "two-moons"


def test_step_numbers_count_from_one_and_are_checked():
    lesson = load_lesson("first-steps")
    assert lesson.step(1).page == "train" and lesson.step("6").page == "playground"
    for bad in (0, 7, "-1", "two", "1.5"):
        with pytest.raises(InputError, match="^step: "):
            lesson.step(bad)


@pytest.mark.parametrize(
    "name",
    [
        "../first-steps",
        "first-steps/../../etc/passwd",
        "/etc/passwd",
        "FIRST-STEPS",
        "first_steps",
        "no-such-lesson",
        "",
        "a" * 200,
    ],
)
def test_a_lesson_name_is_one_of_the_shipped_names(name):
    with pytest.raises(InputError, match="^lesson: "):
        load_lesson(name)


MALFORMED = {
    "not toml": ("title = \n", "not valid TOML"),
    "binary": (b"\x89PNG\r\n\x1a\n\x00\x00", "not UTF-8|not valid TOML"),
    "empty": ("", "the key 'title' is missing"),
    "no steps": ('title = "x"\n', "at least one"),
    "unknown top key": ('title = "x"\ntitel = "y"\n' + GOOD_STEP, "unknown key 'titel'"),
    "unknown step key": (
        'title = "x"\n' + GOOD_STEP + 'pgae = "x"\n',
        r"step 1: unknown key 'pgae' \(did you mean 'page'\?\)",
    ),
    "missing page": ('title = "x"\n[[step]]\ntitle = "t"\ntext = "x"\n', "step 1: the key 'page' is missing"),
    "bad page": (
        'title = "x"\n[[step]]\npage = "admin"\ntitle = "t"\ntext = "x"\n',
        r"step 1\.page: 'admin' is not one of",
    ),
    "bad control": ('title = "x"\n' + GOOD_STEP + 'hide = ["everything"]\n', r"step 1\.hide: 'everything'"),
    "hide not a list": ('title = "x"\n' + GOOD_STEP + 'hide = "seed"\n', r"step 1\.hide: expected a list"),
    "run and preset": (
        'title = "x"\n' + GOOD_STEP + 'preset = "quick-mnist"\nrun = { dataset = "two-moons" }\n',
        "either run or preset",
    ),
    "bad preset": ('title = "x"\n' + GOOD_STEP + 'preset = "slow-mnist"\n', r"step 1\.preset: 'slow-mnist'"),
    "bad run": ('title = "x"\n' + GOOD_STEP + 'run = { dataset = "two-moons", hidden = [-3] }\n', r"step 1\.run: "),
    "threshold out of range": (
        'title = "x"\n' + GOOD_STEP + "view = { threshold = 1.5 }\n",
        r"step 1\.view\.threshold",
    ),
    "R too large": ('title = "x"\n' + GOOD_STEP + "view = { R = 100000 }\n", r"step 1\.view\.R"),
    "bad mode": ('title = "x"\n' + GOOD_STEP + 'view = { mode = "best" }\n', r"step 1\.view\.mode"),
    "unknown view key": ('title = "x"\n' + GOOD_STEP + "view = { zoom = 2 }\n", "unknown key 'zoom'"),
    "title not text": ("title = 3\n" + GOOD_STEP, "lesson t.title: expected text"),
    "too large": ('title = "x"\n' + GOOD_STEP + "# " + "x" * 70_000 + "\n", "a lesson is at most"),
    "second step bad": ('title = "x"\n' + GOOD_STEP + GOOD_STEP.replace("train", "nowhere"), r"step 2\.page"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_lessons_get_one_clear_message(case):
    text, expected = MALFORMED[case]
    with pytest.raises(InputError, match=expected) as caught:
        parse_lesson(text, "t")
    message = str(caught.value)
    assert message.startswith("lesson t") or message.startswith("step"), message
    assert "\n" not in message and "Traceback" not in message


def test_a_good_minimal_lesson_parses_with_its_values():
    lesson = parse_lesson(
        'title = "x"\n' + GOOD_STEP + 'view = { threshold = 0.25, R = 7, mode = "mpm" }\nhide = ["seed", "method"]\n',
        "t",
    )
    step = lesson.step(1)
    assert step.view == {"threshold": 0.25, "R": 7, "mode": "mpm"}
    assert step.hide == ("seed", "method") and step.run_config() is None
    assert set(step.hide) <= set(HIDEABLE_CONTROLS) and step.page in PAGES


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.text(max_size=300), st.binary(max_size=300)))
def test_any_text_is_a_lesson_or_one_input_error(text):
    try:
        parse_lesson(text, "fuzz")
    except InputError as exc:
        assert "\n" not in str(exc)


@settings(max_examples=100, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["threshold", "R", "mode", "ood", "epoch"]),
        st.one_of(
            st.integers(-10, 10**6),
            st.floats(allow_nan=True, allow_subnormal=False),
            st.text(max_size=20),
            st.lists(st.text(max_size=5), max_size=3),
        ),
    )
)
def test_any_view_table_is_accepted_exactly_or_refused(view):

    from core.lessons import _view

    try:
        accepted = _view(view, "v")
    except InputError:
        return
    for key, value in accepted.items():
        if key in ("threshold",):
            assert 0.0 <= value <= 1.0
        if key == "R":
            assert 1 <= value <= 100

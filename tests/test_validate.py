"""The one rule for outside values (core.validate) and the settings declared with it (core.settings)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core import validate
from core.errors import ConfigError, InputError
from core.settings import Setting


@given(st.integers(min_value=-(10**6), max_value=10**6), st.integers(-1000, 1000), st.integers(0, 2000))
def test_whole_number_accepts_exactly_the_range(number, low, span):
    high = low + span
    for given_value in (number, str(number), f"  {number} "):
        if low <= number <= high:
            assert validate.whole_number(given_value, "n", low, high) == number
        else:
            with pytest.raises(InputError) as info:
                validate.whole_number(given_value, "n", low, high)
            assert str(info.value).startswith("n: ") and f"{low:g}" in str(info.value)


@given(
    st.one_of(
        st.text(max_size=200),
        st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=False),
        st.booleans(),
        st.none(),
        st.lists(st.integers(), max_size=3),
        st.integers(min_value=-(10**5000) // 1, max_value=10**60),
    )
)
@settings(max_examples=300)
def test_whole_number_never_raises_anything_but_input_error(value):
    try:
        result = validate.whole_number(value, "epochs", 1, 10_000)
    except InputError as exc:
        message = str(exc)
        assert "\n" not in message and len(message) < 200  # one short line, whatever was given
        return
    assert isinstance(result, int) and 1 <= result <= 10_000
    assert not isinstance(value, bool)


def test_whole_number_refuses_fractions_booleans_and_huge_text():
    for bad in (2.5, "2.5", True, "1e400", "nan", "inf", "1" * 5000, "", "  ", None, "0x10"):
        with pytest.raises(InputError):
            validate.whole_number(bad, "n", 0, 10**9)
    assert validate.whole_number("1e3", "n", 0, 10**9) == 1000
    assert validate.whole_number(4.0, "n", 0, 10) == 4
    assert issubclass(InputError, ConfigError)  # every caller that catches ConfigError still catches it


@given(
    st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=False),
    st.floats(-10, 10, allow_subnormal=False),
    st.floats(0, 10, allow_subnormal=False),
    st.booleans(),
    st.booleans(),
)
def test_real_number_interval_ends(value, low, span, low_open, high_open):
    high = low + span
    inside = (
        math.isfinite(value)
        and (value > low if low_open else value >= low)
        and (value < high if high_open else value <= high)
    )
    if inside:
        assert validate.real_number(value, "x", low, high, low_open=low_open, high_open=high_open) == value
    else:
        with pytest.raises(InputError):
            validate.real_number(value, "x", low, high, low_open=low_open, high_open=high_open)


def test_real_number_of_a_huge_integer_is_refused_not_an_overflow():
    with pytest.raises(InputError):
        validate.real_number(10**400, "x", 0, None)


def test_shown_is_short_for_any_value():
    assert len(validate.shown("x" * 10_000)) <= validate.SHOWN_CHARS
    assert "digits" in validate.shown(10**5000)
    assert validate.shown("abc") == "'abc'"


@given(st.text(max_size=100))
def test_plain_escapes_every_markdown_control_character(text):
    escaped = validate.plain(text)
    # Removing the escapes gives the text back (newlines flattened): nothing is lost or added.
    unescaped = __import__("re").sub(r"\\(.)", r"\1", escaped).replace(validate.ZERO_WIDTH_SPACE, "")
    assert unescaped == text.replace("\n", " ").replace(validate.ZERO_WIDTH_SPACE, "")
    for control in "[]()!<>`*_":
        assert all(escaped[i - 1] == "\\" for i, ch in enumerate(escaped) if ch == control)


def test_plain_keeps_links_and_images_literal():
    zws = validate.ZERO_WIDTH_SPACE
    assert validate.plain("![x](http://a)") == "\\!\\[x\\]\\(http\\:" + zws + "//a\\)"
    # bare addresses, which Markdown would make clickable however escaped, are broken by a zero-width space
    assert validate.plain("see http://evil.example or www.evil.example, mail me@evil.example") == (
        f"see http\\:{zws}//evil\\.example or www{zws}\\.evil\\.example, mail me{zws}@evil\\.example"
    )


def test_one_of_and_text_of():
    assert validate.one_of(" bma ", "mode", ["bma", "mean"]) == "bma"
    with pytest.raises(InputError, match="mode: 'bogus' is not one of bma, mean"):
        validate.one_of("bogus", "mode", ["bma", "mean"])
    with pytest.raises(InputError, match="longer than 5"):
        validate.text_of("abcdefgh", "run", 5)
    with pytest.raises(InputError, match="not a run id"):
        validate.text_of("../etc", "run", 64, r"[0-9a-f]+", "a run id")


def test_a_setting_reads_its_variable_by_its_rule_and_never_replaces_a_bad_value():
    setting = Setting("BNN_TEST_LIMIT", "whole", 7, "a test limit", low=1, high=100, secret_key="test_limit")
    assert setting.read({}) == 7
    assert setting.read({"BNN_TEST_LIMIT": " 12 "}) == 12
    assert setting.read({}, fallback=lambda key: 30 if key == "test_limit" else None) == 30
    for bad in ("0", "abc", "1e9", "2.5"):
        with pytest.raises(InputError, match="BNN_TEST_LIMIT"):
            setting.read({"BNN_TEST_LIMIT": bad})
    flag = Setting("BNN_TEST_FLAG", "flag", False, "a flag")
    assert flag.read({"BNN_TEST_FLAG": "Yes"}) is True and flag.read({"BNN_TEST_FLAG": "off"}) is False
    with pytest.raises(InputError):
        flag.read({"BNN_TEST_FLAG": "maybe"})


def test_whole_bounds_are_written_in_full():
    with pytest.raises(InputError, match=r"from 1 to 1000000$"):
        validate.whole_number("1e20", "Batch size", 1, 1_000_000)
    with pytest.raises(InputError, match=r"from 0 to 4294967295$"):
        validate.whole_number("-1", "Seed", 0, 2**32 - 1)


def test_nested_within_counts_levels_without_recursing():
    assert validate.nested_within({"a": [1, {"b": 2}]}, "v", 3) == {"a": [1, {"b": 2}]}
    assert validate.nested_within(5, "v", 1) == 5
    with pytest.raises(InputError, match="v: lists and tables nest deeper than 2 levels"):
        validate.nested_within({"a": [[1]]}, "v", 2)
    deep: list = []
    for _ in range(100_000):  # far past the interpreter's recursion limit
        deep = [deep]
    with pytest.raises(InputError, match="deeper than 32"):
        validate.nested_within(deep, "v", 32)


def test_folder_refuses_each_unusable_path_with_one_line(tmp_path, monkeypatch):
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    assert validate.folder(tmp_path, "out") == tmp_path
    assert validate.folder(str(tmp_path / "new"), "out") == tmp_path / "new"
    assert validate.folder(str(tmp_path / "a" / "b"), "out", create_parents=True) == tmp_path / "a" / "b"
    cases = {
        "": "give a folder",
        "  ": "give a folder",
        "/proc/1": "under /proc",
        "/sys/x": "under /sys",
        str(a_file): "is a file, not a folder",
        str(a_file / "x"): "is a file, so",
        str(tmp_path / "missing" / "out"): "does not exist; create it first",
    }
    for value, message in cases.items():
        with pytest.raises(InputError, match=message) as info:
            validate.folder(value, "out")
        assert "\n" not in str(info.value) and str(info.value).startswith("out: ")
    with pytest.raises(InputError, match="does not exist"):
        validate.folder(str(tmp_path / "missing"), "data", writable=False, must_exist=True)
    # Read-only: root may write anywhere, so the permission answer is what is simulated here.
    monkeypatch.setattr(validate.os, "access", lambda path, mode: False)
    with pytest.raises(InputError, match="is not writable"):
        validate.folder(tmp_path, "out")
    with pytest.raises(InputError, match="is not writable"):
        validate.folder(str(tmp_path / "new"), "out")
    assert validate.folder(tmp_path, "out", writable=False) == tmp_path

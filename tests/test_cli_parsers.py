"""The command line's text parsers under random input: a value within the limits, or InputError /
ConfigError; never another exception, never slow.

Text is drawn both from all of Unicode and from the characters the grammars use (digits, signs,
exponents, ':', ',', '=', brackets, inf, nan), which reaches the edges (huge counts, 5000-digit
numbers, deep brackets) far more often than arbitrary text does.
"""

from __future__ import annotations

import time

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core import limits
from core.errors import ConfigError
from core.predict.sweep import parse_threshold_grid
from core.runs.parsing import VALUE_CHARS, parse_hidden, parse_pair_list, parse_pairs, parse_value

# A parse is a few string operations (microseconds); 2 s of this thread's CPU time still catches
# anything that builds from the text (a billion thresholds took 14 s to fill 5 GB). CPU time, not wall
# time: a wall-clock bound of 0.5 s failed once in CI on a 242-deep list that parses in 0.1 ms, when
# the loaded machine paused the test, and did not fail again on the same input.
SECONDS = 2.0
NUMBER = st.one_of(
    st.integers(-(10**30), 10**30).map(str),
    st.sampled_from(
        [
            "0",
            "1",
            "-1",
            "1e-9",
            "1e9",
            "1e20",
            "1e400",
            "1e-320",
            "inf",
            "-inf",
            "nan",
            "2.5",
            "0.02",
            "9" * 5000,
            "",
            " ",
            "x",
        ]
    ),
)
GRAMMAR = st.text(alphabet='0123456789.:,-+eE infa[]{}="x', max_size=80)
ANY_TEXT = st.text(max_size=200)


def _range_spec(parts):
    return ":".join(parts)


THRESHOLD_SPECS = st.one_of(
    ANY_TEXT,
    GRAMMAR,
    st.lists(NUMBER, min_size=3, max_size=3).map(_range_spec),
    st.lists(NUMBER, min_size=1, max_size=6).map(",".join),
    st.integers(1, 30_000).map(lambda n: "1," * n),
)
HIDDEN_SPECS = st.one_of(ANY_TEXT, GRAMMAR, st.lists(NUMBER, min_size=0, max_size=20).map(",".join))
PAIR_TEXT = st.one_of(
    ANY_TEXT,
    GRAMMAR,
    st.tuples(st.sampled_from(["weights", "", " x ", "="]), NUMBER).map("=".join),
    st.integers(0, 2000).map(lambda n: "a=" + "[" * n + "]" * n),
)


def _timed(parse, text):
    started = time.thread_time()
    try:
        return parse(text), None
    except ConfigError as exc:  # InputError is a ConfigError
        assert "\n" not in str(exc) and len(str(exc)) < 600, str(exc)
        return None, exc
    finally:
        assert time.thread_time() - started < SECONDS, f"{parse.__name__} took too long on {text[:40]!r}"


@given(THRESHOLD_SPECS)
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_threshold_specs_give_a_bounded_finite_grid_or_a_config_error(text):
    grid, error = _timed(parse_threshold_grid, text)
    if error is None:
        assert isinstance(grid, np.ndarray) and grid.ndim == 1
        assert 1 <= len(grid) <= limits.limit(limits.MAX_THRESHOLDS)
        assert np.isfinite(grid).all()


@given(HIDDEN_SPECS)
@settings(max_examples=400, deadline=None)
def test_hidden_widths_are_within_the_limits_or_a_config_error(text):
    widths, error = _timed(parse_hidden, text)
    if error is None:
        assert 1 <= len(widths) <= limits.limit(limits.MAX_HIDDEN_LAYERS)
        assert all(isinstance(w, int) and 1 <= w <= limits.limit(limits.MAX_HIDDEN_WIDTH) for w in widths)


def _depth(value) -> int:
    if isinstance(value, (list, dict)):
        children = value.values() if isinstance(value, dict) else value
        return 1 + max((_depth(child) for child in children), default=0)
    return 0


@given(st.lists(PAIR_TEXT, max_size=4))
@settings(max_examples=400, deadline=None)
def test_option_pairs_parse_to_plain_values_or_a_config_error(items):
    values, error = _timed(lambda given: parse_pairs(given, "--option"), items)
    if error is None:
        assert len(values) <= len(items)
        for key, value in values.items():
            assert key == key.strip() and key
            assert _depth(value) <= limits.limit(limits.MAX_CONFIG_DEPTH)
            if isinstance(value, str):
                assert len(value) <= VALUE_CHARS
    joined, error = _timed(lambda given: parse_pair_list(given, "--lr"), ",".join(items))
    assert error is not None or isinstance(joined, dict)


@given(st.one_of(ANY_TEXT, GRAMMAR, NUMBER))
@settings(max_examples=300, deadline=None)
def test_a_single_value_is_plain_data_or_a_config_error(text):
    value, error = _timed(parse_value, text)
    if error is None:
        assert value is None or isinstance(value, (bool, int, float, str, list, dict))
        assert _depth(value) <= limits.limit(limits.MAX_CONFIG_DEPTH)


def test_property_tests_have_no_wall_clock_deadline():
    from hypothesis import settings as current

    # tests/conftest.py's profile: a pause of the loaded CI machine must not fail an example
    assert current.default.deadline is None

"""Links that cannot break or abuse a session: every query parameter is taken exactly or refused with
one plain-text warning naming it, and the session stays healthy (AppTest corpus and property tests)."""

from __future__ import annotations

import math
import re
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as strategies
from streamlit.testing.v1 import AppTest

from core.errors import InputError
from dashboard import links
from tests.support import clear_dashboard_caches
from tests.test_dashboard_app import APP, TIMEOUT

PARAMS = ("run", "page", "threshold", "mode", "R", "weights", "ood", "epoch", "train")
EVIL_LINK = "[Teacher says: log in again](http://evil)"
EVIL_IMAGE = "![x](http://evil/t.png)"
PAYLOADS = {
    "negative": "-5",
    "huge": "100000",
    "text": "abc",
    "link": EVIL_LINK,
    "image": EVIL_IMAGE,
    "html": "<img src=http://evil/t.png>",
    "empty": "",
    "long": "9" * 10_000,
}
# Well-formed tokens that name no training: the training queue's ownership rule drops them (not this check).
NO_TRAIN_FORMAT_ERROR = {"negative", "huge", "text"}
# The values that broke a session before (Streamlit's slider errors, then NameErrors): these follow the
# session onto every page that uses them; the rest onto the Inclusion page (the quickest with every value).
SESSION_BREAKERS = {"negative", "link"}
ACCEPTED = {("ood", "empty")}  # ?ood= is what the page writes when no OOD set is chosen


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """One tiny two-moons run (2 recorded epochs). The dashboard's caches are emptied before and
    after this module only: its tests share the one store, and reuse each other's entries."""
    from core.runs import RunConfig, train_run

    clear_dashboard_caches()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("BNN_CACHE_DIR", str(tmp_path_factory.mktemp("bnn-cache")))
        yield train_run(RunConfig(dataset="two-moons", hidden=(8,), train={"epochs": 2})).run_id
    clear_dashboard_caches()


def open_link(params: dict[str, str], run_id: str | None = None) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    if run_id is not None:
        at.session_state["selected_run_id"] = run_id
    for key, value in params.items():
        at.query_params[key] = value
    return at.run()


def unescaped(text: str) -> str:
    """Markdown's backslash escapes removed: the text a reader sees."""
    return re.sub(r"\\(.)", r"\1", text).replace("\u200b", "")  # and the zero-width spaces that break autolinks


def bodies(at: AppTest) -> list[str]:
    """The Markdown source of every element that renders Markdown."""
    kinds = ("markdown", "caption", "warning", "error", "info", "success", "toast")
    return [e.value for kind in kinds for e in at.get(kind)]


def assert_no_markup_from_outside(at: AppTest) -> None:
    """No payload became a link, an image, an autolink or HTML: in every body that quotes it, each of
    its control characters is escaped."""
    for body in bodies(at):
        if "evil" not in body:
            continue
        assert not re.search(r"(?<!\\)\]\(", body), body  # [text](url) or ![alt](url)
        assert not re.search(r"(?<!\\)<", body), body  # <img ...>, <http://...>
        assert "http://evil" not in body, body  # a bare url is autolinked


def link_warnings(at: AppTest, param: str) -> list[str]:
    return [unescaped(w.value) for w in at.warning if unescaped(w.value).startswith(f"The link's {param} ")]


def assert_healthy(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


# --- the parsers: text in, an accepted value or InputError out ------------------------------------------------

SPEC = SimpleNamespace(low=0.0, high=1.0)


@pytest.mark.parametrize("text, expected", [("0.25", 0.25), ("1", 1.0), ("0", 0.0), (" 0.5 ", 0.5)])
def test_a_threshold_within_the_range_is_taken_exactly(text, expected):
    assert links.parse_threshold(text, SPEC) == expected


@pytest.mark.parametrize("text", ["5", "-0.1", "abc", "nan", "inf", "1e400", "", EVIL_LINK, "9" * 10_000])
def test_a_threshold_outside_the_range_or_not_a_number_is_refused(text):
    with pytest.raises(InputError, match=r"^threshold: ") as caught:
        links.parse_threshold(text, SPEC)
    assert len(str(caught.value)) < 200 and "\n" not in str(caught.value)


def test_each_parser_names_its_parameter_the_value_and_the_range():
    cases = [
        (lambda: links.parse_samples("-5"), "R: '-5' is out of range; give a whole number from 1 to 100"),
        (lambda: links.parse_samples("100000"), "R: '100000' is out of range"),
        (lambda: links.parse_epoch("9", 4), "epoch: '9' is out of range; give a whole number from 1 to 4"),
        (lambda: links.parse_epoch("1", 0), "this run recorded no epochs"),
        (lambda: links.parse_mode("bogus", ("bma", "prune")), "mode: 'bogus' is not one of bma, prune"),
        (lambda: links.parse_page("nonsense", ("train", "pruning")), "page: 'nonsense' is not one of train"),
        (lambda: links.parse_ood("x", ("uniform-noise",)), "ood: 'x' is not one of uniform-noise"),
        (lambda: links.parse_ood("x", ()), "this run has no OOD sets"),
        (lambda: links.parse_run("abc", ("0123", "0456")), "run: 'abc' is not a cached run"),
        (lambda: links.parse_run("0", ("0123", "0456")), "run: '0' names several cached runs"),
        (lambda: links.parse_run(EVIL_IMAGE, ("0123",)), "run: '![x](http://evil/t.png)' is not a run id"),
        (lambda: links.parse_weights("median", ("mean", "sample")), "weights: 'median' is not one of mean, sample"),
        (lambda: links.parse_train_token("a b"), "train: 'a b' is not a training token"),
    ]
    for call, message in cases:
        with pytest.raises(InputError) as caught:
            call()
        assert message in str(caught.value)


def test_good_values_are_taken():
    assert links.parse_run("01", ("0123", "0456")) == "0123"
    assert links.parse_samples("7") == 7 and links.parse_samples("1e2") == 100
    assert links.parse_epoch("4", 4) == 4
    assert links.parse_ood("b, a,b", ("a", "b")) == ["b", "a"]
    assert links.parse_ood("", ("a",)) == []
    assert links.parse_mode("prune", ("bma", "prune")) == "prune"
    assert links.parse_train_token("Ab-_9") == "Ab-_9"
    assert links.parse_weights("sample", ("mean", "sample")) == "sample"


def test_a_pruning_link_carries_the_weights_choice(store):
    """The mean / sample weights change the page's numbers (0.9380 against 0.9405): the link names them."""
    at = open_link({"page": "pruning"}, store)
    assert_healthy(at)
    radio = at.radio(key=f"widget:weights:{store}")
    assert radio.value == "mean" and at.query_params["weights"] in ("mean", ["mean"])
    radio.set_value("sample").run()
    assert at.query_params["weights"] in ("sample", ["sample"])  # what a copied link now holds
    received = open_link({"page": "pruning", "weights": "sample"}, store)
    assert_healthy(received)
    assert not received.warning
    assert received.radio(key=f"widget:weights:{store}").value == "sample"


TEXT = strategies.one_of(
    strategies.text(max_size=60),
    strategies.from_regex(r"-?[0-9]{0,6}(\.[0-9]{0,4})?(e-?[0-9]{1,3})?"),
    strategies.sampled_from(list(PAYLOADS.values())),
)


@settings(max_examples=200, deadline=None)
@given(
    text=TEXT,
    low=strategies.floats(-10, 10, allow_subnormal=False),
    width=strategies.floats(0, 10, allow_subnormal=False),
    n_epochs=strategies.integers(0, 50),
)
@pytest.mark.slow  # many app runs: 3 s CPU
def test_any_text_is_accepted_within_range_or_refused_with_an_input_error(text, low, width, n_epochs):
    spec = SimpleNamespace(low=low, high=low + width)
    checks = [
        (lambda: links.parse_threshold(text, spec), lambda v: spec.low <= v <= spec.high and math.isfinite(v)),
        (lambda: links.parse_samples(text), lambda v: 1 <= v <= links.MAX_SAMPLES and isinstance(v, int)),
        (lambda: links.parse_epoch(text, n_epochs), lambda v: 1 <= v <= n_epochs),
        (lambda: links.parse_mode(text, ("bma", "prune")), lambda v: v in ("bma", "prune")),
        (lambda: links.parse_page(text, ("train", "pruning")), lambda v: v in ("train", "pruning")),
        (lambda: links.parse_ood(text, ("a", "uniform-noise")), lambda v: set(v) <= {"a", "uniform-noise"}),
        (lambda: links.parse_run(text, ("0123abcd", "0456")), lambda v: v in ("0123abcd", "0456")),
        (lambda: links.parse_train_token(text), lambda v: re.fullmatch(links.ID_PATTERN, v) is not None),
    ]
    for parse, valid in checks:
        try:
            value = parse()
        except InputError as exc:
            assert "\n" not in str(exc) and len(str(exc)) < 400
        else:
            assert valid(value), value


@settings(max_examples=300, deadline=None)
@given(
    low=strategies.floats(-1e3, 1e3, allow_subnormal=False),
    width=strategies.floats(0, 1e3, allow_subnormal=False),
    fraction=strategies.floats(0, 1, allow_subnormal=False),
)
def test_a_threshold_the_page_writes_into_the_address_is_taken_back(low, width, fraction):
    high = low + width
    value = min(high, low + fraction * width)
    text = links.link_number(value, low, high)
    assert links.parse_threshold(text, SimpleNamespace(low=low, high=high)) == pytest.approx(value, rel=1e-5, abs=1e-9)


# --- the app: a corpus of links ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "payload",
    [
        payload if payload in SESSION_BREAKERS | {"image", "long"} else pytest.param(payload, marks=pytest.mark.slow)
        for payload in PAYLOADS
    ],
)
def test_every_parameter_with_a_bad_value_is_refused_once_and_the_session_stays_healthy(store, payload):
    value = PAYLOADS[payload]
    at = open_link({param: value for param in PARAMS})
    assert_healthy(at)
    assert_no_markup_from_outside(at)
    for param in PARAMS:
        expected = 0 if (param, payload) in ACCEPTED or (param == "train" and payload in NO_TRAIN_FORMAT_ERROR) else 1
        found = link_warnings(at, param)
        assert len(found) == expected, (param, [unescaped(w.value) for w in at.warning])
        if expected:
            assert param in found[0] and (value[:20] in found[0] or payload == "empty")
            # gone from the address, or replaced by the page's own setting (the run shown, its threshold)
            assert at.query_params.get(param) != value
    assert at.session_state["selected_run_id"] == store
    assert at.query_params["run"] in (store, [store])
    # the same session on the pages that use the values: healthy, nothing refused again, valid widgets
    pages = (
        ("views/pruning.py", "views/uncertainty.py", "views/inclusion.py")
        if payload in SESSION_BREAKERS
        else ("views/inclusion.py",)
    )
    for page in pages:
        at.switch_page(page).run()
        assert_healthy(at)
        assert not at.warning or not any(unescaped(w.value).startswith("The link's") for w in at.warning)
    epoch = at.slider(key=f"playback_epoch:{store}")
    assert epoch.value == epoch.max  # the last recorded epoch: the link's bad epoch was not applied


@pytest.mark.parametrize(
    "page",
    [pytest.param(page, marks=pytest.mark.slow) for page in ("train", "inclusion", "compare", "glossary")]
    + ["pruning", "uncertainty"],
)
def test_each_page_refuses_bad_view_values_and_shows_valid_settings(store, page):
    params = {"page": page, "threshold": "5", "R": "-5", "mode": EVIL_LINK, "ood": EVIL_IMAGE, "epoch": "100000"}
    at = open_link(params)
    assert_healthy(at)
    assert_no_markup_from_outside(at)
    for param in ("threshold", "R", "mode", "ood", "epoch"):
        assert len(link_warnings(at, param)) == 1, (param, [w.value for w in at.warning])
        assert at.query_params.get(param) != params[param]
    assert not link_warnings(at, "page")
    if page in ("pruning", "uncertainty"):
        assert at.slider(key=f"widget:samples:{store}").value == 10
        assert 0 <= at.slider(key=f"widget:threshold:{store}").value <= 1
        assert at.selectbox(key=f"widget:mode:{store}").value in ("prune", "bma")
    # a second run, another page and another mode: healthy, and nothing of the bad link comes back
    at.switch_page("views/pruning.py").run()
    at.selectbox(key=f"widget:mode:{store}").set_value("bma").run()
    assert_healthy(at)
    assert at.slider(key=f"widget:samples:{store}").value == 10
    assert not any(unescaped(w.value).startswith("The link's") for w in at.warning)


@pytest.mark.slow  # many app runs: 3 s CPU
def test_good_values_open_the_view_they_name(store):
    params = {
        "run": store[:6],
        "page": "uncertainty",
        "threshold": "0.3",
        "R": "7",
        "mode": "prune",
        "ood": "uniform-noise",
    }
    at = open_link(params)
    assert_healthy(at)
    assert not at.warning
    assert at.slider(key=f"widget:samples:{store}").value == 7
    assert at.slider(key=f"widget:threshold:{store}").value == pytest.approx(0.3)
    assert at.selectbox(key=f"widget:mode:{store}").value == "prune"
    assert at.multiselect(key="ood_sets").value == ["uniform-noise"]
    inclusion = open_link({"page": "inclusion", "epoch": "1"}, store)
    assert_healthy(inclusion)
    assert inclusion.slider(key=f"playback_epoch:{store}").value == 1


def test_a_bad_r_does_not_stick_to_the_session(store):
    """`?R=-5` once raised Streamlit's slider error, then a NameError on every page and mode until a new tab."""
    at = open_link({"page": "pruning", "R": "-5"})
    assert_healthy(at)
    assert len(link_warnings(at, "R")) == 1
    for mode in ("bma", "prune", "mean"):
        at.selectbox(key=f"widget:mode:{store}").set_value(mode).run()
        assert_healthy(at)
    at.switch_page("views/uncertainty.py").run()
    assert_healthy(at)
    assert at.slider(key=f"widget:samples:{store}").value == 10
    assert at.query_params["R"] in ("10", ["10"])


def test_view_values_without_any_cached_run_are_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("BNN_CACHE_DIR", str(tmp_path))
    clear_dashboard_caches()
    at = open_link({"threshold": "0.5", "run": EVIL_LINK})
    assert_healthy(at)
    assert_no_markup_from_outside(at)
    assert len(link_warnings(at, "threshold")) == 1 and len(link_warnings(at, "run")) == 1

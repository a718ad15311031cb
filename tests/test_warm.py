"""dashboard.serve's warm-up page: only its secret in ?warm= starts the draw processes and waits for them;
any other value changes nothing, and the parameter never stays in the address."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dashboard import cache, warm

TOKEN = "s3cret-token_of-dashboard-serve"


@pytest.fixture
def warmed(monkeypatch):
    calls: list[int] = []
    monkeypatch.setattr(cache, "warm_draw_processes", lambda: calls.append(1) or 2)
    monkeypatch.setenv("BNN_SERVE_WARM_TOKEN", TOKEN)
    return calls


def visit(monkeypatch, params: dict) -> tuple[bool, dict]:
    monkeypatch.setattr(warm.st, "query_params", params)
    return warm.warm_up(), params


def test_the_serve_token_starts_the_draw_processes_once_per_page_and_leaves_the_address(monkeypatch, warmed):
    assert visit(monkeypatch, {"warm": TOKEN, "run": "abc"}) == (True, {"run": "abc"})
    assert warmed == [1]
    assert visit(monkeypatch, {"run": "abc"}) == (False, {"run": "abc"})  # no parameter: nothing
    assert warmed == [1]


def test_without_dashboard_serve_no_value_warms(monkeypatch, warmed):
    monkeypatch.delenv("BNN_SERVE_WARM_TOKEN")
    assert visit(monkeypatch, {"warm": TOKEN}) == (False, {})
    monkeypatch.setenv("BNN_SERVE_WARM_TOKEN", "")
    assert visit(monkeypatch, {"warm": ""}) == (False, {})  # an empty secret is no secret
    assert warmed == []


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])  # patched per example
@given(value=st.text(max_size=200) | st.just(TOKEN) | st.just(TOKEN + "x") | st.just(TOKEN[:-1]))
def test_any_other_value_is_ignored_and_removed(monkeypatch, value):
    calls: list[int] = []
    with monkeypatch.context() as patch:
        patch.setattr(cache, "warm_draw_processes", lambda: calls.append(1))
        patch.setenv("BNN_SERVE_WARM_TOKEN", TOKEN)
        params = {"warm": value}
        patch.setattr(warm.st, "query_params", params)
        assert warm.warm_up() is (value == TOKEN)
        assert params == {}
    assert calls == ([1] if value == TOKEN else [])

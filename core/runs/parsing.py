"""Text typed by a person, parsed one way for the command line and the dashboard alike:
option values (`--option k=v`, `--param`, `--lr`, the Train page's family options box) and
hidden widths (`--hidden 400,600`, the Train page, a config file's "400, 600")."""

from __future__ import annotations

import json
from typing import Any, Iterable

from core.errors import ConfigError


def parse_value(text: str) -> Any:
    """true/false (any case) as bools, then JSON (numbers, lists, null), then Python's int and float
    (inf, nan), else the text itself, stripped: 'student-t' stays a string."""
    raw = str(text).strip()
    if raw.lower() in ("true", "false"):
        return raw.lower() == "true"
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        pass
    for convert in (int, float):
        try:
            return convert(raw)
        except ValueError:
            continue
    return raw


def parse_pairs(items: Iterable[str], what: str) -> dict[str, Any]:
    """'name=value' items to a dict of parsed values; ConfigError naming `what` otherwise."""
    values: dict[str, Any] = {}
    for item in items:
        key, sep, raw = str(item).partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{what}: write name=value (KEY=VALUE), got {item!r}")
        values[key.strip()] = parse_value(raw)
    return values


def parse_pair_list(text: str, what: str) -> dict[str, Any]:
    """'a=1, b=x' (pairs separated by commas; empty parts ignored) to a dict of parsed values."""
    return parse_pairs([part for part in str(text).split(",") if part.strip()], what)


def parse_hidden(text: str) -> tuple[int, ...]:
    """'400, 600' -> (400, 600): at least one positive integer width; ConfigError naming hidden otherwise."""
    parts = [part for part in str(text).replace(" ", "").split(",") if part]
    try:
        widths = tuple(int(part) for part in parts)
    except ValueError:
        raise ConfigError(f"hidden: give comma-separated positive integers such as '400, 600', got {text!r}") from None
    if not widths or any(width < 1 for width in widths):
        raise ConfigError(f"hidden: give at least one positive width such as '400, 600', got {text!r}")
    return widths

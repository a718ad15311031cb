"""Text typed by a person, parsed one way for the command line and the dashboard alike:
option values (`--option k=v`, `--param`, `--lr`, the Train page's family options box) and
hidden widths (`--hidden 400,600`, the Train page, a config file's "400, 600").

Every value goes through core.validate's rules and core.limits' limits before anything is built
from it; a bad one raises InputError (a ConfigError) naming it."""

from __future__ import annotations

import json
from typing import Any, Iterable, Sequence

from core import limits, validate
from core.errors import ConfigError, InputError

# Longest typed option value: the longest real one is a list of a few numbers; json.loads of a
# 100 kB bracket string overflows the stack and int() of 5000 digits is refused by Python itself.
VALUE_CHARS = 1000


def parse_value(text: str) -> Any:
    """true/false (any case) as bools, then JSON (numbers, lists, null), then Python's int and float
    (inf, nan), else the text itself, stripped: 'student-t' stays a string."""
    raw = str(text).strip()
    if len(raw) > VALUE_CHARS:
        raise InputError(f"value: {validate.shown(raw)} is longer than {VALUE_CHARS} characters")
    if raw.lower() in ("true", "false"):
        return raw.lower() == "true"
    depth = limits.limit(limits.MAX_CONFIG_DEPTH)
    try:
        value = json.loads(raw)
    except RecursionError:
        raise InputError(f"value {validate.shown(raw)}: lists and tables nest deeper than {depth} levels") from None
    except ValueError:  # not JSON (JSONDecodeError), or an integer of more digits than Python converts
        pass
    else:
        return validate.nested_within(value, f"value {validate.shown(raw)}", depth)
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
            raise ConfigError(f"{what}: write name=value (KEY=VALUE), got {validate.shown(item)}")
        try:
            values[key.strip()] = parse_value(raw)
        except InputError as exc:
            raise InputError(f"{what} {key.strip()[:40]}: {str(exc).partition(': ')[2]}") from None
    return values


def parse_pair_list(text: str, what: str) -> dict[str, Any]:
    """'a=1, b=x' (pairs separated by commas; empty parts ignored) to a dict of parsed values."""
    return parse_pairs([part for part in str(text).split(",") if part.strip()], what)


def check_hidden(widths: Sequence[Any], given: Any = None) -> tuple[int, ...]:
    """Layer widths (ints or their text) as a tuple: 1 to $BNN_MAX_HIDDEN_LAYERS layers, each a whole
    number from 1 to $BNN_MAX_HIDDEN_WIDTH; InputError naming hidden otherwise."""
    given = widths if given is None else given
    layers = limits.limit(limits.MAX_HIDDEN_LAYERS)
    if not widths:
        raise InputError(f"hidden: give at least one positive width such as '400, 600', got {validate.shown(given)}")
    if len(widths) > layers:
        raise InputError(
            f"hidden: {len(widths)} layers are more than the limit {layers} (${limits.MAX_HIDDEN_LAYERS.variable})"
        )
    widest = limits.limit(limits.MAX_HIDDEN_WIDTH)
    checked = []
    for width in widths:
        if isinstance(width, bool) or not isinstance(width, (int, float, str)):
            raise InputError(f"hidden: give positive layer widths such as '400, 600', got {validate.shown(given)}")
        number = validate.whole_number(width, "hidden", 1, None)
        if number > widest:
            raise InputError(
                f"hidden: width {validate.shown(width)} is above the limit {widest} "
                f"(${limits.MAX_HIDDEN_WIDTH.variable})"
            )
        checked.append(number)
    return tuple(checked)


def parse_hidden(text: str) -> tuple[int, ...]:
    """'400, 600' -> (400, 600): at least one positive integer width, within the limits; InputError
    (a ConfigError) naming hidden otherwise."""
    parts = [part for part in str(text).replace(" ", "").split(",") if part]
    try:
        return check_hidden(parts, text)
    except InputError as exc:
        if "limit" in str(exc):
            raise
        raise InputError(
            f"hidden: give comma-separated positive integers such as '400, 600', got {validate.shown(text)}"
        ) from None

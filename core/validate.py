"""One rule for every value that comes from outside: a command-line argument, a config file, a
link's query parameter, a form field, an uploaded file's header.

Each function parses, range-checks, and either returns the value or raises `InputError` whose
message is one line of plain text: the value's name, what was given (shortened, quoted) and what
is allowed. Nothing is silently replaced or clamped: a value out of range is refused, so what a
user typed is never swapped for something else behind their back. The checks run before anything
is allocated from the value (a width, a count, a number of draws).

`shown(value)` is how a given value appears in any message: `repr`, cut to `SHOWN_CHARS`, so a
10 MB string or a 5000-digit number never floods a page or a terminal. `plain(text)` makes
outside text safe to put into a Markdown-rendering widget (the dashboard's warnings): every
Markdown and HTML control character is escaped, so `[a](url)` or `![x](url)` stays literal text.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Any, Iterable, Sequence

from core.errors import InputError

SHOWN_CHARS = 60
# Longest text accepted as a number: int() of a 5000-digit string costs time and Python >= 3.11
# refuses beyond 4300 digits; no setting of this tool needs more than 30 characters.
NUMBER_CHARS = 40


def shown(value: Any) -> str:
    """`repr(value)` cut to SHOWN_CHARS characters (with an ellipsis): how messages quote input."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10 ** (SHOWN_CHARS - 5):
        # str() of an int over 4300 digits raises in Python >= 3.11: count digits from its bits.
        text = f"<a number of about {int(value.bit_length() * math.log10(2)) + 1} digits>"
    else:
        text = repr(value)
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 3] + "..."


_MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~$:&])")


# GitHub-flavoured Markdown (Streamlit's) turns bare addresses into links even when their characters
# are escaped: Chromium showed 'http\://evil.example' from a link's value as a clickable link. A
# zero-width space inside each pattern that starts one (scheme, www., e-mail) keeps it text.
_AUTOLINK_STARTS = re.compile(r"(?i)(?<=:)(?=//)|(?<=www)(?=\.)|(?=@)")
ZERO_WIDTH_SPACE = "\u200b"


def plain(text: Any) -> str:
    """Outside text escaped for Markdown (and HTML) so that it renders as the literal characters:
    no link, image, emphasis or tag, and no bare address made clickable."""
    broken = _AUTOLINK_STARTS.sub(ZERO_WIDTH_SPACE, str(text))
    return _MARKDOWN_SPECIAL.sub(r"\\\1", broken).replace("\n", " ")


def _number_text(value: float) -> str:
    """A bound as messages write it: whole bounds in full (1000000, not 1e+06), others short."""
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else f"{value:g}"


def _range_text(low: float | None, high: float | None) -> str:
    if low is not None and high is not None:
        return f"from {_number_text(low)} to {_number_text(high)}"
    if low is not None:
        return f"at least {_number_text(low)}"
    if high is not None:
        return f"at most {_number_text(high)}"
    return "any"


def _as_number(value: Any, name: str, what: str) -> float | int:
    if isinstance(value, bool):
        raise InputError(f"{name}: give {what}, got {shown(value)}")
    if isinstance(value, (int, float)):
        return value
    text = str(value).strip() if isinstance(value, str) else None
    if not text or len(text) > NUMBER_CHARS:
        raise InputError(f"{name}: give {what}, got {shown(value)}")
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        raise InputError(f"{name}: give {what}, got {shown(value)}") from None


def whole_number(value: Any, name: str, low: int | None = None, high: int | None = None) -> int:
    """An integer in [low, high]. Accepts ints and their text ('12', '1e3' when it is whole);
    refuses fractions, booleans, non-finite values and anything out of range."""
    allowed = f"a whole number {_range_text(low, high)}"
    number = _as_number(value, name, allowed)
    if isinstance(number, float):
        if not math.isfinite(number) or number != int(number):
            raise InputError(f"{name}: give {allowed}, got {shown(value)}")
        number = int(number)
    if (low is not None and number < low) or (high is not None and number > high):
        raise InputError(f"{name}: {shown(value)} is out of range; give {allowed}")
    return int(number)


def real_number(
    value: Any,
    name: str,
    low: float | None = None,
    high: float | None = None,
    *,
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    """A finite float in the interval (open or closed at each end as asked)."""
    left = "above" if low_open else "at least"
    right = "below" if high_open else "at most"
    parts = ([f"{left} {low:g}"] if low is not None else []) + ([f"{right} {high:g}"] if high is not None else [])
    allowed = "a finite number" + (" " + " and ".join(parts) if parts else "")
    number = _as_number(value, name, allowed)
    number = float(number) if not isinstance(number, int) or abs(number) < 2**1023 else math.inf
    if not math.isfinite(number):
        raise InputError(f"{name}: give {allowed}, got {shown(value)}")
    too_low = low is not None and (number <= low if low_open else number < low)
    too_high = high is not None and (number >= high if high_open else number > high)
    if too_low or too_high:
        raise InputError(f"{name}: {shown(value)} is out of range; give {allowed}")
    return number


# The largest learning rate (Adam's step size) any group may take. Adam moves every parameter by about its
# rate each step, whatever the gradient's scale: a rate of 1 already swings an inclusion logit across
# the sigmoid's working range in a few steps, and 1e9 gave NaNs after an epoch of compute. The presets
# and stored runs use at most 0.03 (the UCI presets' inclusion rate), so the bound refuses only typos.
MAX_LEARNING_RATE = 1.0


def learning_rate(value: Any, name: str) -> float:
    """The one rule for every learning rate (train.learning_rates.*, pretrain_learning_rates.*,
    warm_start_learning_rate; CLI, config files and the Train form alike): a finite number above 0
    and at most MAX_LEARNING_RATE."""
    return real_number(value, name, 0.0, MAX_LEARNING_RATE, low_open=True)


def one_of(value: Any, name: str, choices: Iterable[str]) -> str:
    """One of `choices` (exact text after stripping spaces)."""
    options: Sequence[str] = list(choices)
    text = value.strip() if isinstance(value, str) else value
    if isinstance(text, str) and text in options:
        return text
    listed = ", ".join(options[:20]) + (", ..." if len(options) > 20 else "")
    raise InputError(f"{name}: {shown(value)} is not one of {listed}")


def text_of(value: Any, name: str, max_chars: int, pattern: str | None = None, what: str = "text") -> str:
    """A string of at most `max_chars` characters, optionally matching `pattern` (fully)."""
    if not isinstance(value, str):
        raise InputError(f"{name}: give {what}, got {shown(value)}")
    text = value.strip()
    if len(text) > max_chars:
        raise InputError(f"{name}: {shown(value)} is longer than {max_chars} characters")
    if pattern is not None and re.fullmatch(pattern, text) is None:
        raise InputError(f"{name}: {shown(value)} is not {what}")
    return text


def nested_within(value: Any, name: str, max_depth: int) -> Any:
    """`value` itself when its lists and tables nest at most `max_depth` deep (a scalar is depth 0).

    Walks iteratively, so a structure nested thousands deep is refused rather than overflowing the
    stack of the code that reads it later."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (list, tuple, dict)):
            if depth + 1 > max_depth:
                raise InputError(f"{name}: lists and tables nest deeper than {max_depth} levels")
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return value


# Kernel pseudo-filesystems: files there are not storage (writes to /proc/1/... fail or change the
# system), so a folder under them is refused by name before anything is tried.
PSEUDO_FILESYSTEMS = ("/proc", "/sys", "/dev")


def _under_pseudo_filesystem(path: Path) -> str | None:
    text = str(path)
    return next((root for root in PSEUDO_FILESYSTEMS if text == root or text.startswith(root + "/")), None)


def folder(
    value: Any, name: str, *, writable: bool = True, create_parents: bool = False, must_exist: bool = False
) -> Path:
    """A folder named by outside text: non-empty, not under /proc, /sys or /dev, and, when it exists,
    a folder (writable if asked). A missing one must be creatable: its parent exists, is a folder and
    is writable (with `create_parents`, the nearest existing ancestor). Returns the path as given
    (user folder expanded); nothing is created here."""
    if not isinstance(value, (str, Path)) or not str(value).strip():
        raise InputError(f"{name}: give a folder, got {shown(value)}")
    path = Path(str(value)).expanduser()
    resolved = path.resolve()
    pseudo = _under_pseudo_filesystem(resolved)
    if pseudo is not None:
        raise InputError(f"{name}: {shown(str(value))} is under {pseudo}, which holds no files; give another folder")
    if resolved.exists():
        if not resolved.is_dir():
            raise InputError(f"{name}: {shown(str(value))} is a file, not a folder; give a folder")
        if writable and not os.access(resolved, os.W_OK | os.X_OK):
            raise InputError(f"{name}: folder {shown(str(value))} is not writable; give another folder")
        return path
    if must_exist:
        raise InputError(f"{name}: folder {shown(str(value))} does not exist")
    if not writable:
        return path
    ancestor = resolved.parent
    while create_parents and not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.exists():
        raise InputError(
            f"{name}: the folder {shown(str(ancestor))} that would hold {shown(str(value))} "
            f"does not exist; create it first"
        )
    if not ancestor.is_dir():
        raise InputError(f"{name}: {shown(str(ancestor))} is a file, so {shown(str(value))} cannot be created")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise InputError(f"{name}: cannot create {shown(str(value))}: folder {shown(str(ancestor))} is not writable")
    return path

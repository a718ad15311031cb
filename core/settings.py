"""Settings read from the environment, each declared once with its rule and its documented default.

A setting is a `Setting`: its environment variable, the rule its text must pass (core.validate),
its default and one line saying what it limits. `read()` returns the value, or raises InputError
naming the variable when the text breaks the rule (a bad setting is never silently replaced by
the default). The dashboard passes `.streamlit/secrets.toml` as the fallback source
(dashboard/settings.py); the command line reads the environment only.

`SETTINGS` is the registry: every module that declares a setting registers it here at import, and
`describe()` renders the table the docs show (docs/classroom.md), so the documentation cannot drift
from the code.

Every `BNN_*` variable is read through a `Setting`; the ones every layer needs before any other
module loads (where data and runs live, offline mode, the store's size cap) are declared here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from core import validate
from core.errors import InputError

PATH_MAX_CHARS = 4096  # PATH_MAX on Linux
TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")


@dataclass(frozen=True)
class Setting:
    """One environment variable: kind 'whole' / 'real' / 'flag' / 'text', bounds, default, meaning."""

    variable: str
    kind: str
    default: Any
    meaning: str
    low: float | None = None
    high: float | None = None
    secret_key: str | None = None  # the key in .streamlit/secrets.toml (dashboard settings only)
    shown_default: str | None = None  # the default as the docs say it, when it is not a constant

    def parse(self, text: Any) -> Any:
        """The value of `text` under this setting's rule (InputError naming the variable)."""
        name = self.variable
        if self.kind == "whole":
            return validate.whole_number(
                text, name, None if self.low is None else int(self.low), None if self.high is None else int(self.high)
            )
        if self.kind == "real":
            return validate.real_number(text, name, self.low, self.high)
        if self.kind == "flag":
            word = str(text).strip().lower()
            if word in TRUE_WORDS or word in FALSE_WORDS:
                return word in TRUE_WORDS
            raise InputError(f"{name}: give one of {', '.join(TRUE_WORDS + FALSE_WORDS)}, got {validate.shown(text)}")
        if self.kind == "path":  # a folder: its text as given (the caller expands ~ and checks it)
            return validate.text_of(text, name, PATH_MAX_CHARS)
        return validate.text_of(text, name, 1000)

    def is_set(self, environ: Mapping[str, str] | None = None) -> bool:
        """Whether $variable holds a value (blank counts as unset, as in `read`)."""
        text = (os.environ if environ is None else environ).get(self.variable, "")
        return isinstance(text, str) and bool(text.strip())

    def read(self, environ: Mapping[str, str] | None = None, fallback: Callable[[str], Any] | None = None) -> Any:
        """$variable, else `fallback(secret_key)` (when given), else the default."""
        environ = os.environ if environ is None else environ
        text = environ.get(self.variable, "")
        if isinstance(text, str) and text.strip():
            return self.parse(text)
        if fallback is not None and self.secret_key is not None:
            value = fallback(self.secret_key)
            if value is not None and str(value).strip():
                return self.parse(
                    value if isinstance(value, (int, float)) and not isinstance(value, bool) else str(value)
                )
        return self.default

    def allowed(self) -> str:
        if self.kind in ("whole", "real"):
            low = "" if self.low is None else f"{self.low:g}"
            high = "" if self.high is None else f"{self.high:g}"
            return f"{low}..{high}"
        return {"flag": "1/0, true/false, yes/no, on/off", "path": "a folder"}.get(self.kind, "text")


SETTINGS: dict[str, Setting] = {}


def register(setting: Setting) -> Setting:
    """Declare a setting once (the same declaration again is harmless; a different one is a bug)."""
    existing = SETTINGS.get(setting.variable)
    if existing is not None and existing != setting:
        raise ValueError(f"{setting.variable} is declared twice with different rules")
    SETTINGS[setting.variable] = setting
    return setting


def describe(settings: list[Setting] | None = None) -> str:
    """A Markdown table of the settings (variable, secrets key, default, allowed, meaning)."""
    rows = ["| variable | secrets.toml key | default | allowed | meaning |", "|---|---|---|---|---|"]
    for item in sorted(settings or SETTINGS.values(), key=lambda s: s.variable):
        default = (
            item.shown_default
            if item.shown_default is not None
            else "(none)"
            if item.default is None
            else f"`{item.default}`"
        )
        key = f"`{item.secret_key}`" if item.secret_key else ""
        rows.append(f"| `{item.variable}` | {key} | {default} | {item.allowed()} | {item.meaning} |")
    return "\n".join(rows)


# --- where things live (read by core.data.locations, core.runs.store and the command line) ------

DATA_DIR = register(
    Setting(
        "BNN_DATA_DIR", "path", None, "folder that holds the datasets (also --data-dir); unset: the download cache only"
    )
)
CACHE_DIR = register(
    Setting(
        "BNN_CACHE_DIR",
        "path",
        None,
        "folder of the run store (runs/) and the download cache (data/); also --cache-dir",
        shown_default="platformdirs' user cache folder for bnn-explorer",
    )
)
OFFLINE = register(
    Setting("BNN_OFFLINE", "flag", False, "no downloads: datasets come from the data folder or the cache only")
)
CACHE_MAX_MB = register(
    Setting(
        "BNN_CACHE_MAX_MB",
        "real",
        None,
        "size cap of the run store in MB (the least recently used runs are deleted beyond it; unset: no cap)",
        0,
        10**9,
    )
)

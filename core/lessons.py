"""Lessons as files: a teacher's sequence of app screens, each with what to read and what to hide.

A lesson is a small TOML file (schema in docs/lessons.md; the shipped ones are in assets/lessons/):

    title = "First steps: a sparse network on two moons"
    summary = "One paragraph shown above the first step."

    [[step]]
    page = "inclusion"                    # train, inclusion, pruning, uncertainty, compare, playground, glossary
    title = "Which weights the data need"
    text = "Markdown shown in the lesson panel."
    run = { dataset = "two-moons", method = "lbbnn", hidden = [16, 16] }   # a RunConfig, or
    # preset = "quick-mnist"              # a preset's name (one of run / preset, or neither)
    view = { threshold = 0.5, mode = "mpm-mean", R = 20, ood = ["uniform-noise"] }   # as a shared link
    hide = ["method", "prior"]            # controls the step hides (names in HIDEABLE_CONTROLS)

Every value is checked by one rule here before the app uses it: a file that does not parse, a key
that is not in the schema, a page or control that does not exist, a run that RunConfig refuses, a view
value out of range: each is refused with one message naming the file, the step and the key.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import tomllib

from core import validate
from core.data.locations import ASSETS_DIR
from core.errors import BNNError, InputError

LESSONS_DIR = ASSETS_DIR / "lessons"
PAGES = ("train", "inclusion", "pruning", "uncertainty", "compare", "playground", "glossary")
# What a step can hide, as TensorFlow Playground's per-control flags: each name is a control of the app.
HIDEABLE_CONTROLS = (
    "dataset",
    "method",
    "hidden",
    "prior",
    "epochs",
    "seed",
    "threshold",
    "mode",
    "samples",
    "ood",
    "weights",
    "download",
    "train_button",
    "sidebar_runs",
    "playback",
)
VIEW_KEYS = ("threshold", "mode", "R", "ood", "epoch")  # what a shared link sets (dashboard/links.py)
STEP_KEYS = ("page", "title", "text", "run", "preset", "view", "hide")
LESSON_KEYS = ("title", "summary", "step")
NAME_PATTERN = r"[a-z0-9][a-z0-9-]{0,47}"
MAX_LESSON_BYTES = 64 * 1024  # the shipped lessons are under 4 kB; a lesson is text, not data
MAX_STEPS = 30
MAX_TEXT_CHARS = 4000
VIEW_MAX_SAMPLES = 100  # the top of the app's R slider on every page


@dataclass(frozen=True)
class LessonStep:
    page: str
    title: str
    text: str
    run: Mapping[str, Any] | None = None  # RunConfig fields, validated
    preset: str | None = None
    view: Mapping[str, Any] = field(default_factory=dict)
    hide: tuple[str, ...] = ()

    def run_config(self):
        """The RunConfig the step shows (None when it shows no run)."""
        from core.runs import RunConfig
        from core.runs.presets import get_preset

        if self.preset is not None:
            return get_preset(self.preset)
        return RunConfig.from_dict(dict(self.run)) if self.run is not None else None

    def run_id(self, data_dir: Any = None) -> str | None:
        """The stored id the step's run has (or would have once trained); None when it shows none."""
        config = self.run_config()
        return None if config is None else config.run_id(config.load_dataset(data_dir).fingerprint)


@dataclass(frozen=True)
class Lesson:
    name: str
    title: str
    summary: str
    steps: tuple[LessonStep, ...]

    def step(self, number: Any) -> LessonStep:
        """Step `number`, counted from 1 as in `?step=K`."""
        index = validate.whole_number(number, "step", 1, len(self.steps))
        return self.steps[index - 1]

    def run_configs(self) -> list:
        """Every distinct run the lesson shows, in order (for bundling and for the first start)."""
        configs, seen = [], set()
        for step in self.steps:
            config = step.run_config()
            if config is not None and repr(config.to_dict()) not in seen:
                seen.add(repr(config.to_dict()))
                configs.append(config)
        return configs


def _unknown_keys(table: Mapping[str, Any], allowed: tuple[str, ...], where: str) -> None:
    for key in table:
        if key not in allowed:
            close = difflib.get_close_matches(str(key), allowed, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise InputError(f"{where}: unknown key {validate.shown(key)}{hint}; allowed: {', '.join(allowed)}")


def _text(value: Any, where: str, max_chars: int = MAX_TEXT_CHARS) -> str:
    if not isinstance(value, str):
        raise InputError(f"{where}: expected text, got {type(value).__name__}")
    return validate.text_of(value, where, max_chars)


def _view(value: Any, where: str) -> dict[str, Any]:
    from core.predict.modes import PredictionMode

    if not isinstance(value, Mapping):
        raise InputError(f"{where}: expected a table like {{ threshold = 0.5, R = 20 }}")
    _unknown_keys(value, VIEW_KEYS, where)
    view: dict[str, Any] = {}
    if "threshold" in value:
        view["threshold"] = validate.real_number(value["threshold"], f"{where}.threshold", 0.0, 1.0)
    if "mode" in value:
        view["mode"] = validate.one_of(value["mode"], f"{where}.mode", [m.value for m in PredictionMode])
    if "R" in value:
        view["R"] = validate.whole_number(value["R"], f"{where}.R", 1, VIEW_MAX_SAMPLES)
    if "epoch" in value:
        view["epoch"] = validate.whole_number(value["epoch"], f"{where}.epoch", 0, 100_000)
    if "ood" in value:
        sets = value["ood"] if isinstance(value["ood"], list) else [value["ood"]]
        view["ood"] = [validate.text_of(s, f"{where}.ood", 64, r"[a-z0-9-]+", "an OOD set name") for s in sets]
    return view


def _step(table: Any, where: str) -> LessonStep:
    if not isinstance(table, Mapping):
        raise InputError(f"{where}: expected a [[step]] table")
    _unknown_keys(table, STEP_KEYS, where)
    for required in ("page", "title", "text"):
        if required not in table:
            raise InputError(f"{where}: the key {required!r} is missing")
    page = validate.one_of(table["page"], f"{where}.page", PAGES)
    if "run" in table and "preset" in table:
        raise InputError(f"{where}: give either run or preset, not both")
    run = preset = None
    if "preset" in table:
        from core.runs.presets import PRESETS

        preset = validate.one_of(table["preset"], f"{where}.preset", PRESETS)
    if "run" in table:
        from core.runs import RunConfig

        if not isinstance(table["run"], Mapping):
            raise InputError(f'{where}.run: expected a table of run settings, e.g. {{ dataset = "two-moons" }}')
        try:
            RunConfig.from_dict(dict(table["run"]))
        except BNNError as exc:
            raise InputError(f"{where}.run: {exc}") from None
        run = dict(table["run"])
    hide = table.get("hide", [])
    if not isinstance(hide, list):
        raise InputError(f"{where}.hide: expected a list of control names")
    hidden = tuple(validate.one_of(name, f"{where}.hide", HIDEABLE_CONTROLS) for name in hide)
    return LessonStep(
        page=page,
        title=_text(table["title"], f"{where}.title", 120),
        text=_text(table["text"], f"{where}.text"),
        run=run,
        preset=preset,
        view=_view(table.get("view", {}), f"{where}.view"),
        hide=hidden,
    )


def parse_lesson(text: str | bytes, name: str) -> Lesson:
    """A lesson from its TOML text, or InputError naming the file, step and key at fault."""
    name = validate.text_of(name, "lesson", 48, NAME_PATTERN, "a lesson name (a-z, 0-9 and -)")
    where = f"lesson {name}"
    raw = text.encode() if isinstance(text, str) else bytes(text)
    if len(raw) > MAX_LESSON_BYTES:
        raise InputError(f"{where}: the file is {len(raw)} bytes; a lesson is at most {MAX_LESSON_BYTES}")
    try:
        document = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise InputError(f"{where}: the file is not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{where}: not valid TOML ({exc})") from None
    _unknown_keys(document, LESSON_KEYS, where)
    if "title" not in document:
        raise InputError(f"{where}: the key 'title' is missing")
    steps = document.get("step")
    if not isinstance(steps, list) or not steps:
        raise InputError(f"{where}: a lesson needs at least one [[step]]")
    if len(steps) > MAX_STEPS:
        raise InputError(f"{where}: {len(steps)} steps; a lesson has at most {MAX_STEPS}")
    return Lesson(
        name=name,
        title=_text(document["title"], f"{where}.title", 120),
        summary=_text(document.get("summary", ""), f"{where}.summary"),
        steps=tuple(_step(step, f"{where}, step {i}") for i, step in enumerate(steps, start=1)),
    )


def lesson_names(folder: Path | None = None) -> list[str]:
    folder = LESSONS_DIR if folder is None else Path(folder)
    return sorted(path.stem for path in folder.glob("*.toml") if re.fullmatch(NAME_PATTERN, path.stem))


def load_lesson(name: Any, folder: Path | None = None) -> Lesson:
    """A shipped lesson by name (`?lesson=NAME`): the name is checked against the lessons that exist
    before any file is opened, so a link cannot name a path."""
    folder = LESSONS_DIR if folder is None else Path(folder)
    chosen = validate.one_of(name, "lesson", lesson_names(folder))
    return parse_lesson((folder / f"{chosen}.toml").read_bytes(), chosen)

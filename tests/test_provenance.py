"""Provenance a newcomer can follow: every tracked text file cites papers by authors and year
(docs/references.md lists them), gives reasons instead of tracker numbers, and names no file
outside the repository.

Forbidden anywhere in a tracked text file:
- a paper by the file name of a private copy ("seed" followed by a three-digit number);
- the private restatement of the methods (a file named METHODS in capitals, with .md);
- paths outside the repository (the shared data folder beside the checkout, or an absolute path
  under the development machine's work folder); the data directory is described by its
  variable, BNN_DATA_DIR;
- an issue or defect number used as a reason (the word and a number, or "#" and a number).

The patterns are assembled from pieces so that this file does not match itself.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

SEED = "seed"
FORBIDDEN = [
    (re.compile(SEED + r"[ _-]?s?[ _-]?0{2}\d", re.IGNORECASE), "a paper cited by a private file number"),
    (re.compile(re.escape("METHODS" + ".md")), "a private file outside the repository"),
    (re.compile(re.escape(".." + "/shared")), "a path outside the repository"),
    (re.compile(re.escape("/wo" + "rk/")), "an absolute path on the development machine"),
    (re.compile(r"\b(?:issue|defect)s?\s*#?\d+", re.IGNORECASE), "an issue or defect number as a reason"),
    # "#" and up to three digits as a tracker reference; colours (#1f77b4, #000000) and comments ("# 1") do not match.
    (re.compile(r"(?<![\w&#/])#\d{1,3}(?![\w])"), "an issue number as a reason"),
]

# Files whose text is not prose the project writes: data, images, lock-like fixtures.
BINARY_SUFFIXES = {
    ".png",
    ".jpg",
    ".jpeg",
    ".gif",
    ".ico",
    ".npz",
    ".npy",
    ".gz",
    ".safetensors",
    ".woff",
    ".woff2",
    ".ttf",
    ".pdf",
    ".zip",
}


def tracked_files() -> list[Path]:
    """The repository's tracked files (git ls-files); without git, every file outside .git."""
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60)
        names = [n for n in out.stdout.decode("utf-8").split("\0") if n]
    except (OSError, subprocess.SubprocessError):
        names = [
            str(Path(d, f).relative_to(ROOT))
            for d, dirs, files in os.walk(ROOT)
            if ".git" not in Path(d).relative_to(ROOT).parts
            for f in files
        ]
    return [ROOT / n for n in names if Path(n).suffix.lower() not in BINARY_SUFFIXES]


def text_of(path: Path) -> str | None:
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if b"\0" in data[:8192]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def violations(text: str) -> list[tuple[int, str, str]]:
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for pattern, why in FORBIDDEN:
            match = pattern.search(line)
            if match:
                found.append((number, match.group(0), why))
    return found


def test_the_patterns_catch_what_they_should_and_nothing_else():
    bad = [
        SEED + " 000",
        SEED.capitalize() + " 004's thesis",
        "test_follows_" + SEED + "_000",
        "see " + "METHODS" + ".md section 4",
        "BNN_DATA_DIR=" + ".." + "/shared/data",
        "cache " + "/wo" + "rk/cache-uci",
        "(issue " + "13, defect " + "8)",
        "Issue #" + "11.",
        "fixed in #" + "12",
    ]
    good = [
        "seed 0, 1 and 2",
        "--seeds 0,1,2",
        "colour #1f77b4",
        "#000000",
        "# 1. a comment",
        "Hubin & Storvik (2024)",
        "the shared data directory (BNN_DATA_DIR)",
        "a&#39;b",
        "CPython gh-106905",
    ]
    assert all(violations(text) for text in bad), [t for t in bad if not violations(t)]
    assert not any(violations(text) for text in good), [(t, violations(t)) for t in good if violations(t)]


def test_no_private_file_numbers_issue_numbers_or_outside_paths_in_tracked_text():
    files = tracked_files()
    assert len(files) > 50, f"found only {len(files)} tracked text files under {ROOT}"
    problems = []
    for path in files:
        text = text_of(path)
        if text is None:
            continue
        for number, found, why in violations(text):
            problems.append(f"{path.relative_to(ROOT)}:{number}: {found!r} ({why})")
    assert not problems, "cite papers by authors and year (docs/references.md), give the reason:\n" + "\n".join(
        problems
    )


@pytest.mark.parametrize(
    "short",
    [
        "Hubin & Storvik (2024)",
        "Hubin & Storvik (2019)",
        "Ghosh, Yao & Doshi-Velez (2018)",
        "Zeng & Van den Broeck (2023)",
        "Bleahu (2025)",
    ],
)
def test_references_list_the_papers_the_project_implements(short):
    assert f"| {short} |" in (ROOT / "docs" / "references.md").read_text(encoding="utf-8")

"""Every measured number in the docs comes with the command that produced it.

The convention (docs/benchmarks.md, "Numbers in the docs"), checked here for README.md and
docs/*.md:

- A *unit* is a paragraph, one item of a list, or one table (text blocks are separated by blank
  lines; a list item starts with "- ", "* " or "1. "; a table is a run of lines starting with "|").
  Fenced code blocks are skipped.
- A unit holds a *measured number* when, outside backticks, it has a decimal (0.981, 3.6e-6), a
  percentage (45%) or a number with thousands separators (144,498). Integers alone (layer widths,
  epochs, seeds, section numbers) are settings, not measurements, and so are numbers after a
  comparison or an equals sign (keep > 0.83); write other settings in backticks (`kl_weight = 0.1`).
- Such a unit passes when it carries a command, or the unit just before it introduces it (ends
  with a colon) and carries one, or (for a table) the unit just after it carries one: a command
  in backticks (`python ...`, `sparse-bnn ...`, `streamlit ...`, `VAR=value python ...`), or a
  `command:` line; or when it quotes a paper's table, figure, section
  or algorithm by authors and year (Hubin & Storvik (2024), Table 2): those numbers are the paper's.
- Generated blocks are exempt: the lines between `<!-- NAME: begin (COMMAND) -->` and
  `<!-- NAME: end -->`, which say in their opening marker the command that writes them.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# references.md holds bibliographic numbers (volumes, DOIs, arXiv ids), not measurements.
DOCS = sorted(p for p in (ROOT / "docs").glob("*.md") if p.name != "references.md") + [ROOT / "README.md"]

CODE_SPAN = re.compile(r"`[^`]*`")
MEASURED = re.compile(
    r"(?<![\w.<>=])(?<![<>=] )"
    r"(?:\d+\.\d+(?:e-?\d+)?|\d+(?:\.\d+)?\s?%|\d{1,3}(?:,\d{3})+)(?!\w|\.\d)"
)
COMMAND = re.compile(
    r"`(?:[A-Z_]+=\S+\s+)*(?:python3?|sparse-bnn|streamlit)\s[^`]*`|^\s*command:", re.IGNORECASE | re.MULTILINE
)
PAPER_QUOTE = re.compile(
    r"[A-Z][A-Za-z-]+(?:,? [A-Z][A-Za-z-]+)*(?: et al\.)?(?: & [A-Z][A-Za-z -]+)? "
    r"\(?(?:19|20)\d\d\)?,?"
    r"(?:'s)? (?:its )?(?:Tables?|Figures?|fig\.|section|Algorithm|appendix) [A-Z]?\d"
)
BEGIN = re.compile(r"^<!-- [\w -]+: begin \((?P<command>[^)]+)\) -->$")
END = re.compile(r"^<!-- [\w -]+: end -->$")
ITEM = re.compile(r"^\s*(?:[-*]|\d+\.)\s")


def units(text: str) -> list[tuple[int, str, bool]]:
    """(first line number, text, is_table) of every unit outside fences and generated blocks; the
    items of one list are units of their own."""
    out: list[tuple[int, str, bool]] = []
    current: list[str] = []
    start, kind = 0, False
    fenced = generated = False

    def flush():
        nonlocal current
        if current:
            out.append((start, "\n".join(current), kind))
        current = []

    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if generated:
            if END.match(stripped):
                generated = False
            continue
        if BEGIN.match(stripped):
            flush()
            generated = True
            continue
        if stripped.startswith("```"):
            flush()
            fenced = not fenced
            continue
        if fenced:
            continue
        if not stripped or stripped.startswith("#"):
            flush()
            continue
        is_table = stripped.startswith("|")
        if current and (is_table != kind or (not is_table and ITEM.match(line))):
            flush()
        if not current:
            start, kind = number, is_table
        current.append(line)
    flush()
    return out


def measured(unit: str) -> list[str]:
    return MEASURED.findall(CODE_SPAN.sub("", unit))


def introduction(blocks: list[tuple[int, str, bool]], i: int) -> str | None:
    """The unit that introduces unit i: the one before it, or for a list item the one before its
    list (the items of a list follow each other line by line), when that ends with a colon or is a
    command line."""
    j = i - 1
    while (
        j >= 0
        and ITEM.match(blocks[i][1])
        and ITEM.match(blocks[j][1])
        and blocks[j][0] + blocks[j][1].count("\n") + 1 == blocks[j + 1][0]
    ):
        j -= 1
    if j < 0:
        return None
    text = blocks[j][1]
    return text if text.rstrip().endswith(":") or text.lstrip().lower().startswith("command:") else None


def unsourced(text: str) -> list[tuple[int, str]]:
    found = []
    blocks = units(text)
    for i, (line, unit, is_table) in enumerate(blocks):
        numbers = measured(unit)
        if not numbers:
            continue
        near = [unit]
        intro = introduction(blocks, i)
        if intro is not None:
            near.append(intro)
        if is_table and i + 1 < len(blocks):
            near.append(blocks[i + 1][1])
        if any(COMMAND.search(u) for u in near) or PAPER_QUOTE.search(unit):
            continue
        found.append((line, ", ".join(numbers[:4])))
    return found


def test_the_convention_on_examples():
    ok = [
        "Density 0.07 after 23 epochs (`python -m core train --preset fast-mnist`).",
        (
            "`BNN_DATA_DIR=DATA python benchmarks/epoch_time.py --repeats 3`:\n\n"
            "| family | ratio |\n|---|---|\n| lbbnn | 3.10 |"
        ),
        "| a | b |\n|---|---|\n| x | 0.5 |\n\ncommand: python benchmarks/x.py",
        "Hubin & Storvik (2024), Table 2, report MED-MEA 0.981 at density 0.079.",
        "`python benchmarks/kl_weight_sweep.py` gives, per KL weight:\n\n- 1: density 0.0038\n- 0.1: density 0.042",
        "Keep where the statistic > 0.83, cut at >= 0.5; `kl_weight = 0.1`.",
        "Widths 400, 600 and 10 units, 250 epochs, seed 0, `--kl-weight 0.1`.",
        "<!-- table: begin (python scripts/t.py) -->\n| 0.5 |\n<!-- table: end -->",
        "```\nloss 0.25\n```",
    ]
    bad = [
        "Density 0.07 after 23 epochs.",
        "The output layer keeps 45%.",
        "One command `python -m core runs`.\n\nA later paragraph: 0.981.",
        "- first item 0.5\n- second item `python x.py` 0.7",
        "keeps 45%.\n\n- as said `python x.py`",
        "| a |\n|---|\n| 0.5 |\n\nA paragraph after.\n\n`python x.py`",
    ]
    assert not [t for t in ok if unsourced(t)], [(t, unsourced(t)) for t in ok if unsourced(t)]
    assert all(unsourced(t) for t in bad), [t for t in bad if not unsourced(t)]


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_measured_number_in_the_docs_comes_with_its_command(path):
    problems = unsourced(path.read_text(encoding="utf-8"))
    assert not problems, (
        f"{path.relative_to(ROOT)}: numbers without a command (give the command in the "
        "paragraph or the one before, or generate the block):\n"
        + "\n".join(f"  line {line}: {numbers}" for line, numbers in problems)
    )

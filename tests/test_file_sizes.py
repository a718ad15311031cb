"""Files stay small enough to read: no module of core/ or dashboard/ over 600 lines, the facade
at most 350 (a newcomer reads one concept per file; the door holds no domain logic)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_MODULE_LINES = 600
MAX_FACADE_LINES = 350


def _modules() -> list[Path]:
    return sorted(p for package in ("core", "dashboard") for p in (ROOT / package).rglob("*.py"))


def test_the_packages_have_modules():
    # guards the glob itself: an empty list would make the size test pass vacuously
    assert len(_modules()) > 50


def test_every_module_is_at_most_600_lines():
    too_long = {
        str(path.relative_to(ROOT)): lines
        for path in _modules()
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert not too_long, f"split these by concept: {too_long}"


def test_facade_is_at_most_350_lines():
    lines = len((ROOT / "dashboard" / "backend.py").read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_FACADE_LINES, f"dashboard/backend.py has {lines} lines"

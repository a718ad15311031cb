"""The app's own files, resolved once per process: dashboard/app.py is Streamlit's main script and runs
again on every rerun of every session, and each `Path.resolve()` there cost a few system calls per run
(with a class's runs sharing one interpreter lock, each call a chance to wait for it). In a CPU profile
of the 30-session class (see dashboard/cache.py's run list) 2% of the script runs' samples sat under
those lines; an alternating A/B of four classes showed no difference in the first update's p95
(benchmarks/results/classroom_kept_draws_late_paths_*.md): it is CPU taken off every run, not a speed-up
measured."""

from __future__ import annotations

from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
# A bundled file, not ":material/...": the favicon must not come from a font server (offline classrooms).
PAGE_ICON = PROJECT_ROOT / "assets" / "icon.png"
# Not "pages/": a folder of that name beside the entry point switches Streamlit
# into its legacy multipage mode, where a deep link runs a page without app.py.
PAGES_DIR = PROJECT_ROOT / "dashboard" / "views"

"""The README's app command installs only requirements.txt: every third-party
module that core/ or dashboard/ imports must be declared there."""

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Ray grid backend; Pyro, NumPyro/JAX for the NUTS reference (requirements-reference.txt); onnxruntime for
# the ONNX export check (requirements-export.txt)
OPTIONAL = {"ray", "pyro", "numpyro", "jax", "onnxruntime"}


def imported_top_level_modules(folder: Path) -> set[str]:
    names = set()
    for path in folder.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names


def declared_requirements() -> set[str]:
    names = set()
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            names.add(re.split(r"[<>=!~\[ ]", line, maxsplit=1)[0].lower())
    return names


def test_every_third_party_import_of_the_app_is_in_requirements_txt():
    used = imported_top_level_modules(ROOT / "core") | imported_top_level_modules(ROOT / "dashboard")
    third_party = {name for name in used if name not in sys.stdlib_module_names} - {"core", "dashboard"}
    distribution = {"PIL": "pillow"}  # import name -> the name requirements.txt gives
    missing = {distribution.get(name, name) for name in third_party} - declared_requirements() - OPTIONAL
    assert not missing, f"imported but not in requirements.txt: {sorted(missing)}"
    assert "streamlit" not in imported_top_level_modules(ROOT / "core"), "core/ must not import Streamlit"

"""docs/configuration.md is the one list of the environment variables: every
variable the product reads (``env.<type>("NAME")`` in hosting/settings/,
``os.environ.get("NAME")`` / ``os.environ["NAME"]`` anywhere in hosting,
inference and models_store) has its row there, in the section of the module
that reads it, and every row names a variable that is read."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SETTINGS = ROOT / "hosting" / "settings"
DOC = ROOT / "docs" / "configuration.md"
#: Read by Django or Python themselves, not by the product.
STANDARD = {"DJANGO_SETTINGS_MODULE"}


def _is_os_environ(node: ast.expr) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "environ" and isinstance(node.value, ast.Name)


def environment_reads(path: Path) -> set[str]:
    """The variable names ``path`` reads: ``env("X")``, ``env.str("X")`` (any
    type), ``os.environ.get("X")``, ``os.environ["X"]``."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func, name = node.func, node.args[0].value
            if isinstance(func, ast.Name) and func.id == "env":
                names.add(name)
            elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "env":
                names.add(name)
            elif isinstance(func, ast.Attribute) and func.attr == "get" and _is_os_environ(func.value):
                names.add(name)
        elif isinstance(node, ast.Subscript) and _is_os_environ(node.value) and isinstance(node.ctx, ast.Load):
            if isinstance(node.slice, ast.Constant):
                names.add(node.slice.value)
    return {n for n in names if isinstance(n, str) and re.fullmatch(r"[A-Z][A-Z0-9_]*", n)} - STANDARD


def documented() -> dict[str, str]:
    """Variable -> the heading of the section whose table names it (first column, in backticks)."""
    found, section = {}, ""
    for line in DOC.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            section = line[3:]
        elif line.startswith("| `"):
            for name in re.findall(r"`([A-Z][A-Z0-9_]*)`", line.split("|")[1]):
                assert name not in found, f"{name} has two rows"
                found[name] = section
    return found


def test_every_settings_module_has_its_section_and_every_variable_its_row():
    rows = documented()
    for module in sorted(SETTINGS.glob("*.py")):
        for name in sorted(environment_reads(module)):
            assert name in rows, f"{name} (read in {module.relative_to(ROOT)}) has no row in docs/configuration.md"
            assert f"hosting/settings/{module.name}" in rows[name], (
                f"{name} is documented under '{rows[name]}', not in the section of {module.name}"
            )


def test_every_variable_read_anywhere_is_documented_and_every_row_is_read():
    read = set()
    for package in ("hosting", "inference", "models_store"):
        for path in (ROOT / package).rglob("*.py"):
            read |= environment_reads(path)
    rows = set(documented())
    assert sorted(read - rows) == [], "read but not documented in docs/configuration.md"
    assert sorted(rows - read) == [], "documented in docs/configuration.md but read nowhere"
    assert len(read) > 100


def test_the_reader_finds_each_kind_of_read(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        'import os\nA = env("ONE")\nB = env.int("TWO", default=1)\n'
        'C = os.environ.get("THREE")\nD = os.environ["FOUR"]\nos.environ["FIVE"] = "x"\n'
    )
    assert environment_reads(sample) == {"ONE", "TWO", "THREE", "FOUR"}

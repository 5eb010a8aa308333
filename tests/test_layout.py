"""The package's size rules (docs/architecture.md): no module over 800 lines, no function over
80 (the migrations' generated revisions aside)."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MODULES = sorted(
    p
    for package in ("adseg", "adseg_research")
    for p in (ROOT / package).rglob("*.py")
    if "migrations" not in p.parts
)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_modules_and_functions_stay_small(path):
    source = path.read_text(encoding="utf-8")
    assert source.count("\n") <= 800, f"{path.name}: {source.count(chr(10))} lines"
    long = [
        f"{node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno - node.lineno + 1 > 80
    ]
    assert not long, f"{path.name}: {', '.join(long)}"

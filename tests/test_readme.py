"""The README's Python API example runs as printed and gives the accuracy it states."""

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_the_readme_python_example_runs_and_gives_what_it_says():
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## Python API") :]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    pattern = r"clustering_accuracy\(y, segments\)` then gives ([0-9]+\.[0-9]+)"
    stated = float(re.search(pattern, section)[1])
    namespace: dict = {}
    exec(compile(code, str(README), "exec"), namespace)  # noqa: S102 (our own README)
    got = namespace["metrics"].clustering_accuracy(namespace["y"], namespace["segments"])
    assert round(got, 2) == stated
    assert len(code.strip().splitlines()) <= 8, "the README promises a short example"

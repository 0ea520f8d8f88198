"""The repository's documentation: a README of at most 300 lines that starts with the two commands, a MkDocs site
whose navigation lists every page (`.ci/run` builds it with `mkdocs build --strict`, which also resolves every
docstring reference and link), and the MIT license pyproject.toml declares."""

from __future__ import annotations

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_readme_is_a_landing_page_that_starts_with_the_two_commands():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 300
    first_block = re.search(r"```bash\n(.*?)```", text, re.S).group(1)
    commands = [line for line in first_block.splitlines() if line and not line.startswith("#")]
    assert len(commands) == 2
    assert "pip install -e ." in commands[0] and "gradir trace" in commands[0] and "--viz" in commands[0]
    assert "torch==2.13.0" in commands[1] and "pytest" in commands[1]
    # every docs page the README links exists
    for link in re.findall(r"\]\((docs/[^)]+)\)", text):
        assert (ROOT / link).is_file(), link


def test_the_docs_navigation_lists_every_page():
    nav = re.findall(r":\s*([\w/]+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(), re.M)
    pages = {str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md")}
    assert sorted(nav) == sorted(pages) and len(set(nav)) == len(nav)


def test_the_license_is_the_one_pyproject_declares():
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")
    assert re.search(r'^license = "MIT"$', (ROOT / "pyproject.toml").read_text(), re.M)
    assert "mkdocs build --strict" in (ROOT / ".ci" / "run").read_text()

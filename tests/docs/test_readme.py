"""The README is a front page: short, its two commands the ones CI runs, every link of it leading somewhere.

The rest of the documentation is the site (docs/, tests/docs/test_site.py); these checks need nothing installed.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def test_the_readme_is_a_front_page_of_at_most_200_lines() -> None:
    assert len(README.splitlines()) <= 200


def test_the_readme_gives_the_two_commands_and_ci_runs_its_test_command() -> None:
    assert "python3 dev.py demo" in README and "python3 dev.py test" in README and "python3 dev.py docs" in README
    ci = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if line and not line.startswith("#")]
    assert ci[-1] == "python3 dev.py test", "CI runs exactly the README's test command"


def test_every_relative_link_of_the_readme_exists() -> None:
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README)
    local = [link for link in links if not re.match(r"[a-z]+://", link)]
    assert local, "the README links into the documentation"
    assert [link for link in local if not (ROOT / link).exists()] == []


def test_the_readme_links_every_guide() -> None:
    guides = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs" / "guides").glob("*.md"))
    assert [g for g in guides if f"({g})" not in README] == []


def test_dev_py_documents_its_docs_command() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("dev_under_test", ROOT / "dev.py")
    assert spec and spec.loader
    dev = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(dev)
    assert "python3 dev.py docs" in (dev.__doc__ or "")
    assert "docs" in dev.EXTRAS.split(",")
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert re.search(r"^docs = \[.*mkdocs.*mkdocstrings.*mkdocs-jupyter", pyproject, re.M)

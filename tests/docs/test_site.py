"""The documentation site builds strictly, and the strict build fails on what it must fail on.

The build is ``python3 dev.py docs``'s (mkdocs.yml: ``strict: true`` and every link, anchor and navigation check
raised to a warning), so a broken link or anchor, a reference mkdocstrings cannot resolve, a public name without a
docstring (tools/mkdocs_hooks.py warns) or a page left out of the navigation fails ``test_the_site_builds``.
The other tests build a two-page site with the same settings to show that each of those faults fails it.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml

from tests.docs.site import MISSING, ROOT, SITE, SKIP_REASON, built_site, mkdocs_build

pytestmark = [pytest.mark.skipif(bool(MISSING), reason=SKIP_REASON), pytest.mark.timeout(900)]


def test_the_site_builds_strictly_without_a_warning() -> None:
    build = built_site()
    assert build.returncode == 0, build.log[-6000:]
    assert not re.search(r"^WARNING", build.log, re.M), build.log[-6000:]
    assert (SITE / "index.html").exists() and (SITE / "search" / "search_index.json").exists()


def test_every_guide_tutorial_and_reference_page_is_built() -> None:
    assert built_site().returncode == 0
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)
    nav = [p for p in re.findall(r"'([^']+\.(?:md|ipynb))'", str(config["nav"]))]
    for page in nav:
        built = SITE / re.sub(r"(index)?\.(md|ipynb)$", "", page) / "index.html"
        assert built.exists(), f"{page} was not built ({built})"
    on_disk = {str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md")}
    assert not on_disk - set(nav), "pages in docs/ that the navigation leaves out"


def test_the_reference_documents_every_public_name() -> None:
    import notebook_accel

    assert built_site().returncode == 0
    reference = "".join(p.read_text() for p in (SITE / "reference").rglob("index.html"))
    for name in notebook_accel.__all__:  # its own entry, or (accelerate's alias of ours) a line naming it
        if name != "__version__":
            assert (re.search(rf'id="notebook_accel[\w.]*\.{name}"', reference)
                    or f"<li><code>{name}</code>: the same object as" in reference), name
    # the errors a function raises are on its entry
    launching = (SITE / "reference" / "launching" / "index.html").read_text()
    assert "CudaInitializedError" in launching and "Raises" in launching


def test_a_tutorial_page_shows_its_saved_dashboard_image() -> None:
    assert built_site().returncode == 0
    page = (SITE / "notebooks" / "01_quickstart" / "index.html").read_text()
    assert re.search(r'<img alt="training curves" src="data:image/png;base64,', page)


def _small_site(tmp_path: Path, pages: dict[str, str], nav: list[str]) -> Path:
    """A site with mkdocs.yml's own checks, but only ``pages``."""
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    config["docs_dir"] = str(tmp_path / "docs")
    config["hooks"] = []  # the reference pages need mkdocstrings: tests/docs/test_reference.py checks the hook
    config["plugins"] = ["search"]  # the checks under test are mkdocs' own; the hook's pages need no renderer
    config["nav"] = nav
    for name, text in pages.items():
        (tmp_path / "docs" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "docs" / name).write_text(text)
    path = tmp_path / "mkdocs.yml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.mark.parametrize("fault, pages, message", [
    ("broken link", {"index.md": "# Home\n\nSee [the guide](guides/nowhere.md).\n"}, "nowhere.md"),
    ("broken anchor", {"index.md": "# Home\n\n## Here\n\nSee [there](#there).\n"}, "#there"),
    ("page left out of the navigation", {"index.md": "# Home\n", "orphan.md": "# Orphan\n"}, "orphan.md"),
])
def test_the_strict_build_fails_on(fault: str, pages: dict[str, str], message: str, tmp_path: Path) -> None:
    config = _small_site(tmp_path, pages, ["index.md"])
    build = mkdocs_build(config, tmp_path / "site")
    assert build.returncode != 0 and message in build.log, (fault, build.log[-3000:])


def test_the_strict_build_passes_a_clean_small_site(tmp_path: Path) -> None:
    config = _small_site(tmp_path, {"index.md": "# Home\n\n## Here\n\nSee [here](#here).\n"}, ["index.md"])
    build = mkdocs_build(config, tmp_path / "site")
    assert build.returncode == 0, build.log[-3000:]
    shutil.rmtree(tmp_path / "site")

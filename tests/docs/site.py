"""Builds the documentation site once per test session, strictly, as ``python3 dev.py docs`` does.

``tests/docs`` checks the build and its pages, ``tests/browser/test_docs_site.py`` opens the result in Chromium.
The build runs in a fresh process (mkdocs imports the package for the reference pages) with the docs extra's
packages; without them the callers skip, naming the extra.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "build" / "site"
MISSING = [name for name in ("mkdocs", "material", "mkdocstrings_handlers.python", "mkdocs_jupyter")
           if importlib.util.find_spec(name.split(".")[0]) is None]
SKIP_REASON = f"the docs extra is not installed ({', '.join(MISSING)} missing; python3 dev.py test installs it)"


@dataclass(frozen=True)
class Build:
    """One build of the site: the mkdocs exit code and its log."""

    returncode: int
    log: str


def mkdocs_build(config: Path, site_dir: Path, cwd: Path = ROOT) -> Build:
    """Run ``mkdocs build --strict`` on ``config`` into ``site_dir`` in a fresh process."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(config),
                           "--site-dir", str(site_dir)], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600)
    return Build(done.returncode, done.stdout + done.stderr)


@functools.lru_cache(maxsize=1)
def built_site() -> Build:
    """The project's site, built strictly into build/site (once per session)."""
    return mkdocs_build(ROOT / "mkdocs.yml", SITE)

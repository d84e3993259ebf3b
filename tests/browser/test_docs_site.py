"""The documentation site in a real browser: search, a tutorial's saved dashboard image, no broken image or link.

The site is built strictly into build/site (tests/docs/site.py, once per session), served from this process on a
free local port, and opened in Debian's Chromium (never a downloaded browser) through Playwright:

- the search box finds ``notebook_launcher`` and ``RayCluster`` (Material's client-side index, in a web worker);
- the quickstart tutorial shows its dashboard result image, decoded (``naturalWidth`` > 0);
- every page of the site loads with no image that failed to decode, no request of the page's own that failed or
  answered 4xx/5xx, and no link to a page or an anchor of this site that does not exist.

A screenshot of the search goes to ``build/browser/docs-search-<term>.png``.
"""

from __future__ import annotations

import functools
import importlib.util
import re
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest

from tests.docs.site import MISSING, SITE, SKIP_REASON, built_site

CHROMIUM = Path("/usr/bin/chromium")
SHOTS = Path(__file__).resolve().parents[2] / "build" / "browser"

if importlib.util.find_spec("playwright") is None or not CHROMIUM.exists():
    pytest.skip("playwright and /usr/bin/chromium are needed (python3 dev.py test installs them)",
                allow_module_level=True)
if MISSING:
    pytest.skip(SKIP_REASON, allow_module_level=True)

pytestmark = pytest.mark.timeout(600)

# every image of the page that did not decode, and every link's absolute address
PAGE_JS = """() => ({
  broken: Array.from(document.images).filter(i => !i.complete || i.naturalWidth === 0)
                .map(i => i.getAttribute('alt') || i.src.slice(0, 80)),
  links: Array.from(document.querySelectorAll('a[href]')).map(a => a.href),
})"""


class _Quiet(SimpleHTTPRequestHandler):
    """Serves the built site without logging each request."""

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        """Say nothing."""


@pytest.fixture(scope="module")
def site_url() -> Iterator[str]:
    """The built site, served on 127.0.0.1 from a thread of this process."""
    build = built_site()
    assert build.returncode == 0, build.log[-4000:]
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(SITE)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless Chromium (Debian's)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=str(CHROMIUM), args=["--headless", "--no-sandbox"])
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.mark.parametrize("term", ["notebook_launcher", "RayCluster"])
def test_search_finds(term: str, site_url: str, browser: Any) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    try:
        page.goto(site_url, wait_until="networkidle")
        page.keyboard.press("/")  # Material's shortcut: focus the search box
        results = page.locator(".md-search-result__item")
        box = page.locator("input.md-search__input")
        for attempt in range(6):  # the index loads in a web worker: a query typed before it is ready is dropped
            box.fill("")
            box.type(term, delay=20)  # key by key, as a person types: Material searches on key events, not on fill
            try:
                results.first.wait_for(timeout=10_000)
                break
            except Exception:  # playwright's TimeoutError: type it again
                pass
        texts = results.all_inner_texts()
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / f"docs-search-{term}.png"))
    finally:
        page.close()
    assert any(term in text for text in texts), texts[:5]


def test_a_tutorial_page_shows_its_dashboard_image(site_url: str, browser: Any) -> None:
    page = browser.new_page()
    try:
        page.goto(site_url + "notebooks/01_quickstart/")
        image = page.locator('img[alt="training curves"]').first
        image.scroll_into_view_if_needed()
        size = image.evaluate("i => [i.complete, i.naturalWidth, i.getBoundingClientRect().width]")
    finally:
        page.close()
    assert size[0] and size[1] > 0 and size[2] > 0, size


@functools.lru_cache(maxsize=None)
def _ids(html_file: Path) -> frozenset[str]:
    """The element ids of a built page (the anchors a link may name)."""
    return frozenset(re.findall(r'\bid="([^"]+)"', html_file.read_text(errors="replace")))


def _target_problem(href: str, site_url: str) -> str | None:
    """Why a link of this site leads nowhere, or ``None`` when its page (and anchor) exist."""
    if not href.startswith(site_url):
        return None  # another site (the repository, a package's documentation): not ours to check offline
    parts = urlsplit(href)
    path = SITE / unquote(parts.path).lstrip("/")
    target = path / "index.html" if path.is_dir() else path
    if not target.is_file():
        return f"{href}: no such file"
    if parts.fragment and target.suffix == ".html" and unquote(parts.fragment) not in _ids(target):
        return f"{href}: no anchor #{parts.fragment}"
    return None


def test_no_page_has_a_broken_image_or_link(site_url: str, browser: Any) -> None:
    pages = sorted(p.relative_to(SITE).as_posix() for p in SITE.rglob("index.html"))
    assert len(pages) > 30, pages  # the guides, tutorials and reference pages are all there
    problems: list[str] = []
    page = browser.new_page()
    failed: list[str] = []
    # a request cut short by the next navigation (the search worker's) is not a failure
    page.on("requestfailed", lambda request: failed.append(f"{request.url} ({request.failure})")
            if "ERR_ABORTED" not in (request.failure or "") else None)
    page.on("response", lambda response: failed.append(f"{response.url} ({response.status})")
            if response.status >= 400 and response.url.startswith(site_url) else None)
    try:
        for name in pages:
            url = site_url + name.removesuffix("index.html")
            failed.clear()
            page.goto(url, wait_until="load")
            found = page.evaluate(PAGE_JS)
            problems += [f"{url}: image {alt!r} did not load" for alt in found["broken"]]
            problems += [f"{url}: request {request} failed" for request in failed
                         if not request.startswith(("data:", "blob:"))]
            problems += [f"{url} -> {why}" for why in {_target_problem(h, site_url) for h in found["links"]} if why]
    finally:
        page.close()
    assert problems == [], "\n".join(sorted(set(problems))[:40])

"""Headless Chromium driven by Playwright, for the browser tests.

The browser is the one ``torchhw system`` finds: Debian's chromium, Playwright's own build, or
any Chrome or Chromium named by TORCHHW_CHROMIUM. ``make test`` installs one first where it can
(``torchhw system --install``). A test never installs one, and never skips for want of one:
without a browser it fails with the one line that says what to run.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

from torchhw.course import system

ARTIFACTS = Path(__file__).resolve().parents[1] / "build" / "test-artifacts"
# Flags for a sandboxed CI machine with no network: no GPU, no first-run UI, no background
# connections (they are refused here, many at a time), no /dev/shm limits.
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage"]


def ensure_chromium() -> Path:
    """The browser the tests drive; a missing one fails the test with what to run."""
    found = system.find("chromium")
    if found is None:
        pytest.fail(system.advice("chromium") + " (or run `make test`, which installs it)",
                    pytrace=False)
    return found


@contextmanager
def browser_page(offline: bool = False) -> Iterator["object"]:
    """A fresh Chromium page (1280x900); closed, with its browser and driver, on exit.

    ``offline=True`` aborts every request that is not to a file or to 127.0.0.1, and records
    it in ``page.blocked`` so a test can show what the page tried to fetch.
    """
    try:
        from playwright import sync_api
    except ImportError:
        pytest.fail("playwright is missing: run `make venv` (it is in the dev extra)",
                    pytrace=False)
    executable = ensure_chromium()
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(executable), args=FLAGS, headless=True)
        try:
            context = browser.new_context(viewport={"width": 1280, "height": 900})
            page = context.new_page()
            page.blocked = []
            if offline:
                def route(r):
                    url = r.request.url
                    if url.startswith(("file://", "data:", "blob:", "http://127.0.0.1")):
                        r.continue_()
                    else:
                        page.blocked.append(url)
                        r.abort()
                context.route("**/*", route)
            yield page
        finally:
            browser.close()


def screenshot(page, name: str) -> Path:
    """Save a full-page screenshot under build/test-artifacts/ and return its path."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / name
    page.screenshot(path=str(path), full_page=True)
    return path

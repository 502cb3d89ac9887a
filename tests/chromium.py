"""Headless Debian Chromium driven by Playwright, for the browser tests.

Playwright is used with the system browser at /usr/bin/chromium: `playwright install` would
download a browser build of its own, which this project never does. A missing chromium is
installed by `.ci/run` (apt-get), never by a test; elsewhere the tests are skipped with the reason.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

CHROMIUM = Path(os.environ.get("TORCHHW_CHROMIUM", "/usr/bin/chromium"))
ARTIFACTS = Path(__file__).resolve().parents[1] / "build" / "test-artifacts"
# Flags for a sandboxed CI machine with no network: no GPU, no first-run UI, no background
# connections (they are refused here, many at a time), no /dev/shm limits.
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage"]


def ensure_chromium() -> Path:
    """The path of Debian's chromium. Tests never install it: `.ci/run` does, with apt-get.

    Missing here, the browser tests are skipped with the reason; missing in CI (CI=true) they
    fail, since a skipped browser test there would prove nothing.
    """
    if CHROMIUM.exists():
        return CHROMIUM
    message = (f"{CHROMIUM} is missing: install Debian's chromium (`apt-get install chromium`, "
               f"as .ci/run does) or point TORCHHW_CHROMIUM at one")
    if os.environ.get("CI", "").lower() not in ("", "0", "false"):
        pytest.fail(message)
    pytest.skip(message)


@contextmanager
def browser_page(offline: bool = False) -> Iterator["object"]:
    """A fresh Chromium page (1280x900); closed, with its browser and driver, on exit.

    ``offline=True`` aborts every request that is not to a file or to 127.0.0.1, and records
    it in ``page.blocked`` so a test can show what the page tried to fetch.
    """
    sync_api = pytest.importorskip("playwright.sync_api",
                                   reason="playwright is missing: run `make venv`")
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

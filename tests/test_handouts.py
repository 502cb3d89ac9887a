"""The HTML handouts: built from the committed notebooks, and read in a browser with no network."""

from __future__ import annotations

import time

import pytest

from torchhw.course.handouts import build

from chromium import browser_page, screenshot


@pytest.mark.browser
def test_handouts_show_plots_and_widgets_offline(tmp_path):
    index = build(tmp_path / "site", names=["00", "04"], echo=lambda *a, **k: None)
    site = index.parent
    assert (site / "_static" / "embed-amd.js").stat().st_size > 100_000
    contents = index.read_text()
    assert 'href="00_hardware_tour.html"' in contents and 'href="04_optim.html#' in contents
    page_html = (site / "04_optim.html").read_text()
    assert "'_static/embed-amd.js'" in page_html and "_static/require.js" in page_html
    assert "_static/mathjax/MathJax.js" in page_html and "libs/mathjax" not in page_html
    assert (site / "_static" / "mathjax" / "jax" / "output" / "CommonHTML" / "jax.js").exists()

    with browser_page(offline=True) as page:
        page.goto(index.as_uri())
        page.click("text=04 · Optimizers and the training loop")
        page.wait_for_url("**/04_optim.html")
        plots = page.eval_on_selector_all(
            ".jp-OutputArea-output img[src^='data:image/png']",
            "imgs => imgs.filter(i => i.complete && i.naturalWidth > 0).length")
        assert plots >= 2, "the page shows no plot"
        slider = page.locator(".widget-slider").first
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not slider.count():
            time.sleep(0.2)
        assert slider.count() and slider.is_visible(), \
            f"the widget did not render offline; requests blocked: {page.blocked}"
        assert float(page.locator(".widget-readout").first.inner_text()) == 0.1, "saved value"
        assert not [u for u in page.blocked if "embed-amd" in u or "require" in u], page.blocked
        slider.scroll_into_view_if_needed()
        screenshot(page, "handout_04_optim.png")

        # formulas: typeset by the site's own MathJax, no TeX source left showing
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not page.locator("mjx-container, .MJXc-display, "
                                                               ".mjx-chtml").count():
            time.sleep(0.2)
        typeset = page.locator(".mjx-chtml").count()
        assert typeset >= 3, f"formulas were not typeset offline; requests blocked: {page.blocked}"
        assert not [u for u in page.blocked if "mathjax" in u.lower()], page.blocked
        assert "$\\eta$" not in page.inner_text("body") and "$\\eta " not in page.inner_text("body")

"""The course in JupyterLab in a real browser: headless Debian Chromium driven by Playwright.

A private Lab server (127.0.0.1, random token, temporary settings and workspaces) serves a
copy of the notebooks, so nothing the kernels write lands in the checkout. In 04 the test runs
all cells, checks that the plot images have loaded, that the learning-rate slider renders and
that moving it redraws the plot. Screenshots go to build/test-artifacts/.
Everything started here is stopped, and the test fails if a process is left behind.

It needs Chromium and takes 20-30 s on 2 cores, so it is marked `browser`: the default suite
leaves it out and `make test` runs it afterwards (`make browser`).
"""

from __future__ import annotations

import shutil
import time

import psutil
import pytest

from torchhw.course.lab import LabServer

from chromium import browser_page, screenshot
from conftest import NOTEBOOKS

pytestmark = pytest.mark.browser

# Every cell attached to the page (no windowing), so the DOM shows every output.
TEST_SETTINGS = {"@jupyterlab/notebook-extension:tracker": {"windowingMode": "none"}}
IDLE = "Python 3 (ipykernel) | Idle"


def open_and_run_all(page, lab: LabServer, name: str, timeout_s: float = 120) -> None:
    """Open a notebook, wait for its kernel, run every cell and wait until all have run."""
    page.goto(lab.url(f"lab/tree/notebooks/{name}?reset"))
    # The toolbar can say idle while the status bar still says "Initializing": only the
    # status bar means that Run All will run.
    page.get_by_text(IDLE).first.wait_for(timeout=60_000)
    cells = page.locator(".jp-Notebook .jp-CodeCell").count()
    assert cells > 0, f"{name}: no code cells on the page"
    page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
    errors = page.locator(".jp-RenderedText[data-mime-type='application/vnd.jupyter.error']")
    allowed = expected_errors(name)  # cells tagged raises-exception raise on purpose
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        prompts = page.locator(".jp-Notebook .jp-CodeCell .jp-InputArea-prompt").all_inner_texts()
        done = [p for p in prompts if p.strip() not in ("[ ]:", "[*]:", "")]
        if len(done) == cells and page.get_by_text(IDLE).count():
            break
        if errors.count() > allowed:  # Run All stops at an unexpected error: say which
            screenshot(page, f"lab_{name}_error.png")
            pytest.fail(f"{name}: a cell raised after {len(done)} of {cells} had run:\n" +
                        "\n".join(errors.all_inner_texts())[-3000:])
        time.sleep(0.5)
    else:
        screenshot(page, f"lab_{name}_timeout.png")
        pytest.fail(f"{name}: not every cell ran within {timeout_s:.0f} s ({len(done)} of "
                    f"{cells}); see build/test-artifacts/lab_{name}_timeout.png. Outputs of "
                    f"the last cell that ran:\n{last_outputs(page)}")


def last_outputs(page) -> str:
    """The text outputs of the last code cell that has a number, for a failure message."""
    return page.evaluate("""() => {
        const cells = [...document.querySelectorAll('.jp-Notebook .jp-CodeCell')]
            .filter(c => /\\[\\d+\\]/.test(c.querySelector('.jp-InputArea-prompt').innerText));
        const last = cells[cells.length - 1];
        return last ? last.innerText.slice(-3000) : '(none)';
    }""")


def expected_errors(name: str) -> int:
    import nbformat

    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    return sum("raises-exception" in c.metadata.get("tags", []) for c in nb.cells)


def loaded_images(page, within: str = ".jp-Notebook") -> list[str]:
    """The src of every output image in ``within`` that the browser has decoded."""
    return page.eval_on_selector_all(
        f"{within} .jp-OutputArea-output img",
        "imgs => imgs.filter(i => i.complete && i.naturalWidth > 0).map(i => i.src)")


@pytest.fixture
def lab(tmp_path):
    root = tmp_path / "course"
    shutil.copytree(NOTEBOOKS, root / "notebooks",
                    ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with LabServer(root, tmp_path / "scratch", settings=TEST_SETTINGS,
                   extra=["--LabApp.expose_app_in_browser=True"]) as server:
        yield server
    left = [p for p in psutil.Process().children(recursive=True) if p.pid not in before]
    psutil.wait_procs(left, timeout=10)
    left = [p for p in left if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not left, f"processes left behind: {[(p.pid, p.name()) for p in left]}"


def test_a_notebook_runs_in_jupyterlab_with_plots_and_a_live_widget(lab):
    # one notebook: 04 has several plots and the course's slider; every notebook's cells are
    # run by nbval, so running more of them here would only repeat that, slowly
    with browser_page() as page:
        open_and_run_all(page, lab, "04_optim.ipynb")
        assert len(loaded_images(page)) >= 2, "04: the plots did not load"
        # The explorer's cell: a slider, then the figure it redraws in place.
        cell = page.locator(".jp-CodeCell", has=page.locator(".widget-slider")).last
        slider = cell.locator(".widget-slider").first
        slider.wait_for(timeout=20_000)
        readout = cell.locator(".widget-readout").first
        before_value = readout.inner_text()
        before_plot = loaded_images(page, ".jp-CodeCell:has(.widget-slider)")
        assert before_plot, "04: the explorer shows no plot below its slider"

        slider.locator(".noUi-handle").first.focus()
        page.keyboard.press("ArrowRight")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            after_plot = loaded_images(page, ".jp-CodeCell:has(.widget-slider)")
            if after_plot and after_plot != before_plot:
                break
            time.sleep(0.25)
        assert readout.inner_text() != before_value, "the slider's value did not move"
        assert after_plot and after_plot != before_plot, \
            "moving the slider did not redraw the plot below it"
        cell.scroll_into_view_if_needed()
        path = screenshot(page, "lab_04_optim.png")
        print(f"screenshot: {path}")

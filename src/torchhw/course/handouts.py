"""HTML handouts: a static site of the executed course that works with no network.

    torchhw handouts                        # build/handouts/ from the committed notebooks
    torchhw handouts --from runs/<stamp>    # from the executed notebooks of a run
    torchhw handouts 04 --out /tmp/site     # some notebooks only, elsewhere

The site has ``index.html`` (the contents: each notebook and its sections) and one page per
notebook with its outputs: plots are embedded in the page, and widgets render from the state
saved in the notebook. nbconvert's pages load the widget renderer and require.js from CDNs,
so offline the widgets show nothing, and MathJax from another, so every formula would show as
TeX source; here all three are served from the site's ``_static/``. They come from the npm
registry once (exact versions below, checked by npm against the registry's integrity hash)
and are cached in ``build/vendor/``. MathJax is the 2.7 line that nbconvert's templates are
written for, and only what its TeX input and CommonHTML output load is kept (about 3 MB).
"""

from __future__ import annotations

import html
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Sequence

from .paths import find_root

# npm package -> (exact version, file inside the package). html-manager 1.x renders the
# widget state of ipywidgets 8 (model version 2.0.0).
VENDOR = {
    "@jupyter-widgets/html-manager": ("1.0.15", "dist/embed-amd.js"),
    "requirejs": ("2.3.8", "require.js"),
}
MATHJAX = ("mathjax", "2.7.9")
# what MathJax.js?config=TeX-AMS_CHTML-full,Safe loads at run time (its own loader fetches
# these relative to MathJax.js); the package's other outputs, fonts and languages are left out
MATHJAX_FILES = ("MathJax.js", "config/TeX-AMS_CHTML-full.js", "extensions/",
                 "jax/input/TeX/", "jax/output/CommonHTML/", "jax/element/",
                 "fonts/HTML-CSS/TeX/woff/")
MATHJAX_URL = "_static/mathjax/MathJax.js?config=TeX-AMS_CHTML-full,Safe"
NOTEBOOK_LINK = re.compile(r'href="((?:\.\./notebooks/)?(\d\d_[a-z0-9_]+))\.ipynb(#[^"]*)?"')
HEADING = re.compile(r'<h([12]) id="([^"]+)">(.*?)<a class="anchor-link"', re.S)


class HandoutError(RuntimeError):
    """The site could not be built: what is missing and how to get it."""


def vendor_files(cache: Path | None = None) -> dict[str, Path]:
    """The renderer and require.js on local disk, fetched with ``npm pack`` on first use."""
    cache = cache or find_root() / "build" / "vendor"
    found = {}
    for package, (version, member) in VENDOR.items():
        target = cache / f"{package.replace('/', '__')}-{version}" / Path(member).name
        if not target.exists():
            with tempfile.TemporaryDirectory() as tmp:
                with tarfile.open(_npm_pack(package, version, Path(tmp))) as tar:
                    data = tar.extractfile(f"package/{member}")
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(data.read())
        found[package] = target
    return found


def _npm_pack(package: str, version: str, into: Path) -> Path:
    npm = shutil.which("npm")
    if not npm:
        raise HandoutError(
            f"{package}@{version} is needed once for offline handouts and npm is not "
            f"installed: install Node.js and npm (Debian: apt-get install npm)")
    done = subprocess.run([npm, "pack", f"{package}@{version}", "--silent",
                           "--pack-destination", str(into)], capture_output=True, text=True)
    tarballs = list(into.glob("*.tgz"))
    if done.returncode != 0 or not tarballs:
        raise HandoutError(f"`npm pack {package}@{version}` failed (is the npm registry "
                           f"reachable?):\n{done.stderr[-1500:]}")
    return tarballs[0]


def vendor_mathjax(cache: Path | None = None) -> Path:
    """MathJax's folder on local disk (the files it loads, see MATHJAX_FILES), fetched once."""
    package, version = MATHJAX
    target = (cache or find_root() / "build" / "vendor") / f"{package}-{version}"
    if not (target / "MathJax.js").exists():
        with tempfile.TemporaryDirectory() as tmp:
            with tarfile.open(_npm_pack(package, version, Path(tmp))) as tar:
                wanted = [m for m in tar.getmembers() if m.isfile() and
                          m.name.removeprefix("package/").startswith(MATHJAX_FILES)]
                partial = target.with_name(target.name + ".partial")
                shutil.rmtree(partial, ignore_errors=True)
                for member in wanted:
                    out = partial / member.name.removeprefix("package/")
                    out.parent.mkdir(parents=True, exist_ok=True)
                    out.write_bytes(tar.extractfile(member).read())
                partial.rename(target)  # complete or absent, never half there
    return target


def title_of(nb) -> str:
    first = nb.cells[0].source.splitlines()[0] if nb.cells else ""
    return first.lstrip("# ").strip() or "untitled"


def convert(path: Path, out: Path, renderer: str, require: str) -> tuple[str, list[tuple[str, str]]]:
    """Write ``out`` (HTML) for the notebook at ``path``; return its title and its sections.
    A notebook of the Chinese edition (``metadata.torchhw.lang``) becomes a page in Chinese."""
    import nbformat
    from nbconvert import HTMLExporter

    nb = nbformat.read(path, as_version=4)
    exporter = HTMLExporter(template_name="lab", widget_renderer_url=renderer,
                            require_js_url=require, mathjax_url=MATHJAX_URL)
    body, _ = exporter.from_notebook_node(nb, resources={"metadata": {"name": path.stem}})
    lang = language_of(nb)
    if lang != "en":
        body = re.sub(r"<html\b[^>]*>", f'<html lang="{lang}">', body, count=1)
    # links between notebooks point at their pages
    body = NOTEBOOK_LINK.sub(lambda m: f'href="{m.group(2)}.html{m.group(3) or ""}"', body)
    out.write_text(body, encoding="utf-8")
    sections = [(anchor, re.sub(r"<[^>]+>", "", text).strip())
                for level, anchor, text in HEADING.findall(body) if level == "2"]
    return title_of(nb), sections


def language_of(nb) -> str:
    """The edition a notebook belongs to: "zh" for notebooks/zh/, else "en"."""
    return nb.metadata.get("torchhw", {}).get("lang", "en")


INDEX_TEXT = {
    "en": ("torchhw: PyTorch on real hardware",
           "The course's notebooks with the outputs of one run. Plots are embedded and widgets "
           "show the state they were saved in; nothing here needs a network.", "Contents"),
    "zh": ("torchhw：在真实硬件上学 PyTorch",
           "本课程的笔记本及其一次运行的输出。图表已嵌入页面，交互控件显示保存时的状态；"
           "阅读这些页面不需要网络。", "目录"),
}


def index_page(entries: list[tuple[str, str, list[tuple[str, str]]]], lang: str = "en") -> str:
    heading, intro, contents = INDEX_TEXT.get(lang, INDEX_TEXT["en"])
    items = []
    for page, title, sections in entries:
        subs = "".join(f'<li><a href="{page}#{html.escape(anchor, quote=True)}">'
                       f"{html.escape(text)}</a></li>" for anchor, text in sections)
        items.append(f'<li><a href="{page}">{html.escape(title)}</a><ul>{subs}</ul></li>')
    return f"""<!DOCTYPE html>
<html lang="{lang}"><head><meta charset="utf-8">
<title>{html.escape(heading)}</title>
<style>body{{font-family:sans-serif;max-width:48em;margin:2em auto;line-height:1.5}}
ul ul{{font-size:90%}}</style></head>
<body><h1>{html.escape(heading)}</h1>
<p>{html.escape(intro)}</p>
<h2>{contents}</h2><ol>{''.join(items)}</ol></body></html>
"""


def build(out: Path, source: Path | None = None, names: Sequence[str] = (),
          echo=print) -> Path:
    """Build the site in ``out`` (replaced) from the notebooks in ``source``; return its index."""
    from .paths import discover, notebooks_dir, select

    start = time.perf_counter()
    source = notebooks_dir(source)
    paths = select(discover(source), names)
    if not paths:
        raise HandoutError(f"{source} holds no notebooks named NN_topic.ipynb")
    vendor = vendor_files()
    if out.exists():
        shutil.rmtree(out)
    (out / "_static").mkdir(parents=True)
    for file in vendor.values():
        shutil.copy2(file, out / "_static" / file.name)
    shutil.copytree(vendor_mathjax(), out / "_static" / "mathjax")
    renderer = "_static/" + vendor["@jupyter-widgets/html-manager"].name
    require = "_static/" + vendor["requirejs"].name
    entries = []
    for path in paths:
        page = f"{path.stem}.html"
        title, sections = convert(path, out / page, renderer, require)
        entries.append((page, title, sections))
        echo(f"{page}: {title}", flush=True)
    import nbformat

    index = out / "index.html"
    lang = language_of(nbformat.read(paths[0], as_version=4))
    index.write_text(index_page(entries, lang), encoding="utf-8")
    echo(f"handouts: {index} ({len(paths)} notebooks, {time.perf_counter() - start:.1f} s)")
    return index

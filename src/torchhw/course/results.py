"""The results page: every report card as a row, in Markdown and in one offline HTML file.

    torchhw cards                          # reference/cards/ into build/results/
    torchhw cards runs/ my-card.json --out site/

Each row is one machine: what it is, the clock its peaks used, each peak beside the best rate a
search over shapes found and the rate measured at one size, memory bandwidth, the tuner's gain,
the capstone's throughput, and what the card's checks marked. A file that is not a valid card is
listed under "Refused" with the reason, not dropped in silence. The plot sets every machine's
best fp32 and bf16 rates against their peaks. The HTML embeds the plot, so the page works
offline and can be mailed as one file.
"""

from __future__ import annotations

import argparse
import base64
import html
import io
from pathlib import Path
from typing import Any, Sequence

from .. import cards as cardlib

COLUMNS = ("date", "machine", "device", "cores", "clock GHz", "fp32 peak", "fp32 best",
           "fp32 at n=512", "bf16 peak", "bf16 best", "bf16 at n=512", "memory GB/s",
           "tuning gain", "capstone ex/s", "torch", "measured by", "marked")


def gather(paths: Sequence[str | Path]) -> tuple[list[dict[str, Any]], list[tuple[str, str]]]:
    """Cards from files and folders (a folder: its ``*.json``, or its run folder's card.json),
    oldest first, and the (path, reason) of each file refused."""
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir() and not (p / "card.json").is_file():
            files += sorted(p.glob("*.json")) + sorted(p.glob("*/card.json"))
        else:
            files.append(p)
    good, refused = [], []
    for f in files:
        try:
            good.append(cardlib.load(f))
        except cardlib.CardError as err:
            refused.append((str(f), str(err)))
    good.sort(key=lambda c: (c["created"], c["machine"]["name"]))
    return good, refused


def _widest(isa: Sequence[str]) -> str:
    """The widest vector or matrix instructions a CPU has, as one label."""
    for flag in ("AMX BF16", "AVX-512 BF16", "AVX-512", "AVX2", "SVE", "NEON"):
        if flag in isa:
            return flag
    return "no vector flags reported"


def _num(value: Any, digits: int = 0) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}"


def row(card: dict[str, Any]) -> dict[str, str]:
    """A card's cells, by column."""
    m, peak, measured, best = card["machine"], card["peak"], card["measured"], card["best"]
    clock = m.get("clock") or {}
    tuning, capstone = card["tuning"] or {}, card["capstone"] or {}
    if card["kind"] == "cpu":
        machine, device = m["name"], f"cpu, {_widest(m['isa'])}"
        cores = str(m.get("physical_cores") or m["logical_cores"])
        ghz = f"{clock['ghz']:.2f} {clock['kind']}" if clock.get("ghz") else "-"
    else:   # the device's own figures; the host CPU in brackets
        hw = cardlib.hardware(card)
        name = hw.get("GPU") or hw.get("chip") or card["device"]
        machine, device = f"{name} (host: {m['name']})", card["device"]
        cores = f"{hw['SMs']} SMs" if hw.get("SMs") else "-"
        ghz = f"{hw['SM clock GHz']:.2f} SM" if hw.get("SM clock GHz") else "-"
    return {
        "date": card["created"],
        "machine": machine,
        "device": device,
        "cores": cores,
        "clock GHz": ghz,
        "fp32 peak": _num(peak.get("fp32_gflops")),
        "fp32 best": _num(best.get("float32", {}).get("gflops")),
        "fp32 at n=512": _num(measured.get("fp32_gflops")),
        "bf16 peak": _num(peak.get("bf16_gflops")),
        "bf16 best": _num(best.get("bfloat16", {}).get("gflops")),
        "bf16 at n=512": _num(measured.get("bf16_gflops")),
        "memory GB/s": _num(measured.get("bandwidth_gbps"), 1),
        "tuning gain": (f"{tuning['gain']:.2f}x ({tuning['recommended_trial']})" if tuning else "-"),
        "capstone ex/s": _num(capstone.get("throughput")),
        "torch": m.get("torch") or "-",
        "measured by": card["method"]["by"],
        "marked": "; ".join(f.get("short") or f["item"] for f in card.get("findings", [])),
    }


def plot(found: Sequence[dict[str, Any]]) -> Any:
    """Best (else measured) fp32 and bf16 GFLOP/s per machine, with each peak as a tick."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    labels = [f"{c['machine']['name']}\n{c['device'][:28]}, {c['created']}" for c in found]
    fig, ax = plt.subplots(figsize=(8, 1.6 + 0.9 * max(len(found), 1)))
    y = np.arange(len(found))
    for j, (dtype, key, colour) in enumerate((("float32", "fp32_gflops", "tab:blue"),
                                              ("bfloat16", "bf16_gflops", "tab:orange"))):
        rates = [c["best"].get(dtype, {}).get("gflops") or c["measured"].get(key) or 0 for c in found]
        offset = y + (j - 0.5) * 0.38
        ax.barh(offset, rates, 0.38, color=colour, label=f"{dtype}: best over shapes (else n=512)")
        peaks = [c["peak"].get(key) for c in found]
        ax.plot([p for p in peaks if p], [o for o, p in zip(offset, peaks) if p], "k|",
                markersize=12, label="derived peak" if j == 0 else None)
    ax.set_yticks(y, labels, fontsize=7)
    ax.set_xscale("log")
    ax.set_xlabel("GFLOP/s (log scale)")
    ax.set_title("matmul: best rate found against the derived peak, per machine", fontsize=9)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.25), ncol=3, frameon=False)
    ax.invert_yaxis()
    fig.tight_layout()
    return fig


def markdown(found: Sequence[dict[str, Any]], refused: Sequence[tuple[str, str]],
             image: str | None = "results.png") -> str:
    lines = ["# torchhw results: what each machine achieved", "",
             f"{len(found)} report card{'s' if len(found) != 1 else ''}, one row per card "
             f"(GFLOP/s unless said). *peak*: derived from cores x FLOP per cycle x the clock in "
             f"the clock column; *best*: the best rate a search over matmul shapes found; "
             f"*at n=512*: one square product (a GPU's at n=4096). Add your machine: see the "
             f"README, \"Your machine's report card\".", ""]
    if image:
        lines += [f"![best rates against peaks]({image})", ""]
    lines += ["| " + " | ".join(COLUMNS) + " |", "|" + "|".join("---" for _ in COLUMNS) + "|"]
    for c in found:
        r = row(c)
        lines.append("| " + " | ".join(r[k].replace("|", "/") for k in COLUMNS) + " |")
    if refused:
        lines += ["", "## Refused", ""]
        for p, why in refused:
            first, *rest = why.splitlines()
            lines.append(f"- `{p}`: {first}" + (f" {rest[0].strip()}" if rest else "") +
                         (f" (and {len(rest) - 1} more)" if len(rest) > 1 else ""))
    return "\n".join(lines) + "\n"


def html_page(found: Sequence[dict[str, Any]], refused: Sequence[tuple[str, str]], png: bytes) -> str:
    rows = "\n".join("<tr>" + "".join(f"<td>{html.escape(row(c)[k])}</td>" for k in COLUMNS) + "</tr>"
                     for c in found)
    head = "".join(f"<th>{html.escape(k)}</th>" for k in COLUMNS)
    gone = "".join(f"<li><code>{html.escape(p)}</code>: <pre>{html.escape(why)}</pre></li>"
                   for p, why in refused)
    image = base64.b64encode(png).decode()
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>torchhw results</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; color: #222; }}
table {{ border-collapse: collapse; font-size: 0.85em; }}
th, td {{ border: 1px solid #ccc; padding: 0.3em 0.5em; vertical-align: top; }}
th {{ background: #f2f2f2; }} td:nth-child(n+4) {{ text-align: right; }}
td:nth-last-child(-n+3) {{ text-align: left; }} pre {{ white-space: pre-wrap; }}
</style></head><body>
<h1>torchhw results: what each machine achieved</h1>
<p>{len(found)} report cards, one row per card (GFLOP/s unless said). <em>peak</em>: cores x FLOP
per cycle x the clock in the clock column; <em>best</em>: the best rate a search over matmul shapes
found; <em>at n=512</em>: one square product (a GPU's at n=4096). Add your machine: see the README,
"Your machine's report card".</p>
<img alt="best rates against peaks" src="data:image/png;base64,{image}">
<table><thead><tr>{head}</tr></thead><tbody>
{rows}
</tbody></table>
{"<h2>Refused</h2><ul>" + gone + "</ul>" if refused else ""}
</body></html>
"""


def build(paths: Sequence[str | Path], out: str | Path
          ) -> tuple[dict[str, Path], list[dict[str, Any]], list[tuple[str, str]]]:
    """Write ``results.md``, ``results.png`` and ``results.html`` into ``out``; return the
    paths written, the cards and the refused files."""
    found, refused = gather(paths)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    import matplotlib.pyplot as plt

    fig = plot(found)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    plt.close(fig)
    png = buffer.getvalue()
    written = {"png": out / "results.png", "md": out / "results.md", "html": out / "results.html"}
    written["png"].write_bytes(png)
    written["md"].write_text(markdown(found, refused))
    written["html"].write_text(html_page(found, refused, png))
    return written, found, refused


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="torchhw cards", description="a results page of report cards")
    parser.add_argument("paths", nargs="*", type=Path,
                        help="cards, folders of cards, run folders (default: reference/cards)")
    parser.add_argument("--out", type=Path, default=Path("build/results"))
    args = parser.parse_args(argv)
    paths = args.paths or [Path("reference/cards")]
    missing = [p for p in paths if not p.exists()]
    if missing:
        print(f"torchhw cards: error: no such file or folder: {', '.join(map(str, missing))}")
        return 2
    written, found, refused = build(paths, args.out)
    print(f"{len(found)} cards, {len(refused)} refused")
    for path, why in refused:
        print(f"refused {path}: {why}")
    for path in written.values():
        print(f"wrote {path}")
    return 0

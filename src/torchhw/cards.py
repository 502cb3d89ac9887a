"""Report cards: what one machine achieved, in a JSON file you can set beside another's.

Notebook 10 ends by building this machine's card; ``reference/cards/`` in the repository
holds dated cards from known machines. Comparing two cards shows, side by side, the
hardware, peak against measured, each tuning knob's gain and the capstone's figures, and
explains the differences by the hardware (cores, instruction sets, memory bandwidth):

    card = cards.build(report, peaks=..., measured=..., tuning=result, capstone=...)
    path = cards.save(card, "reference/cards")      # 2026-11-30_intel-xeon-2c.json
    cards.compare(cards.load(a), cards.load(b))      # a table; .plot() draws it

    torchhw compare A.json B.json [--plot out.png]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any, Sequence

VERSION = 1
REQUIRED = ("version", "created", "machine", "peak", "measured", "tuning", "capstone")


class CardError(ValueError):
    """A file is not a report card this version can read."""


def machine_summary(report: Any) -> dict[str, Any]:
    """The hardware facts a comparison needs, from :func:`torchhw.hardware.report`."""
    from .hardware import ISA_FLAGS, cpu_short_name

    c = report.cpu
    return {
        "name": cpu_short_name(c),
        "cpu": c.model,
        "vendor": c.vendor,
        "arch": c.arch,
        "logical_cores": c.logical_cores,
        "physical_cores": c.physical_cores,
        "clock_ghz": c.clock_ghz,
        "isa": [ISA_FLAGS[k] for k, v in c.isa.items() if v],
        "torch_kernels": c.torch_capability,
        "caches": c.caches,
        "memory_gib": round(report.memory_gib, 1),
        "gpus": [{"name": g.name, "memory_gib": round(g.memory_gib, 1),
                  "compute_capability": g.compute_capability} for g in report.gpus],
        "torch": report.torch_build.get("torch"),
        "threads": report.torch_build.get("intra-op threads"),
        # how busy the machine was while the card's figures were measured: a loaded machine
        # measures low and noisy, and a comparison should say so
        "load_average": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
    }


def build(report: Any, *, device: str, peaks: dict[str, float | None],
          measured: dict[str, float], tuning: Any, capstone: dict[str, Any],
          created: str | None = None) -> dict[str, Any]:
    """A card as a plain dict. ``tuning`` is a :class:`torchhw.tune.TuneResult` or its dict.

    ``peaks`` and ``measured`` hold GFLOP/s and GB/s by name (e.g. ``fp32_gflops``,
    ``bandwidth_gbps``); ``capstone`` holds throughput, accuracy, time to accuracy and the
    gain over the untuned baseline.
    """
    tune = tuning.to_dict() if hasattr(tuning, "to_dict") else dict(tuning)
    gains = {t["name"]: t["speedup"] for t in tune["trials"] if len(t["knobs"]) == 1}
    return {
        "version": VERSION,
        "created": created or date.today().isoformat(),
        "device": device,
        "machine": machine_summary(report),
        "peak": dict(peaks),
        "measured": dict(measured),
        "tuning": {"recommended": tune["recommended"], "recommended_trial": tune["recommended_trial"],
                   "gain": tune["gain"], "knob_gains": gains, "reasons": tune["reasons"]},
        "capstone": dict(capstone),
    }


def slug(name: str) -> str:
    """'Intel(R) Xeon(R) Processor, 2 cores' -> 'intel-xeon-processor-2-cores'."""
    text = re.sub(r"\((r|tm)\)", "", name.lower())
    return re.sub(r"[^a-z0-9]+", "-", text).strip("-")


def save(card: dict[str, Any], folder: str | Path, name: str | None = None) -> Path:
    """Write ``card`` as ``<folder>/<created>_<machine>.json`` (or ``name``); return the path."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    name = name or f"{card['created']}_{slug(card['machine']['name'])}.json"
    path = folder / name
    path.write_text(json.dumps(card, indent=1, sort_keys=False) + "\n")
    return path


def load(path: str | Path) -> dict[str, Any]:
    """Read a card, refusing a file that is not one (with what is missing)."""
    path = Path(path)
    try:
        card = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise CardError(f"{path}: cannot read it as JSON ({err})") from None
    missing = [k for k in REQUIRED if not isinstance(card, dict) or k not in card]
    if missing:
        raise CardError(f"{path} is not a torchhw report card: it lacks {', '.join(missing)}. "
                        f"Cards are written by notebook 10 (torchhw.cards.save).")
    if card["version"] > VERSION:
        raise CardError(f"{path} is a version {card['version']} card; this torchhw reads up "
                        f"to version {VERSION}: upgrade torchhw")
    card.setdefault("path", str(path))
    return card


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:,.3g}" if abs(value) < 100 else f"{value:,.0f}"
    if isinstance(value, (list, tuple)):
        return ", ".join(map(str, value)) or "none"
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items()) or "none"
    return str(value)


def _ratio(a: Any, b: Any) -> str:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool) \
            and a and b and math.isfinite(a) and math.isfinite(b):
        return f"{b / a:.2f}x"
    return ""


@dataclass
class Comparison:
    """Two cards side by side: rows grouped by section, and the differences explained."""

    a: dict[str, Any]
    b: dict[str, Any]

    def label(self, card: dict[str, Any]) -> str:
        return f"{card['machine']['name']} ({card['device']}, {card['created']})"

    def rows(self) -> list[tuple[str, str, str, str, str]]:
        """(section, item, A, B, B/A) in reading order."""
        a, b = self.a, self.b
        out: list[tuple[str, str, str, str, str]] = []
        for key in ("cpu", "physical_cores", "clock_ghz", "isa", "torch_kernels", "memory_gib",
                    "gpus", "torch", "threads", "load_average"):
            va, vb = a["machine"].get(key), b["machine"].get(key)
            if key == "gpus":
                va = [g["name"] for g in va or []] or "none"
                vb = [g["name"] for g in vb or []] or "none"
            out.append(("hardware", key, _fmt(va), _fmt(vb),
                        _ratio(va, vb) if key in ("physical_cores", "clock_ghz", "memory_gib") else ""))
        for section in ("peak", "measured"):
            for key in sorted(set(a[section]) | set(b[section])):
                va, vb = a[section].get(key), b[section].get(key)
                out.append((section, key, _fmt(va), _fmt(vb), _ratio(va, vb)))
        ga, gb = a["tuning"]["knob_gains"], b["tuning"]["knob_gains"]
        for key in list(ga) + [k for k in gb if k not in ga]:
            out.append(("knob gain", key, _fmt(ga.get(key)), _fmt(gb.get(key)), ""))
        out.append(("tuning", "recommended", a["tuning"]["recommended_trial"],
                    b["tuning"]["recommended_trial"], ""))
        out.append(("tuning", "gain", _fmt(a["tuning"]["gain"]), _fmt(b["tuning"]["gain"]), ""))
        for key in list(a["capstone"]) + [k for k in b["capstone"] if k not in a["capstone"]]:
            va, vb = a["capstone"].get(key), b["capstone"].get(key)
            out.append(("capstone", key, _fmt(va), _fmt(vb), _ratio(va, vb)))
        return out

    def explain(self) -> list[str]:
        """Why the figures differ, read from the hardware: cores, ISA, bandwidth, GPUs."""
        ma, mb = self.a["machine"], self.b["machine"]
        lines = []
        ca, cb = ma.get("physical_cores") or ma["logical_cores"], mb.get("physical_cores") or mb["logical_cores"]
        if ca != cb:
            lines.append(f"cores: {ca} against {cb}. Compute-bound work (large matmuls, "
                         f"convolutions) scales with cores, so expect up to {cb / ca:.2g}x from "
                         f"that alone; small steps scale less.")
        only_a = sorted(set(ma["isa"]) - set(mb["isa"]))
        only_b = sorted(set(mb["isa"]) - set(ma["isa"]))
        for who, flags in (("A", only_a), ("B", only_b)):
            if flags:
                half = [f for f in flags if "BF16" in f or "AMX" in f or "FP16" in f]
                why = (" With these, bf16 has native instructions there, so bf16 autocast and "
                       "the bf16 peak gain there and lose elsewhere." if half else "")
                lines.append(f"instruction sets only {who} has: {', '.join(flags)}.{why}")
        bwa, bwb = self.a["measured"].get("bandwidth_gbps"), self.b["measured"].get("bandwidth_gbps")
        if bwa and bwb:
            lines.append(f"memory bandwidth: {bwa:,.1f} against {bwb:,.1f} GB/s ({bwb / bwa:.2f}x). "
                         f"Memory-bound work (element-wise ops, small batches, data loading) "
                         f"follows this ratio rather than the cores.")
        ga, gb = ma.get("gpus") or [], mb.get("gpus") or []
        if bool(ga) != bool(gb):
            who = "A" if ga else "B"
            lines.append(f"only {who} has a GPU: GPU-only knobs (TF32, cudnn.benchmark, fp16 "
                         f"with GradScaler) apply there and are 'not applicable' on the other.")
        for who, m in (("A", ma), ("B", mb)):
            load, cores = m.get("load_average"), m.get("logical_cores") or 1
            if load is not None and load > 0.75 * cores:
                lines.append(f"{who} was measured on a busy machine (load average {load:.1f} on "
                             f"{cores} cores): its timings are low and noisy, and thread counts "
                             f"above the free cores lose. Measure again when it is quiet.")
        work_a, work_b = self.a["capstone"].get("model"), self.b["capstone"].get("model")
        if work_a != work_b:
            lines.append(f"the capstones trained different workloads ({work_a} against {work_b}): "
                         f"their capstone rows compare the workloads as much as the machines.")
        if self.a["device"] != self.b["device"]:
            lines.append(f"the capstone ran on {self.a['device']} against {self.b['device']}.")
        same = (ca == cb and not only_a and not only_b and bool(ga) == bool(gb)
                and ma["cpu"] == mb["cpu"])
        if same:
            lines.insert(0, "the two machines report the same hardware: differences are noise, "
                            "load from other programs, or software versions.")
        return lines

    def __str__(self) -> str:
        head = ("section", "item", "A", "B", "B/A")
        rows = [head] + self.rows()
        widths = [min(max(len(r[i]) for r in rows), 40) for i in range(5)]
        lines = [f"A: {self.label(self.a)}", f"B: {self.label(self.b)}", ""]
        lines += ["  ".join(c[:40].ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
        lines += ["", "Why they differ:"] + [f"- {line}" for line in self.explain()]
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_markdown_(self) -> str:
        lines = [f"**A:** {self.label(self.a)}  ", f"**B:** {self.label(self.b)}", "",
                 "| section | item | A | B | B/A |", "|---|---|---|---|--:|"]
        lines += ["| " + " | ".join(r) + " |" for r in self.rows()]
        lines += ["", "**Why they differ:**", ""] + [f"- {line}" for line in self.explain()]
        return "\n".join(lines)

    def plot(self, path: str | Path | None = None) -> Any:
        """Two panels: peak against measured rates, and each knob's gain, per machine."""
        import matplotlib.pyplot as plt
        import numpy as np

        fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.4))
        names = [f"{who}: {self.label(c)}"[:40] for who, c in (("A", self.a), ("B", self.b))]
        rates = sorted(set(self.a["peak"]) | set(self.a["measured"]) |
                       set(self.b["peak"]) | set(self.b["measured"]))
        x = np.arange(len(rates))
        for i, card in enumerate((self.a, self.b)):
            offset = x + (i - 0.5) * 0.4
            left.bar(offset, [card["measured"].get(k) or 0 for k in rates], 0.4, label=names[i])
            peaks = [card["peak"].get(k) for k in rates]
            left.plot([o for o, p in zip(offset, peaks) if p], [p for p in peaks if p], "k_",
                      markersize=14, label="peak" if i == 0 else None)
        left.set_xticks(x, [r.replace("_", " ") for r in rates], rotation=30, ha="right",
                        fontsize=8)
        left.set_yscale("log")
        left.set_title("measured (bars) against peak (lines)")
        left.legend(fontsize=7)
        knobs = [k for k in self.a["tuning"]["knob_gains"]] + \
                [k for k in self.b["tuning"]["knob_gains"] if k not in self.a["tuning"]["knob_gains"]]
        x = np.arange(len(knobs))
        for i, card in enumerate((self.a, self.b)):
            gains = [card["tuning"]["knob_gains"].get(k) or 0 for k in knobs]
            right.bar(x + (i - 0.5) * 0.4, gains, 0.4, label=names[i][:1])
        right.axhline(1.0, color="black", lw=1)
        right.set_xticks(x, [k.replace("=True", "") for k in knobs], rotation=30, ha="right",
                         fontsize=8)
        right.set_title("each knob alone (x baseline; 0: not measured)")
        right.legend(fontsize=7)
        fig.tight_layout()
        if path:
            fig.savefig(path)
        return fig


def compare(a: dict[str, Any], b: dict[str, Any]) -> Comparison:
    """Set two cards side by side (A first). Show it, print it, or call ``.plot()``."""
    return Comparison(a, b)


def main(argv: Sequence[str] | None = None) -> int:
    """``torchhw compare A.json B.json [--plot FILE]``: the table, the reasons, a plot."""
    parser = argparse.ArgumentParser(prog="torchhw compare",
                                     description="set two report cards side by side")
    parser.add_argument("a", type=Path)
    parser.add_argument("b", type=Path)
    parser.add_argument("--plot", type=Path, help="also save the comparison plot here (PNG)")
    args = parser.parse_args(argv)
    try:
        comparison = compare(load(args.a), load(args.b))
    except CardError as err:
        print(f"torchhw compare: error: {err}")
        return 2
    print(comparison)
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        comparison.plot(args.plot)
        print(f"\nplot: {args.plot}")
    return 0

"""Report cards: what one machine achieved, in a JSON file you can set beside another's.

Notebook 10 ends by building this machine's card, ``torchhw card`` measures one in under a
minute without the course, and every ``torchhw run`` leaves one in its run folder.
``reference/cards/`` in the repository holds dated cards from known machines. A card keeps the
hardware, the derived peaks with the clock they used, the measured rates, the best matmul rate a
search over shapes found (:mod:`torchhw.achievable`), each tuning knob's gain and the capstone's
figures. Comparing two cards shows them side by side and explains the differences by the hardware
of each device kind:

    card = cards.build(report, device="cpu", peaks=..., measured=..., tuning=result, capstone=...)
    path = cards.save(card, "reference/cards")      # 2026-11-30_intel-xeon-processor-2-cores.json
    cards.compare(cards.load(a), cards.load(b))      # a table; .plot() draws it

    torchhw card [--out DIR]                   this machine's card, measured
    torchhw compare A B [--plot out.png]       A and B: cards, run folders or run reports
    torchhw cards [FOLDER ...] [--out DIR]     a results page: a row per machine

Every card is checked against ``card.schema.json`` (in this package) when it is written and when
it is read, and for plausibility: a rate more than 1.15x a peak derived from a measured clock, or a
bandwidth above the memory's theoretical rate, is impossible, and the card is refused; a rate above
a peak derived from a reported (base) clock, and a card measured on a busy machine, are marked
(``card["findings"]``), and comparisons and the results page say so.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import time
from dataclasses import dataclass
from datetime import date
from functools import cache
from pathlib import Path
from typing import Any, Sequence

VERSION = 2
SCHEMA = Path(__file__).with_name("card.schema.json")
# how far a measured rate may exceed a peak derived from a measured clock before the card is
# refused: the clock measurement varies by a few percent between runs (the boost a virtual
# machine's host gives), and the rate's timing by as much again
TOLERANCE = 1.15
BANDWIDTH_TOLERANCE = 1.05  # a measured bandwidth against the theoretical rate: rounding only
MAX_GHZ = 6.5               # no CPU core runs faster (the fastest boost to about 6.2 GHz)
MAX_GFLOPS = 5e6            # 5 PFLOP/s: above any single device in any dtype (2026)
MAX_GBPS = {"cpu": 2000.0, "mps": 1000.0, "cuda": 10000.0, "xpu": 10000.0}  # memory, per kind
BUSY = 0.10  # share of the CPUs other programs used above which a card is marked busy
KINDS = ("cpu", "cuda", "mps", "xpu")
# a search's dtypes (card["best"]) against the rates' names (card["peak"], card["measured"])
_DTYPE_KEYS = {"float32": "fp32_gflops", "bfloat16": "bf16_gflops", "float16": "fp16_gflops"}
_KEY_DTYPES = {key: dtype for dtype, key in _DTYPE_KEYS.items()}


class CardError(ValueError):
    """A file is not a report card this version can read, or holds an impossible figure."""


def machine_summary(report: Any) -> dict[str, Any]:
    """The hardware facts a comparison needs, from :func:`torchhw.hardware.survey`."""
    from .hardware import ISA_FLAGS, cpu_short_name

    c = report.cpu
    clock = getattr(report, "clock", None)
    return {
        "name": cpu_short_name(c),
        "cpu": c.model,
        "vendor": c.vendor,
        "arch": c.arch,
        "logical_cores": c.logical_cores,
        "physical_cores": c.physical_cores,
        "clock_ghz": c.clock_ghz,
        "clock": clock.to_dict() if clock is not None else
        {"ghz": c.clock_ghz, "kind": "reported" if c.clock_ghz else "unknown", "source": c.clock_source},
        "isa": [ISA_FLAGS[k] for k, v in c.isa.items() if v],
        "torch_kernels": c.torch_capability,
        "caches": c.caches,
        "memory_gib": round(report.memory_gib, 1),
        "gpus": [{"name": g.name, "memory_gib": round(g.memory_gib, 1),
                  "compute_capability": g.compute_capability, "sm_count": g.sm_count,
                  "memory_gbps": getattr(g, "memory_gbps", None),
                  "clock_ghz": getattr(g, "clock_ghz", None)} for g in report.gpus],
        "torch": report.torch_build.get("torch"),
        "threads": report.torch_build.get("intra-op threads"),
    }


def kind_of(device: str) -> str:
    """'cuda:0 (NVIDIA H100 ...)' -> 'cuda'."""
    kind = re.split(r"[:\s(]", device.strip(), maxsplit=1)[0].lower()
    if kind not in KINDS:
        raise CardError(f"device {device!r} is not one of {', '.join(KINDS)}")
    return kind


def build(report: Any, *, device: str, peaks: dict[str, Any], measured: dict[str, float],
          tuning: Any = None, capstone: dict[str, Any] | None = None, best: Any = None,
          method: dict[str, Any] | None = None, created: str | None = None) -> dict[str, Any]:
    """A card as a plain dict, its findings included (:func:`findings`).

    ``peaks`` holds :class:`torchhw.peak.Peak` objects (or GFLOP/s numbers) by name
    (``fp32_gflops``, ``bf16_gflops``; ``bandwidth_gbps`` for the memory's theoretical rate);
    ``measured`` the rates measured, by the same names; ``best`` a
    :class:`torchhw.achievable.Search` or its dict; ``tuning`` a :class:`torchhw.tune.TuneResult`
    or its dict; ``capstone`` the capstone's throughput, accuracy, time to accuracy and gain;
    ``method`` what measured it (``by``, ``quick``, ``busy``: :func:`torchhw.bench.cpu_busy`).
    """
    from . import __version__

    machine = machine_summary(report)
    peak_values, basis, peak_clock, per_cycle = {}, {}, None, {}
    for key, value in peaks.items():
        if hasattr(value, "gflops"):  # a Peak
            peak_values[key] = value.gflops
            basis[key] = value.basis
            if getattr(value, "flops_per_cycle", None):
                per_cycle[key] = value.flops_per_cycle
            if getattr(value, "clock", None) is not None and value.gflops is not None:
                peak_clock = value.clock.to_dict()
        else:
            peak_values[key] = value
    card = {
        "version": VERSION,
        "created": created or date.today().isoformat(),
        "device": device,
        "kind": kind_of(device),
        "machine": machine,
        "method": {"by": "torchhw.cards.build", "quick": None, "threads": machine["threads"],
                   "busy": None, "torchhw": __version__, **(method or {})},
        "peak": peak_values,
        "peak_basis": basis,
        "measured": dict(measured),
        "best": (best.to_dict() if hasattr(best, "to_dict") else dict(best or {})),
        "tuning": _tuning(tuning),
        "capstone": dict(capstone) if capstone is not None else None,
    }
    if peak_clock is not None:
        card["peak_clock"] = peak_clock
    if per_cycle:
        card["peak_per_cycle"] = per_cycle
    card["findings"] = findings(card)
    return card


def _tuning(tuning: Any) -> dict[str, Any] | None:
    if tuning is None:
        return None
    tune = tuning.to_dict() if hasattr(tuning, "to_dict") else dict(tuning)
    gains = {t["name"]: t["speedup"] for t in tune["trials"] if len(t["knobs"]) == 1}
    return {"recommended": tune["recommended"], "recommended_trial": tune["recommended_trial"],
            "gain": tune["gain"], "knob_gains": gains, "reasons": tune["reasons"]}


def upgrade(card: dict[str, Any]) -> dict[str, Any]:
    """A version 1 card (notebook 10 before the measured clock) as version 2, figures unchanged.

    Its peaks used the clock the OS reported, its load average was read after the notebook's
    own work (so it counts that work too), and it has no search over shapes.
    """
    if card.get("version") != 1:
        return card
    card = json.loads(json.dumps(card))
    m = card["machine"]
    m["clock"] = {"ghz": m.get("clock_ghz"), "kind": "reported" if m.get("clock_ghz") else "unknown",
                  "source": "reported by the OS (a version 1 card)"}
    card["version"] = VERSION
    card["kind"] = kind_of(card["device"])
    card["method"] = {"by": "notebook 10 (a version 1 card)", "quick": None,
                      "threads": m.get("threads"), "busy": None, "torchhw": None}
    card["peak_clock"] = m["clock"]
    card["peak_basis"] = {k: f"cores x FLOP/cycle x {m.get('clock_ghz') or 0:.2f} GHz reported"
                          for k, v in card["peak"].items() if v}
    card["best"] = {}
    card["findings"] = findings(card)
    return card


@cache
def _validator() -> Any:
    import jsonschema

    schema = json.loads(SCHEMA.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def schema_errors(card: Any) -> list[str]:
    """What in ``card`` breaks ``card.schema.json``: a line each, with where (empty: valid)."""
    errors = sorted(_validator().iter_errors(card), key=lambda e: list(map(str, e.absolute_path)))
    return [f"{'/'.join(map(str, e.absolute_path)) or '(top)'}: {e.message}" for e in errors]


def _rates_against_peaks(card: dict[str, Any]) -> list[tuple[str, float, float]]:
    """(item, rate, peak) for every measured or searched rate that has a peak."""
    out = []
    for key, rate in card["measured"].items():
        if rate and card["peak"].get(key):
            out.append((f"measured {key}", rate, card["peak"][key]))
    for dtype, found in card.get("best", {}).items():
        key = _DTYPE_KEYS.get(dtype)
        if key and card["peak"].get(key):
            out.append((f"best {dtype}", found["gflops"], card["peak"][key]))
    return out


def _numbers(value: Any, where: str = "") -> list[tuple[str, float]]:
    """Every number in a card, with where it is, to find what JSON Schema cannot: NaN, inf."""
    if isinstance(value, bool):
        return []
    if isinstance(value, (int, float)):
        return [(where, float(value))]
    if isinstance(value, dict):
        return [n for k, v in value.items() for n in _numbers(v, f"{where}/{k}" if where else str(k))]
    if isinstance(value, list):
        return [n for i, v in enumerate(value) for n in _numbers(v, f"{where}/{i}")]
    return []


def _refuse(item: str, short: str, text: str) -> dict[str, str]:
    return {"level": "refused", "item": item, "short": short, "text": text}


def _consistency(card: dict[str, Any]) -> list[dict[str, str]]:
    """Impossible on any machine: non-finite numbers, a device and a kind that disagree, more
    physical cores than logical ones, a clock no core reaches, a rate or bandwidth above any
    device's."""
    out = []
    for where, number in _numbers(card):
        if not math.isfinite(number):
            out.append(_refuse(where, f"{where} is {number}", f"{where} is {number}: a figure must "
                               f"be a finite number (a measurement that failed writes null)."))
    try:
        if kind_of(card["device"]) != card["kind"]:
            out.append(_refuse("kind", "kind and device disagree",
                               f"kind {card['kind']!r} but device {card['device']!r}: one of them is wrong."))
    except CardError as err:
        out.append(_refuse("device", "unknown device", str(err)))
    m = card["machine"]
    if (m.get("physical_cores") or 0) > m["logical_cores"]:
        out.append(_refuse("machine cores", "more physical than logical cores",
                           f"{m['physical_cores']} physical cores but {m['logical_cores']} logical "
                           f"ones: every physical core is at least one logical core."))
    for where, clk in (("machine clock", m.get("clock") or {}), ("peak_clock", card.get("peak_clock") or {})):
        ghz = clk.get("ghz")
        if ghz and ghz > MAX_GHZ:
            out.append(_refuse(where, f"{ghz:.1f} GHz clock",
                               f"{where} says {ghz:.2f} GHz: no CPU core runs above about "
                               f"{MAX_GHZ} GHz. The clock was mismeasured or mistyped."))
    rates = [(f"measured {k}", v) for k, v in card["measured"].items() if v] + \
            [(f"best {d}", b["gflops"]) for d, b in card.get("best", {}).items()]
    limit = MAX_GBPS.get(card["kind"], max(MAX_GBPS.values()))
    for item, value in rates:
        if not math.isfinite(value):
            continue
        if item.endswith("gbps") and value > limit:
            out.append(_refuse(item, f"{value:,.0f} GB/s", f"{value:,.0f} GB/s is above what any "
                               f"{card['kind']} memory moves ({limit:,.0f} GB/s): the buffer stayed "
                               f"in a cache, or the timing is wrong."))
        elif not item.endswith("gbps") and value > MAX_GFLOPS:
            out.append(_refuse(item, f"{value:,.0f} GFLOP/s", f"{value:,.0f} GFLOP/s is above any "
                               f"single device in any dtype ({MAX_GFLOPS:,.0f}): the timing ended "
                               f"before the work did (a GPU not synchronised?) or the FLOP count is wrong."))
    return out


def findings(card: dict[str, Any]) -> list[dict[str, str]]:
    """What is implausible about ``card``: ``refused`` (impossible) or ``marked`` (explained)."""
    out = _consistency(card)
    clock = card.get("peak_clock") or card["machine"].get("clock") or {}
    for item, rate, top in _rates_against_peaks(card):
        ratio = rate / top
        if not (math.isfinite(ratio) and math.isfinite(rate)):
            continue
        name = item.split()[-1]
        basis = card.get("peak_basis", {}).get(_DTYPE_KEYS.get(name, name), "cores x FLOP/cycle x clock")
        if item.endswith("bandwidth_gbps"):
            if ratio > BANDWIDTH_TOLERANCE:
                out.append(_refuse(item, f"{ratio:.2f}x the theoretical bandwidth",
                                   f"{rate:,.1f} GB/s is {ratio:.2f}x the memory's theoretical "
                                   f"{top:,.1f} GB/s: no memory moves faster than its theoretical rate. The "
                                   f"buffer probably fitted in a cache (measure with a larger one: "
                                   f"bench.beyond_cache) or the theoretical rate is wrong."))
            continue
        if ratio <= TOLERANCE:
            continue
        implied = (clock.get("ghz") or 0) * ratio
        if clock.get("kind") in ("measured", "given", "boost") or implied > MAX_GHZ:
            why = ("whose clock was measured" if clock.get("kind") == "measured" else
                   f"which would need the cores at {implied:.1f} GHz" if implied > MAX_GHZ else
                   f"whose clock is the {clock.get('kind')} one")
            out.append(_refuse(item, f"{item} {ratio:.2f}x its peak",
                               f"{rate:,.1f} GFLOP/s is {ratio:.2f}x the derived peak {top:,.1f} "
                               f"({basis}), {why}: more than {TOLERANCE}x is impossible. Either the "
                               f"FLOP per cycle torchhw.peak assumes for this CPU is too low (report the CPU "
                               f"with this card) or the timing is wrong (measure again: torchhw card)."))
        else:
            out.append({"level": "marked", "item": item,
                        "short": f"{item} {ratio:.2f}x the peak from the reported clock: cores at {implied:.2f} GHz or more",
                        "text": f"{rate:,.1f} GFLOP/s is {ratio:.2f}x the peak {top:,.1f}, which used the "
                        f"{clock.get('ghz') or 0:.2f} GHz clock the OS reports ({clock.get('kind', 'reported')}): "
                        f"the cores ran at {implied:.2f} GHz or more. The peak is a roof drawn too "
                        f"low, not a rate too high."})
    busy = card.get("method", {}).get("busy")
    if busy is not None and busy > BUSY:
        out.append({"level": "marked", "item": "method busy", "short": f"busy: others used {busy:.0%} of the CPUs", "text":
                    f"measured while other programs used {busy:.0%} of the CPUs: its rates are "
                    f"low and noisy, the load's as much as the machine's. Measure again when quiet."})
    load, cores = card["machine"].get("load_average"), card["machine"].get("logical_cores") or 1
    if busy is None and load is not None and load > 0.75 * cores:
        out.append({"level": "marked", "item": "machine load_average", "short": f"load average {load:.1f} on {cores} cores", "text":
                    f"load average {load:.1f} on {cores} cores when the card was written (it counts "
                    f"the notebook's own work too): the machine may have been busy."})
    return out


def check(card: Any, where: str = "card") -> dict[str, Any]:
    """Validate ``card`` (schema, then plausibility); return it with its findings refreshed.

    Raises :class:`CardError` saying what is wrong: every schema error, or every impossible
    figure with what to do about it.
    """
    errors = schema_errors(card)
    if errors:
        raise CardError(f"{where} does not match the card schema ({SCHEMA.name}, version "
                        f"{VERSION}):\n  " + "\n  ".join(errors[:12]) +
                        (f"\n  ... and {len(errors) - 12} more" if len(errors) > 12 else ""))
    card["findings"] = findings(card)
    refused = [f for f in card["findings"] if f["level"] == "refused"]
    if refused:
        raise CardError(f"{where} holds an impossible figure, so it is refused:\n  " +
                        "\n  ".join(f"{f['item']}: {f['text']}" for f in refused))
    return card


def slug(name: str) -> str:
    """'Intel(R) Xeon(R) Processor, 2 cores' -> 'intel-xeon-processor-2-cores'."""
    text = re.sub(r"\((r|tm)\)", "", name.lower())
    return re.sub(r"[^a-z0-9]+", "-", text).strip("-")


def file_name(card: dict[str, Any]) -> str:
    """``<created>_<machine>[_<device>].json``: the device is named where it is not the CPU, so a
    GPU node's CPU card and its GPU card get two names."""
    name = f"{card['created']}_{slug(card['machine']['name'])}"
    if card.get("kind", "cpu") != "cpu":
        gpu = _gpu(card) if card.get("kind") in ("cuda", "xpu") else None
        name += f"_{card['kind']}-{slug(gpu['name'])}" if gpu else f"_{card['kind']}"
    return name + ".json"


def save(card: dict[str, Any], folder: str | Path, name: str | None = None) -> Path:
    """Check ``card`` and write it into ``folder``; return the path.

    Without ``name`` it is written as :func:`file_name`, and never over another file: a second
    card of the same machine on the same day gets ``-2``, ``-3``... (a reference card is not
    replaced by accident). A ``name`` given is written as given, replacing what was there
    (``torchhw run`` keeps its run's card as ``card.json``). A card that fails the check is not
    written under that name: it is kept beside it as ``NAME.refused`` (so nothing measured is
    lost) and :class:`CardError` says why.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if name:
        path = folder / name
    else:
        path = folder / file_name(card)
        n = 2
        while path.exists():
            path = folder / f"{file_name(card)[:-5]}-{n}.json"
            n += 1
    text = json.dumps({k: v for k, v in card.items() if k != "path"}, indent=1) + "\n"
    try:
        check(card, str(path))
    except CardError as err:
        kept = path.with_name(path.name + ".refused")
        kept.write_text(text)
        raise CardError(f"{err}\nThe card was kept as {kept} and not written as {path.name}.") from None
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    return path


def resolve(path: str | Path) -> tuple[Path, dict[str, Any] | None]:
    """Where the card is for ``path``: a card file; a run folder (its ``card.json``); a run's
    ``report.json`` (the ``card.json`` beside it, else the card notebook 10 recorded in it)."""
    path = Path(path)
    if path.is_dir():
        card = path / "card.json"
        if card.is_file():
            return card, None
        raise CardError(f"{path} is a folder without card.json: a run folder of `torchhw run` "
                        f"holds one (runs before cards were written do not; measure one with "
                        f"`torchhw card`)")
    if path.name == "report.json" and path.is_file():
        beside = path.with_name("card.json")
        if beside.is_file():
            return beside, None
        try:
            report = json.loads(path.read_text())
            for nb in report.get("notebooks", []):
                recorded = nb.get("measurements", {}).get("capstone card")
                if recorded:
                    return path, recorded["value"]
        except (OSError, ValueError, AttributeError):
            pass
        raise CardError(f"{path} is a run report without a card: neither card.json beside it "
                        f"nor notebook 10's card in it (did notebook 10 run and pass?)")
    return path, None


def references(start: str | Path | None = None) -> list[dict[str, Any]]:
    """The reference cards of the course checkout around ``start`` (default: the current
    folder): ``reference/cards/*.json`` in the nearest folder at or above it that has one, so a
    notebook finds them from notebooks/ and from notebooks/zh/ alike. None on Colab or in an
    installed copy without the repository: an empty list."""
    here = Path(start or Path.cwd()).resolve()
    for folder in [here, *here.parents]:
        cards = folder / "reference" / "cards"
        if cards.is_dir():
            return [load(p) for p in sorted(cards.glob("*.json"))]
    return []


def load(path: str | Path) -> dict[str, Any]:
    """Read a card (a card file, a run folder or a run report), upgraded to this version and
    checked; refuse, saying what is wrong, a file that is not a card or holds an impossible figure."""
    path, card = resolve(path)
    if card is None:
        try:
            card = json.loads(Path(path).read_text())
        except (OSError, ValueError) as err:
            raise CardError(f"{path}: cannot read it as JSON ({err})") from None
    if not isinstance(card, dict) or not isinstance(card.get("version"), int):
        raise CardError(f"{path} is not a torchhw report card: it has no version. Cards are "
                        f"written by notebook 10, `torchhw card` and `torchhw run`.")
    if card["version"] > VERSION:
        raise CardError(f"{path} is a version {card['version']} card; this torchhw reads up "
                        f"to version {VERSION}: upgrade torchhw")
    if card["version"] == 1:
        missing = [k for k in ("created", "device", "machine", "peak", "measured", "tuning",
                               "capstone") if k not in card]
        if missing:
            raise CardError(f"{path} is not a torchhw report card: it lacks {', '.join(missing)}.")
        card = upgrade(card)
    card = check(card, str(path))
    card["path"] = str(path)
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


def _ratio(a: Any, b: Any, seconds: bool = False) -> str:
    """B/A; for a time (``seconds``: lower is better) it says which of the two took longer."""
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool) \
            and a and b and math.isfinite(a) and math.isfinite(b):
        if seconds:
            return f"{b / a:.2f}x" + (", B longer" if b > a else ", B shorter" if b < a else "")
        return f"{b / a:.2f}x"
    return ""


def _cores(m: dict[str, Any]) -> int:
    return m.get("physical_cores") or m["logical_cores"]


def _gpu(card: dict[str, Any]) -> dict[str, Any] | None:
    """The GPU the card's figures ran on (the first listed), on a cuda or xpu card."""
    gpus = card["machine"].get("gpus") or []
    if card["kind"] not in ("cuda", "xpu") or not gpus:
        return None
    index = re.match(r"\w+:(\d+)", card["device"])
    i = int(index.group(1)) if index else 0
    return gpus[i] if i < len(gpus) else gpus[0]


def _cc(gpu: dict[str, Any] | None) -> tuple[int, int] | None:
    try:
        major, minor = str((gpu or {}).get("compute_capability")).split(".")
        return int(major), int(minor)
    except ValueError:
        return None


def _formats(cc: tuple[int, int] | None) -> list[str]:
    """The tensor-core formats of an NVIDIA compute capability."""
    if cc is None:
        return []
    out = ["fp16 tensor cores"] if cc >= (7, 0) else []
    if cc >= (8, 0):
        out += ["bf16", "TF32"]
    if cc >= (8, 9):
        out += ["fp8"]
    return out


def hardware(card: dict[str, Any]) -> dict[str, Any]:
    """The facts of the device a card ran on that set its rates, by device kind.

    CPU: cores, clock, instruction sets, torch's kernels, memory. CUDA/XPU GPU: its name,
    compute capability, tensor-core formats, SMs, memory size and theoretical bandwidth.
    Apple MPS: the chip and its unified memory (the GPU shares the machine's memory).
    """
    m, kind = card["machine"], card["kind"]
    if kind == "cpu":
        clock = m.get("clock") or {}
        l3 = (m.get("caches") or {}).get("L3")
        return {"CPU": m["cpu"], "cores": _cores(m), "clock GHz": clock.get("ghz"),
                "clock kind": clock.get("kind"), "reported clock GHz": m.get("clock_ghz"),
                "fp32 FLOP/cycle per core": _per_cycle(card, "fp32_gflops"),
                "instruction sets": sorted(m["isa"]), "torch kernels": m.get("torch_kernels"),
                "L3 MiB": round(l3 / 2**20) if l3 else None, "memory GiB": m["memory_gib"]}
    if kind == "mps":
        return {"chip": m["cpu"], "unified memory GiB": m["memory_gib"], "cores": _cores(m)}
    gpu = _gpu(card) or {}
    cc = _cc(gpu)
    return {"GPU": gpu.get("name"), "compute capability": gpu.get("compute_capability"),
            "tensor-core formats": _formats(cc) if kind == "cuda" else [],
            "SMs": gpu.get("sm_count"), "SM clock GHz": gpu.get("clock_ghz"),
            "memory GiB": gpu.get("memory_gib"),
            "memory GB/s (theoretical)": gpu.get("memory_gbps")}


def _per_cycle(card: dict[str, Any], key: str) -> float | None:
    """FLOP per cycle per core the card's peak assumed: recorded, or worked back from the peak."""
    recorded = card.get("peak_per_cycle", {}).get(key)
    if recorded:
        return recorded
    m, top = card["machine"], card["peak"].get(key)
    ghz = (card.get("peak_clock") or m.get("clock") or {}).get("ghz")
    cores = min(m.get("threads") or _cores(m), _cores(m))
    return round(top / (cores * ghz)) if top and ghz and cores else None


def _peak_ratio(a: dict[str, Any], b: dict[str, Any], key: str) -> float | None:
    pa, pb = a["peak"].get(key), b["peak"].get(key)
    return pb / pa if pa and pb else None


def _expected(a: dict[str, Any], b: dict[str, Any], key: str) -> tuple[float | None, str]:
    """The ratio B/A the hardware explains for ``key``, and from what."""
    if key.endswith("bandwidth_gbps"):
        ga, gb = _gpu(a), _gpu(b)
        if ga and gb and ga.get("memory_gbps") and gb.get("memory_gbps"):
            return gb["memory_gbps"] / ga["memory_gbps"], "the theoretical memory bandwidths"
        ratio = _peak_ratio(a, b, key)
        return (ratio, "the theoretical memory bandwidths") if ratio else (None, "")
    ratio = _peak_ratio(a, b, key)
    if ratio:
        return ratio, "the derived peaks"
    if a["kind"] == b["kind"] == "cpu" and sorted(a["machine"]["isa"]) == sorted(b["machine"]["isa"]):
        ca, cb = a["machine"].get("clock") or {}, b["machine"].get("clock") or {}
        if ca.get("ghz") and cb.get("ghz"):
            return (_cores(b["machine"]) * cb["ghz"]) / (_cores(a["machine"]) * ca["ghz"]), \
                "cores x clock (same instruction sets)"
    return None, ""


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
        ha, hb = hardware(a), hardware(b)
        for key in list(ha) + [k for k in hb if k not in ha]:
            va, vb = ha.get(key), hb.get(key)
            numeric = key in ("cores", "clock GHz", "memory GiB", "SMs", "unified memory GiB",
                              "memory GB/s (theoretical)", "SM clock GHz", "L3 MiB",
                              "fp32 FLOP/cycle per core", "reported clock GHz")
            out.append(("hardware", key, _fmt(va), _fmt(vb), _ratio(va, vb) if numeric else ""))
        out.append(("software", "torch", _fmt(a["machine"].get("torch")), _fmt(b["machine"].get("torch")), ""))
        out.append(("software", "threads", _fmt(a["machine"].get("threads")), _fmt(b["machine"].get("threads")), ""))
        out.append(("method", "measured by", a["method"]["by"], b["method"]["by"], ""))
        out.append(("method", "busy (others' CPU share)", _fmt(a["method"].get("busy")),
                    _fmt(b["method"].get("busy")), ""))
        for section in ("peak", "measured"):
            for key in sorted(set(a[section]) | set(b[section])):
                va, vb = a[section].get(key), b[section].get(key)
                out.append((section, key, _fmt(va), _fmt(vb), _ratio(va, vb)))
        for dtype in sorted(set(a["best"]) | set(b["best"])):
            va, vb = a["best"].get(dtype, {}).get("gflops"), b["best"].get(dtype, {}).get("gflops")
            out.append(("best matmul", f"{dtype} GFLOP/s", _fmt(va), _fmt(vb), _ratio(va, vb)))
        ta, tb = a["tuning"] or {}, b["tuning"] or {}
        ga, gb = ta.get("knob_gains", {}), tb.get("knob_gains", {})
        for key in list(ga) + [k for k in gb if k not in ga]:
            out.append(("knob gain", key, _fmt(ga.get(key)), _fmt(gb.get(key)), ""))
        if ta or tb:
            out.append(("tuning", "recommended", ta.get("recommended_trial", "-"),
                        tb.get("recommended_trial", "-"), ""))
            out.append(("tuning", "gain", _fmt(ta.get("gain")), _fmt(tb.get("gain")), ""))
        ca, cb = a["capstone"] or {}, b["capstone"] or {}
        for key in list(ca) + [k for k in cb if k not in ca]:
            va, vb = ca.get(key), cb.get(key)
            # a time (..._s) is better lower: its ratio says which card took longer
            out.append(("capstone", key, _fmt(va), _fmt(vb), _ratio(va, vb, key.endswith("_s"))))
        return out

    def explain(self) -> list[str]:
        """Why the figures differ: each difference in the hardware of the two devices (never a
        fact they share), each measured ratio against the ratio the hardware explains (flagged
        when it is off by more than a quarter), and what makes a card's figures doubtful."""
        a, b = self.a, self.b
        lines: list[str] = []
        ha, hb = hardware(a), hardware(b)
        differ = {k for k in set(ha) | set(hb) if ha.get(k) != hb.get(k)}
        if a["kind"] != b["kind"]:
            lines.append(f"the devices are of different kinds: A ran on {a['device']}, B on "
                         f"{b['device']}. Every rate below compares one device with the other, "
                         f"not two machines of one kind.")
        elif a["kind"] == "cpu":
            lines += self._cpu(ha, hb, differ)
        elif a["kind"] == "mps":
            if differ:
                lines.append(f"chips: {ha['chip']} against {hb['chip']}, with {ha['unified memory GiB']} "
                             f"and {hb['unified memory GiB']} GiB of unified memory, which CPU and GPU "
                             f"share (no copies over a bus; the GPU may use most of it).")
            lines.append("an Apple card records the chip's name, memory and CPU cores only: two Macs "
                         "of one name can differ in GPU cores and memory bandwidth (an M3 Max has 30 "
                         "or 40 GPU cores), so the cards cannot tell every difference in hardware.")
        else:
            lines += self._gpu(ha, hb, differ)
        if a["kind"] == b["kind"] != "mps" and not differ:
            lines.append("the two devices report the same hardware: the differences below are "
                         "noise, load from other programs, or software versions.")
        lines += self._against_hardware()
        ga, gb = a["machine"].get("gpus") or [], b["machine"].get("gpus") or []
        if bool(ga) != bool(gb) and (a["tuning"] or b["tuning"]):
            who = "A" if ga else "B"
            lines.append(f"only {who} has a GPU: GPU-only knobs (TF32, cudnn.benchmark, fp16 with "
                         f"GradScaler) apply there and are 'not applicable' on the other.")
        ta, tb = (a["machine"].get("torch"), b["machine"].get("torch"))
        if ta != tb:
            lines.append(f"torch differs ({ta} against {tb}): kernels change between versions, "
                         f"so a gap the hardware does not explain may be software.")
        ca, cb = a["capstone"] or {}, b["capstone"] or {}
        if a["capstone"] and b["capstone"] and not same_workload(a, b):
            lines.append(f"the capstones trained different workloads ({ca.get('model')} against "
                         f"{cb.get('model')}): their capstone rows compare the workloads as much "
                         f"as the machines.")
        elif a["capstone"] and b["capstone"]:
            sizes = [(what, ca.get(key), cb.get(key)) for what, key in
                     (("training examples", "train_examples"), ("epochs", "epochs"),
                      ("batch size", "batch_size"))
                     if ca.get(key) and cb.get(key) and ca.get(key) != cb.get(key)]
            if sizes:
                lines.append(f"the capstones trained the same model on runs of different length "
                             f"({'; '.join(f'{w} {x:,} against {y:,}' for w, x, y in sizes)}): "
                             f"throughput (examples per second) and the gains compare the machines, "
                             f"but time to accuracy depends as much on how many examples each "
                             f"run trained before its first validation at the target.")
        for who, card in (("A", a), ("B", b)):
            for f in card.get("findings", []):
                lines.append(f"{who}, {f['item']}: {f['text']}")
        return lines

    def _cpu(self, ha: dict[str, Any], hb: dict[str, Any], differ: set[str]) -> list[str]:
        lines = []
        if "cores" in differ:
            lines.append(f"cores: {ha['cores']} against {hb['cores']}. Compute-bound work (large "
                         f"matmuls, convolutions) scales with cores, up to {hb['cores'] / ha['cores']:.2g}x "
                         f"from that alone; small steps scale less.")
        key = "fp32 FLOP/cycle per core"
        if key in differ and ha[key] and hb[key]:
            lines.append(f"vector width: {ha[key]:g} against {hb[key]:g} fp32 FLOP per cycle per core "
                         f"(the FMA units the peaks assume): {hb[key] / ha[key]:.2f}x the arithmetic "
                         f"per cycle, from the cores' design, not their clock.")
        if "L3 MiB" in differ and ha["L3 MiB"] and hb["L3 MiB"]:
            lines.append(f"L3 cache: {ha['L3 MiB']} against {hb['L3 MiB']} MiB: a working set between "
                         f"the two fits in one and not the other.")
        if "clock GHz" in differ and ha["clock GHz"] and hb["clock GHz"]:
            ratio = hb["clock GHz"] / ha["clock GHz"]
            sure = ha["clock kind"] == hb["clock kind"] == "measured"
            lines.append(f"clock: {ha['clock GHz']:.2f} GHz ({ha['clock kind']}) against "
                         f"{hb['clock GHz']:.2f} GHz ({hb['clock kind']}): " +
                         (f"every core does {ratio:.2f}x the work per second" +
                          (". The CPU, its cores and instruction sets are the same, so this is the "
                           "boost each run found (the host's load, temperature, a cloud's other "
                           "tenants), not other hardware." if not differ & {
                               "CPU", "cores", "instruction sets", "L3 MiB", "reported clock GHz",
                               "fp32 FLOP/cycle per core"}
                           else ".") if sure else
                          f"{ratio:.2f}x, but a reported clock is often the base clock, below what "
                          f"the cores run at, so the real ratio is not known from the cards."))
        only_a = sorted(set(ha["instruction sets"]) - set(hb["instruction sets"]))
        only_b = sorted(set(hb["instruction sets"]) - set(ha["instruction sets"]))
        for who, flags in (("A", only_a), ("B", only_b)):
            if flags:
                wide = " AVX-512 doubles the vector width of AVX2." if "AVX-512" in flags else ""
                lines.append(f"instruction sets only {who} has: {', '.join(flags)}.{wide}"
                             f"{self._half_precision(who, flags)}")
        if "torch kernels" in differ:
            lines.append(f"torch picks {ha['torch kernels']} kernels on A and {hb['torch kernels']} "
                         f"on B (torch.backends.cpu.get_cpu_capability()).")
        if "CPU" in differ and not (lines or {"cores", "clock GHz"} & differ):
            lines.append(f"the CPUs' names differ ({ha['CPU']} against {hb['CPU']}) but nothing "
                         f"torch uses does.")
        return lines

    def _half_precision(self, who: str, flags: Sequence[str]) -> str:
        """What the cards show of native bf16/fp16 instructions only ``who`` has: the
        instructions could make its bf16 (fp16) work faster relative to its fp32 work; whether
        they did is read from the two cards' figures, never assumed."""
        mine, other = (self.a, self.b) if who == "A" else (self.b, self.a)
        out = ""
        for dtype, knob, names in (("bf16", "autocast=bfloat16", ("BF16", "AMX")),
                                   ("fp16", "autocast=float16", ("FP16",))):
            native = [f for f in flags if any(n in f for n in names)]
            if not native:
                continue
            evidence, votes = [], []

            def relative(card: dict[str, Any]) -> float | None:
                rate, base = card["measured"].get(f"{dtype}_gflops"), card["measured"].get("fp32_gflops")
                return rate / base if rate and base else None

            ra, rb = relative(mine), relative(other)
            if ra and rb:
                evidence.append(f"{dtype} matmul {ra:.2f}x its fp32 rate on {who}, {rb:.2f}x on "
                                f"the other")
                votes.append(ra > rb)
            ga = ((mine["tuning"] or {}).get("knob_gains") or {}).get(knob)
            gb = ((other["tuning"] or {}).get("knob_gains") or {}).get(knob)
            if ga and gb:
                evidence.append(f"{knob} {ga:.2f}x alone on {who}, {gb:.2f}x on the other")
                votes.append(ga > gb)
            out += (f" {', '.join(native)} " +
                    (f"is a native {dtype} instruction set, which" if len(native) == 1 else
                     f"are native {dtype} instruction sets, which") +
                    f" can make {dtype} work faster against fp32 on {who}")
            if not votes:
                out += f"; the cards hold no {dtype} figures that tell whether they did."
            elif all(votes):
                out += f"; the cards show it: {'; '.join(evidence)}."
            elif not any(votes):
                out += (f"; the cards show the opposite ({'; '.join(evidence)}): here they did "
                        f"not decide the figures, and the cards cannot tell what did (torch's "
                        f"kernels for these shapes, the clock, the load).")
            else:
                out += (f"; the cards are mixed ({'; '.join(evidence)}): what they add is not "
                        f"clear from these figures.")
        return out

    def _gpu(self, ha: dict[str, Any], hb: dict[str, Any], differ: set[str]) -> list[str]:
        lines = []
        if "GPU" in differ:
            lines.append(f"GPUs: {ha['GPU']} against {hb['GPU']}.")
        if "compute capability" in differ:
            fa, fb = set(ha["tensor-core formats"]), set(hb["tensor-core formats"])
            extra = [f"{who} alone has {', '.join(sorted(s))}" for who, s in (("A", fa - fb), ("B", fb - fa)) if s]
            lines.append(f"compute capability {ha['compute capability']} against "
                         f"{hb['compute capability']}" + (f": {'; '.join(extra)}, so the dtypes "
                                                          f"and knobs that use them gain there only." if extra else "."))
        if "SMs" in differ and ha["SMs"] and hb["SMs"]:
            same_arch = ha["compute capability"] == hb["compute capability"]
            lines.append(f"SMs: {ha['SMs']} against {hb['SMs']} ({hb['SMs'] / ha['SMs']:.2f}x)" +
                         (": within one architecture, compute-bound kernels scale with SMs x clock."
                          if same_arch else
                          ". What one SM does per cycle differs between architectures (an A100's "
                          "SM has 64 fp32 lanes, an H100's 128), so this ratio is not a ratio of "
                          "throughput."))
        if "SM clock GHz" in differ and ha["SM clock GHz"] and hb["SM clock GHz"]:
            lines.append(f"SM clock (the maximum the GPU reports): {ha['SM clock GHz']:.2f} against "
                         f"{hb['SM clock GHz']:.2f} GHz.")
        key = "memory GB/s (theoretical)"
        if key in differ and ha[key] and hb[key]:
            lines.append(f"memory bandwidth (theoretical): {ha[key]:,.0f} against {hb[key]:,.0f} GB/s "
                         f"({hb[key] / ha[key]:.2f}x): memory-bound work follows this ratio.")
        if "memory GiB" in differ:
            lines.append(f"memory: {ha['memory GiB']} against {hb['memory GiB']} GiB: the largest "
                         f"model and batch that fit.")
        return lines

    def _against_hardware(self) -> list[str]:
        """Each rate's ratio B/A against the ratio the hardware explains."""
        a, b = self.a, self.b
        if a["kind"] != b["kind"]:
            return []
        lines = []
        pairs = [(f"measured {k}", k, a["measured"].get(k), b["measured"].get(k))
                 for k in sorted(set(a["measured"]) & set(b["measured"]))]
        pairs += [(f"best {d}", _DTYPE_KEYS.get(d, d), a["best"][d]["gflops"], b["best"][d]["gflops"])
                  for d in sorted(set(a["best"]) & set(b["best"]))]
        doubt = [who for who, c in (("A", a), ("B", b))
                 if (c.get("peak_clock") or c["machine"].get("clock") or {}).get("kind") not in ("measured", "given")]
        for item, key, va, vb in pairs:
            if not (va and vb):
                continue
            got = vb / va
            want, basis = _expected(a, b, key)
            if want is None:
                if a["kind"] in ("cuda", "xpu", "mps") and not key.endswith("bandwidth_gbps"):
                    lines.append(f"{item}: B/A {got:.2f}x. No FLOP peak is derived for a GPU here "
                                 f"(no table of what each architecture's units do per cycle), so "
                                 f"how much of this the hardware explains is not known from the cards.")
                    continue
                if key.endswith("bandwidth_gbps"):
                    lines.append(f"{item}: {va:,.1f} against {vb:,.1f} GB/s ({got:.2f}x). Memory-"
                                 f"bound work (element-wise ops, small batches, data loading) "
                                 f"follows this ratio rather than the cores. Neither card knows "
                                 f"its memory's theoretical rate, so the hardware behind it is not "
                                 f"known from the cards.")
                continue
            uncertain = (f" {' and '.join(doubt)} used the clock the OS reports, which may be "
                         f"the base clock, so that ratio is uncertain." if doubt and basis == "the derived peaks" else "")
            if abs(math.log(got / want)) <= math.log(1.25):
                lines.append(f"{item}: B/A {got:.2f}x, as the hardware explains ({want:.2f}x, {basis}).{uncertain}")
                continue
            share = ""
            pa, pb = a["peak"].get(key), b["peak"].get(key)
            if pa and pb and not key.endswith("bandwidth_gbps"):
                share = (f" A reaches {va / pa:.0%} of its peak, B {vb / pb:.0%}: the gap is in how "
                         f"close each comes to its peak (a product too small for the units, which "
                         f"the best over shapes shows; the clock under vector load; load from other "
                         f"programs; software: torch, its kernels, the thread count).")
            lines.append(f"{item}: B/A is {got:.2f}x where the hardware explains {want:.2f}x "
                         f"({basis}): a gap the hardware does not explain.{share or ' Load, software or the measurement: measure both again.'}{uncertain}")
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
        """Two panels: peak, best and measured rates, and each knob's gain, per machine."""
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
            best = [card["best"].get(_KEY_DTYPES.get(k, ""), {}).get("gflops") for k in rates]
            left.plot([o for o, v in zip(offset, best) if v], [v for v in best if v], "kv",
                      markersize=5, label="best over shapes" if i == 0 else None)
        left.set_xticks(x, [r.replace("_", " ") for r in rates], rotation=30, ha="right",
                        fontsize=8)
        left.set_yscale("log")
        left.set_title("measured (bars), best (triangles), peak (lines)", fontsize=9)
        left.legend(fontsize=7)
        ga = (self.a["tuning"] or {}).get("knob_gains", {})
        gb = (self.b["tuning"] or {}).get("knob_gains", {})
        knobs = list(ga) + [k for k in gb if k not in ga]
        x = np.arange(len(knobs))
        for i, gains in enumerate((ga, gb)):
            right.bar(x + (i - 0.5) * 0.4, [gains.get(k) or 0 for k in knobs], 0.4, label=names[i][:1])
        right.axhline(1.0, color="black", lw=1)
        right.set_xticks(x, [k.replace("=True", "") for k in knobs], rotation=30, ha="right",
                         fontsize=8)
        right.set_title("each knob alone (x baseline; 0: not measured)", fontsize=9)
        if knobs:
            right.legend(fontsize=7)
        fig.tight_layout()
        if path:
            fig.savefig(path)
        return fig


def distance(a: dict[str, Any], b: dict[str, Any]) -> float:
    """How unlike two cards' hardware is: device kind, chip, instruction sets, cores, memory."""
    if a["kind"] != b["kind"]:
        return 100.0
    ha, hb = hardware(a), hardware(b)
    score = 0.0
    for key, value in ha.items():
        other = hb.get(key)
        if isinstance(value, list):
            score += len(set(value) ^ set(other or []))
        elif isinstance(value, (int, float)) and isinstance(other, (int, float)) and value and other:
            score += abs(math.log2(other / value))
        elif value != other:
            score += 1.0
    return score


def same_workload(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two cards' capstones trained the same model on the same data (their ``model``
    names agree); False where either card has no capstone. Their runs may differ in length
    (epochs, copies of the data): :meth:`Comparison.explain` says so."""
    ca, cb = a.get("capstone") or {}, b.get("capstone") or {}
    return bool(ca.get("model")) and ca.get("model") == cb.get("model")


def most_unlike(mine: dict[str, Any], others: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The card in ``others`` whose hardware is most unlike ``mine`` (newest first on a tie)."""
    if not others:
        raise CardError("no cards to choose from")
    return max(sorted(others, key=lambda c: c["created"], reverse=True),
               key=lambda c: distance(mine, c))


def compare(a: dict[str, Any], b: dict[str, Any]) -> Comparison:
    """Set two cards side by side (A first). Show it, print it, or call ``.plot()``."""
    return Comparison(a, b)


def rates(device: Any, threads: int, caches: dict[str, int] | None = None) -> dict[str, float]:
    """The rates a card measures on ``device``: fp32 matmul, bf16 where it has a fast kernel,
    and memory bandwidth over a buffer larger than the caches."""
    import torch

    from . import bench

    device = torch.device(device)
    n = 512 if device.type == "cpu" else bench.GPU_ROOF_N
    out = {"fp32_gflops": bench.matmul(n, torch.float32, device, threads, min_run_time=0.1).gflops}
    if bench.has_fast_kernel(torch.bfloat16, device, threads=threads)[0]:
        out["bf16_gflops"] = bench.matmul(n, torch.bfloat16, device, threads, min_run_time=0.1).gflops
    buffer = bench.beyond_cache(caches if device.type == "cpu" else None)
    out["bandwidth_gbps"] = max(r.gbps for r in bench.bandwidth(buffer, device, threads, min_run_time=0.05))
    return out


def peaks_for(report: Any, device: Any, threads: int) -> dict[str, Any]:
    """The derived peaks for ``device``: a CPU's fp32 and bf16 (:func:`torchhw.peak.flops`, with
    the measured clock); a GPU's theoretical memory bandwidth where it reports one."""
    import torch

    from . import peak

    device = torch.device(device)
    if device.type == "cpu":
        return {"fp32_gflops": peak.flops(report.cpu, torch.float32, cores=threads),
                "bf16_gflops": peak.flops(report.cpu, torch.bfloat16, cores=threads)}
    gpus = report.gpus if device.type == "cuda" else []
    gpu = gpus[device.index or 0] if gpus and (device.index or 0) < len(gpus) else None
    return {"bandwidth_gbps": gpu.memory_gbps} if gpu is not None and gpu.memory_gbps else {}


def measure(device: str = "auto", budget_s: float = 20.0, threads: int | None = None,
            by: str = "torchhw card", echo: Any = None) -> dict[str, Any]:
    """This machine's card, measured without the course (no tuning, no capstone).

    The clock, the peaks, fp32 and bf16 matmul, memory bandwidth and a search over shapes
    (:func:`torchhw.achievable.search`, ``budget_s`` seconds), with how busy the machine was
    (:func:`torchhw.bench.cpu_busy`, while nothing of the card runs) before and after.
    """
    import torch

    from . import achievable, bench, hardware
    from .device import describe, pick_device

    say = echo or (lambda *a: None)
    dev = pick_device(device)
    threads = threads or torch.get_num_threads()
    busy = [bench.cpu_busy(0.3)]
    say("surveying the hardware and measuring the clock ...")
    report = hardware.survey()
    peaks = peaks_for(report, dev, threads)
    say("timing matmul and memory bandwidth ...")
    measured = rates(dev, threads, report.cpu.caches)
    dtypes = [torch.float32, torch.bfloat16] + ([torch.float16] if dev.type != "cpu" else [])
    say(f"searching matmul shapes for {budget_s:.0f} s ...")
    best = achievable.search(dev, dtypes, budget_s, threads)
    busy.append(bench.cpu_busy(0.3))
    known = [b for b in busy if b is not None]
    return build(report, device=describe(dev), peaks=peaks, measured=measured, best=best,
                 method={"by": by, "threads": threads, "busy": max(known) if known else None})


def card_main(argv: Sequence[str] | None = None) -> int:
    """``torchhw card [--out DIR] [--budget S] [--device D]``: measure and write this machine's card."""
    parser = argparse.ArgumentParser(prog="torchhw card", description="measure and write this machine's card")
    parser.add_argument("--out", type=Path, default=Path("."), help="folder for the card (default: here)")
    parser.add_argument("--budget", type=float, default=20.0,
                        help="seconds for the search over matmul shapes (default 20)")
    parser.add_argument("--device", default="auto", help="cpu, cuda, mps or auto (default)")
    parser.add_argument("--threads", type=int, default=0, help="0: torch's default")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    card = measure(args.device, args.budget, args.threads or None, echo=print)
    try:
        path = save(card, args.out)
    except CardError as err:
        print(f"torchhw card: error: {err}")
        return 2
    print(summary(card))
    print(f"\ncard written to {path} ({time.perf_counter() - start:.0f} s)")
    return 0


def summary(card: dict[str, Any]) -> str:
    """A few lines: the machine, the clock, each peak against the best and measured rates."""
    m = card["machine"]
    lines = [f"{m['name']} on {card['device']}, torch {m.get('torch')}, {card['created']}"]
    clock = m.get("clock") or {}
    if clock.get("ghz"):
        lines.append(f"clock: {clock['ghz']:.2f} GHz {clock['kind']} (reported {m.get('clock_ghz') or 0:.2f} GHz)")
    for key in sorted(set(card["peak"]) | set(card["measured"])):
        best = card["best"].get(_KEY_DTYPES.get(key, ""), {})
        parts = [f"measured {_fmt(card['measured'].get(key))}"]
        if best:
            parts.append(f"best {_fmt(best['gflops'])} at {' x '.join(map(str, best['shape']))}")
        parts.append(f"peak {_fmt(card['peak'].get(key))}")
        lines.append(f"{key}: " + ", ".join(parts))
    lines += [f"{f['level']}: {f['item']}: {f['text']}" for f in card.get("findings", [])]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """``torchhw compare A B [--plot FILE]``: the table, the reasons, a plot. A and B are cards,
    run folders (runs/<stamp>/) or run reports (runs/<stamp>/report.json)."""
    parser = argparse.ArgumentParser(prog="torchhw compare",
                                     description="set two report cards side by side")
    parser.add_argument("a", type=Path, help="a card, a run folder or a run's report.json")
    parser.add_argument("b", type=Path, help="another")
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

"""Report cards: built from a hardware report and a tuning result, saved under a dated name,
read back, refused when they are not cards, and compared as a table, reasons and a plot."""

import json

import matplotlib
import pytest

from torchhw import cards, hardware
from torchhw.__main__ import main

matplotlib.use("Agg")

TUNING = {
    "recommended": {"channels_last": True}, "recommended_trial": "channels_last=True",
    "gain": 1.3, "reasons": {"channels_last=True": "kept"},
    "trials": [{"name": "baseline", "knobs": [], "speedup": 1.0},
               {"name": "channels_last=True", "knobs": ["channels_last=True"], "speedup": 1.3},
               {"name": "tf32=True", "knobs": ["tf32=True"], "speedup": None}],
}


def card(created="2026-11-30", **changes):
    report = hardware.survey(probe_gpus=False)
    c = cards.build(report, device="cpu", peaks={"fp32_gflops": 100.0},
                    measured={"fp32_gflops": 90.0, "bandwidth_gbps": 20.0}, tuning=TUNING,
                    capstone={"throughput": 1000.0, "accuracy": 0.95, "gain": 1.3},
                    created=created)
    for key, value in changes.items():
        section, item = key.split("__")
        c[section][item] = value
    return c


def test_build_save_load_round_trip(tmp_path):
    c = card()
    assert c["tuning"]["knob_gains"] == {"channels_last=True": 1.3, "tf32=True": None}
    path = cards.save(c, tmp_path)
    assert path.name.startswith("2026-11-30_") and path.suffix == ".json"
    assert " " not in path.name and "(" not in path.name
    back = cards.load(path)
    assert back["machine"] == c["machine"] and back["capstone"] == c["capstone"]


def test_slug():
    assert cards.slug("Intel(R) Xeon(R) Processor, 2 cores") == "intel-xeon-processor-2-cores"


def test_load_refuses_what_is_not_a_card(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"version": 1}))
    with pytest.raises(cards.CardError, match="lacks created"):
        cards.load(bad)
    bad.write_text("{not json")
    with pytest.raises(cards.CardError, match="cannot read"):
        cards.load(bad)


def test_compare_explains_differences_by_hardware():
    a = card(measured__bandwidth_gbps=20.0)
    b = card(measured__bandwidth_gbps=40.0, machine__physical_cores=16,
             machine__isa=["AVX2", "AMX BF16"], machine__gpus=[{"name": "H100"}])
    b["machine"]["isa"] = ["AVX2", "AMX BF16"]
    a["machine"]["isa"] = ["AVX2"]
    comparison = cards.compare(a, b)
    text = str(comparison)
    assert "2.00x" in text  # bandwidth ratio in the table
    why = " ".join(comparison.explain())
    assert "AMX BF16" in why and "bandwidth" in why and "GPU" in why and "cores" in why
    sections = {r[0] for r in comparison.rows()}
    assert sections == {"hardware", "peak", "measured", "knob gain", "tuning", "capstone"}
    assert "| section |" in comparison._repr_markdown_()
    assert comparison.plot() is not None


def test_same_machine_says_so():
    a, b = card(machine__load_average=0.1), card(machine__load_average=0.1)
    assert "same hardware" in cards.compare(a, b).explain()[0]


def test_a_busy_machine_is_flagged():
    busy = card(machine__load_average=8.0, machine__logical_cores=2)
    assert any("busy machine" in line for line in cards.compare(card(machine__load_average=0.1), busy).explain())


def test_compare_command(tmp_path, capsys):
    a = cards.save(card(), tmp_path, "a.json")
    b = cards.save(card(capstone__throughput=2000.0), tmp_path, "b.json")
    assert main(["compare", str(a), str(b), "--plot", str(tmp_path / "c.png")]) == 0
    out = capsys.readouterr().out
    assert "throughput" in out and "2.00x" in out and "Why they differ" in out
    assert (tmp_path / "c.png").stat().st_size > 1000
    assert main(["compare", str(a), str(tmp_path / "missing.json")]) == 2


def test_reference_cards_load():
    from conftest import ROOT

    found = sorted((ROOT / "reference" / "cards").glob("*.json"))
    for path in found:
        c = cards.load(path)
        assert path.name.startswith(c["created"])

"""Report cards: built from a hardware survey, checked against their schema and for plausibility
when written and read, upgraded from version 1, compared by the hardware of each device kind,
found in run folders, and gathered into a results page.

Cards of other machines (a GPU, an Apple Mac) are made by editing this machine's card, so every
kind of comparison is tested here without that hardware.
"""

import copy
import json
from pathlib import Path

import matplotlib
import pytest

from torchhw import cards, clock, hardware
from torchhw.__main__ import main
from torchhw.course import results

matplotlib.use("Agg")
ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "reference" / "cards"

TUNING = {
    "recommended": {"channels_last": True}, "recommended_trial": "channels_last=True",
    "gain": 1.3, "reasons": {"channels_last=True": "kept"},
    "trials": [{"name": "baseline", "knobs": [], "speedup": 1.0},
               {"name": "channels_last=True", "knobs": ["channels_last=True"], "speedup": 1.3},
               {"name": "tf32=True", "knobs": ["tf32=True"], "speedup": None}],
}


@pytest.fixture(scope="module")
def report():
    survey = hardware.survey(probe_gpus=False, measure_clock=False)
    survey.clock = clock.Clock(3.0, "measured", "a test's clock", 3.1, 2)
    return survey


def card(report, created="2026-11-30", peak_clock="measured", **changes):
    from torchhw import peak

    ghz = clock.Clock(3.0, peak_clock, "a test's clock")
    p = peak.Peak("float32", 100.0, "2 cores x 16 FLOP/cycle x 3.00 GHz", 2, 16.0, ghz)
    c = cards.build(report, device="cpu", peaks={"fp32_gflops": p},
                    measured={"fp32_gflops": 90.0, "bandwidth_gbps": 20.0}, tuning=TUNING,
                    capstone={"throughput": 1000.0, "accuracy": 0.95, "gain": 1.3},
                    best={"float32": {"gflops": 95.0, "shape": [512, 512, 512], "shapes_tried": 9}},
                    method={"by": "a test", "busy": 0.01}, created=created)
    for key, value in changes.items():
        section, item = key.split("__")
        c[section][item] = value
    c["findings"] = cards.findings(c)
    return c


def gpu_card(report, name="NVIDIA A100", cc="8.0", sms=108, gbps=1555.0, memory=40.0, **rates):
    c = card(report)
    c["device"], c["kind"] = f"cuda:0 ({name}, {memory:.0f} GiB, sm {cc})", "cuda"
    c["machine"]["gpus"] = [{"name": name, "memory_gib": memory, "compute_capability": cc,
                             "sm_count": sms, "memory_gbps": gbps}]
    c["peak"] = {"bandwidth_gbps": gbps}
    c["peak_basis"] = {}
    c["measured"] = {"fp32_gflops": rates.get("fp32", 19000.0), "bandwidth_gbps": rates.get("bw", 1300.0)}
    c["best"] = {}
    c["findings"] = cards.findings(c)
    return c


def test_build_save_load_round_trip(report, tmp_path):
    c = card(report)
    assert c["version"] == 2 and c["kind"] == "cpu"
    assert c["tuning"]["knob_gains"] == {"channels_last=True": 1.3, "tf32=True": None}
    assert c["peak_basis"]["fp32_gflops"].startswith("2 cores") and c["peak_clock"]["kind"] == "measured"
    assert c["machine"]["clock"]["ghz"] == 3.0 and c["findings"] == []
    assert cards.schema_errors(c) == []
    path = cards.save(c, tmp_path)
    assert path.name.startswith("2026-11-30_") and path.suffix == ".json"
    assert " " not in path.name and "(" not in path.name
    back = cards.load(path)
    assert back["machine"] == c["machine"] and back["capstone"] == c["capstone"]
    assert back["path"] == str(path)


def test_a_card_without_tuning_or_capstone_is_valid(report, tmp_path):
    c = card(report)
    c["tuning"] = c["capstone"] = None
    assert cards.load(cards.save(c, tmp_path))["tuning"] is None
    text = str(cards.compare(card(report), c))
    assert "knob gain" in text  # A's gains still shown, B's as '-'


def test_slug():
    assert cards.slug("Intel(R) Xeon(R) Processor, 2 cores") == "intel-xeon-processor-2-cores"


def test_load_refuses_what_is_not_a_card(report, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"version": 1}))
    with pytest.raises(cards.CardError, match="lacks created"):
        cards.load(bad)
    bad.write_text("{not json")
    with pytest.raises(cards.CardError, match="cannot read"):
        cards.load(bad)
    bad.write_text(json.dumps({"no": "version"}))
    with pytest.raises(cards.CardError, match="has no version"):
        cards.load(bad)
    future = card(report)
    future["version"] = 3
    bad.write_text(json.dumps(future))
    with pytest.raises(cards.CardError, match="upgrade torchhw"):
        cards.load(bad)


def test_schema_errors_say_where(report, tmp_path):
    c = card(report)
    c["measured"]["fp32_gflops"] = -5.0
    c["machine"]["logical_cores"] = "two"
    del c["method"]
    errors = cards.schema_errors(c)
    assert any(e.startswith("measured/fp32_gflops:") for e in errors)
    assert any(e.startswith("machine/logical_cores:") for e in errors)
    assert any("'method' is a required property" in e for e in errors)
    with pytest.raises(cards.CardError, match="does not match the card schema"):
        cards.save(c, tmp_path)


def test_an_impossible_rate_is_refused_and_kept(report, tmp_path):
    c = card(report, measured__fp32_gflops=130.0)   # 1.3x a peak from a measured clock
    assert [f["level"] for f in c["findings"]] == ["refused"]
    with pytest.raises(cards.CardError, match=r"1\.30x the derived peak.*impossible") as err:
        cards.save(c, tmp_path, "mine.json")
    assert "kept as" in str(err.value)
    assert not (tmp_path / "mine.json").exists()
    kept = json.loads((tmp_path / "mine.json.refused").read_text())
    assert kept["measured"]["fp32_gflops"] == 130.0   # nothing measured is lost
    (tmp_path / "sent.json").write_text(json.dumps(c))  # a card someone sends is refused too
    with pytest.raises(cards.CardError, match="refused"):
        cards.load(tmp_path / "sent.json")
    ok = card(report, measured__fp32_gflops=112.0)    # within the 1.15x tolerance: timing noise
    assert ok["findings"] == []


def test_a_rate_above_a_peak_from_the_reported_clock_is_marked_not_refused(report, tmp_path):
    c = card(report, peak_clock="reported", measured__fp32_gflops=130.0)
    (marked,) = c["findings"]
    assert marked["level"] == "marked" and "3.90 GHz or more" in marked["text"]
    assert cards.load(cards.save(c, tmp_path))["findings"] == [marked]


def test_bandwidth_above_the_theoretical_rate_is_refused(report):
    c = gpu_card(report, gbps=1555.0, bw=1800.0)
    assert c["findings"][0]["level"] == "refused" and "theoretical" in c["findings"][0]["text"]
    with pytest.raises(cards.CardError, match="no memory moves faster"):
        cards.check(c)


def test_a_busy_machine_is_marked_and_said(report):
    busy = card(report, method__busy=0.4)
    assert busy["findings"][0]["item"] == "method busy"
    why = cards.compare(card(report), busy).explain()
    assert any("40% of the CPUs" in line for line in why)


def test_version_1_cards_are_upgraded_and_their_reported_clock_said():
    shared = cards.load(REFERENCE / "2026-12-01_amd-epyc-2-cores.json")
    assert shared["version"] == 2 and shared["peak_clock"]["kind"] == "reported"
    # its fp32 rate beat the peak from the 2.60 GHz it reported: marked, with the clock implied
    marked = [f for f in shared["findings"] if f["item"] == "measured fp32_gflops"]
    assert marked and marked[0]["level"] == "marked" and "GHz or more" in marked[0]["text"]


def test_reference_cards_load_and_come_from_more_than_one_kind_of_machine():
    found = [cards.load(p) for p in sorted(REFERENCE.glob("*.json"))]
    assert len(found) >= 3
    for c in found:
        assert Path(c["path"]).name.startswith(c["created"])
        assert c["machine"]["torch"] and c["method"]["by"]
    kinds = {(c["machine"]["vendor"], tuple(sorted(c["machine"]["isa"]))) for c in found}
    assert len(kinds) >= 2, "reference cards from more than one kind of machine"
    assert any(c["machine"]["clock"]["kind"] == "measured" and c["best"] for c in found), \
        "at least one reference card with a measured clock and a search over shapes"


def test_compare_explains_cpu_differences_by_hardware(report):
    a = card(report, measured__bandwidth_gbps=20.0)
    b = card(report, measured__bandwidth_gbps=40.0)
    b["machine"]["physical_cores"] = 4
    a["machine"]["isa"] = ["AVX2", "FMA"]
    b["machine"]["isa"] = ["AVX2", "FMA", "AVX-512", "AMX BF16"]
    comparison = cards.compare(a, b)
    text = str(comparison)
    assert "2.00x" in text  # bandwidth ratio in the table
    why = " ".join(comparison.explain())
    assert "only B has: AMX BF16, AVX-512" in why and "bandwidth" in why and "cores: 2 against 4" in why
    assert "only A has" not in why and "AVX2, FMA" not in why   # shared: never a reason
    sections = {r[0] for r in comparison.rows()}
    assert sections == {"hardware", "software", "method", "peak", "measured", "best matmul",
                        "knob gain", "tuning", "capstone"}
    assert "| section |" in comparison._repr_markdown_()
    assert comparison.plot() is not None


def test_compare_never_explains_by_hardware_the_two_share(report):
    a, b = card(report), card(report)
    b["measured"]["fp32_gflops"] = 45.0   # half the rate on the same hardware
    why = cards.compare(a, b).explain()
    assert "same hardware" in why[0]
    assert not any(line.startswith(("cores", "clock", "instruction sets")) for line in why)
    flagged = [line for line in why if line.startswith("measured fp32_gflops")]
    assert flagged and "does not explain" in flagged[0] and "0.50x" in flagged[0]
    same = cards.compare(a, card(report)).explain()
    assert any("as the hardware explains" in line for line in same)


def test_compare_of_gpus_reasons_from_compute_capability_and_memory(report):
    t4 = gpu_card(report, "Tesla T4", "7.5", 40, 320.0, 16.0, fp32=4000.0, bw=240.0)
    a100 = gpu_card(report)
    why = " ".join(cards.compare(t4, a100).explain())
    assert "compute capability 7.5 against 8.0" in why and "B alone has TF32, bf16" in why
    assert "SMs: 40 against 108" in why and "4.86x" in why   # 1555 / 320 GB/s
    assert "AVX" not in why and "cores:" not in why            # no CPU reasons for GPUs
    rows = {r[1] for r in cards.compare(t4, a100).rows() if r[0] == "hardware"}
    assert {"compute capability", "tensor-core formats", "memory GB/s (theoretical)"} <= rows


def test_compare_of_macs_speaks_of_unified_memory(report):
    m1, m3 = card(report), card(report)
    for c, chip, mem in ((m1, "Apple M1", 16.0), (m3, "Apple M3 Max", 64.0)):
        c["device"], c["kind"] = "mps", "mps"
        c["machine"]["cpu"], c["machine"]["memory_gib"] = chip, mem
        c["peak"], c["peak_basis"] = {}, {}
    why = " ".join(cards.compare(m1, m3).explain())
    assert "unified memory" in why and "Apple M3 Max" in why


def test_two_macs_of_one_name_are_not_called_the_same_hardware(report):
    a, b = card(report), card(report)
    for c in (a, b):
        c["device"], c["kind"] = "mps", "mps"
        c["machine"]["cpu"] = "Apple M3 Max"
        c["peak"], c["peak_basis"] = {}, {}
    b["measured"]["fp32_gflops"] = 180.0
    why = cards.compare(a, b).explain()
    assert not any("same hardware" in line for line in why)
    assert any("cannot tell every difference" in line for line in why)


def test_the_gpu_probe_computes_the_theoretical_bandwidth(monkeypatch, capsys):
    """The probe run against torch presented as a machine with an A100 and a ROCm GPU."""
    import sys
    from types import SimpleNamespace

    props = SimpleNamespace(name="NVIDIA A100-SXM4-40GB", major=8, minor=0, total_memory=40 * 2**30,
                            multi_processor_count=108, memory_clock_rate=1215000,
                            memory_bus_width=5120, clock_rate=1410000)
    fake = SimpleNamespace(
        version=SimpleNamespace(hip=None),
        cuda=SimpleNamespace(is_available=lambda: True, device_count=lambda: 1,
                             get_device_properties=lambda i: props,
                             nccl=SimpleNamespace(version=lambda: (2, 21, 5))),
        backends=SimpleNamespace(cudnn=SimpleNamespace(version=lambda: 90100)))
    monkeypatch.setitem(sys.modules, "torch", fake)
    exec(hardware._GPU_PROBE, {})
    (gpu,) = json.loads(capsys.readouterr().out)["gpus"]
    assert round(gpu["memory_gbps"]) == 1555 and gpu["clock_ghz"] == 1.41   # NVIDIA's datasheet: 1,555 GB/s
    fake.version.hip = "6.2"   # ROCm reports its memory clock otherwise: no figure rather than a wrong one
    exec(hardware._GPU_PROBE, {})
    assert json.loads(capsys.readouterr().out)["gpus"][0]["memory_gbps"] is None


def test_impossible_figures_of_every_kind_are_refused(report):
    def refused(c):
        return [f["item"] for f in cards.findings(c) if f["level"] == "refused"]

    assert refused(card(report, peak_clock="reported", measured__fp32_gflops=9990.0)) == \
        ["measured fp32_gflops"]                      # would need the cores at 300 GHz
    assert refused(gpu_card(report, fp32=1e9)) == ["measured fp32_gflops"]
    assert refused(card(report, measured__bandwidth_gbps=1e6)) == ["measured bandwidth_gbps"]
    assert refused(card(report, measured__bandwidth_gbps=float("nan"))) == ["measured/bandwidth_gbps"]
    mixed = card(report)
    mixed["kind"] = "cuda"
    assert "kind" in refused(mixed)
    cores = card(report)
    cores["machine"]["physical_cores"] = 64
    assert refused(cores) == ["machine cores"]
    fast = card(report)
    fast["peak_clock"]["ghz"] = 100.0
    assert refused(fast) == ["peak_clock"]


def test_a_second_card_of_the_same_day_gets_its_own_name(report, tmp_path):
    first = cards.save(card(report), tmp_path)
    second = cards.save(card(report), tmp_path)
    assert first != second and second.name.endswith("-2.json") and first.exists()
    gpu = cards.save(gpu_card(report), tmp_path)
    assert "_cuda-nvidia-a100" in gpu.name
    again = cards.save(card(report), tmp_path, "card.json")
    assert cards.save(card(report), tmp_path, "card.json") == again   # a name given: replaced


def test_compare_of_two_device_kinds_says_so(report):
    why = cards.compare(card(report), gpu_card(report)).explain()
    assert "different kinds" in why[0]
    assert not any("hardware explains" in line for line in why)


def test_most_unlike_prefers_another_kind_then_other_hardware(report):
    mine, twin, other_cpu = card(report), card(report), card(report)
    other_cpu["machine"]["isa"] = ["AVX2", "FMA"]
    other_cpu["machine"]["cpu"] = "Another CPU"
    assert cards.most_unlike(mine, [twin, other_cpu]) is other_cpu
    gpu = gpu_card(report)
    assert cards.most_unlike(mine, [twin, other_cpu, gpu]) is gpu
    with pytest.raises(cards.CardError):
        cards.most_unlike(mine, [])


def test_a_reference_of_the_same_workload_is_found_and_lengths_are_said(report):
    """Notebook 10 compares with a card whose capstone trained the same model; where only the
    run's length differs, the reasons say which times that changes."""
    quick = card(report, capstone__model="SmallCNN base, digits 16 x 16")
    quick["capstone"].update(train_examples=5752, epochs=3, time_to_accuracy_s=0.6)
    full = copy.deepcopy(quick)
    full["capstone"].update(train_examples=17256, epochs=15, time_to_accuracy_s=1.5)
    other = card(report, capstone__model="SmallCNN small, digits")
    assert cards.same_workload(quick, full) and not cards.same_workload(quick, other)
    assert not cards.same_workload(quick, dict(card(report), capstone=None))
    why = " ".join(cards.compare(quick, full).explain())
    assert "same model on runs of different length" in why and "17,256" in why
    assert "different workloads" in " ".join(cards.compare(quick, other).explain())
    # a time has a direction: lower is better, and the B/A column says which took longer
    row = next(r for r in cards.compare(quick, full).rows() if r[1] == "time_to_accuracy_s")
    assert row[4] == "2.50x, B longer"
    row = next(r for r in cards.compare(full, quick).rows() if r[1] == "time_to_accuracy_s")
    assert row[4] == "0.40x, B shorter"


def test_native_bf16_instructions_are_a_reason_only_as_far_as_the_figures_show(report):
    """An AMX card whose bf16 rate and bf16 autocast gain are the lower ones is not said to gain
    from AMX: the reason reads the figures, never assumes them."""
    def with_bf16(isa, fp32, bf16, autocast):
        c = card(report)
        c["machine"]["isa"] = isa
        c["measured"].update(fp32_gflops=fp32, bf16_gflops=bf16)
        c["tuning"] = copy.deepcopy(c["tuning"])
        c["tuning"]["knob_gains"]["autocast=bfloat16"] = autocast
        return c

    amx = ["AVX2", "FMA", "AVX-512", "AMX", "AMX BF16"]
    plain = ["AVX2", "FMA", "AVX-512"]
    slow_amx = with_bf16(amx, 150.0, 370.0, 0.73)      # 2.5x its fp32, autocast slower
    fast_plain = with_bf16(plain, 190.0, 770.0, 1.17)  # 4.1x its fp32, autocast faster
    line = next(l for l in cards.compare(slow_amx, fast_plain).explain() if "only A has" in l)
    assert "the cards show the opposite" in line and "0.73x alone on A" in line
    assert "gain there" not in line
    fast_amx = with_bf16(amx, 150.0, 900.0, 1.9)
    line = next(l for l in cards.compare(fast_amx, fast_plain).explain() if "only A has" in l)
    assert "the cards show it" in line
    mixed = with_bf16(amx, 150.0, 900.0, 0.9)
    line = next(l for l in cards.compare(mixed, fast_plain).explain() if "only A has" in l)
    assert "mixed" in line


def test_compare_command_takes_cards_run_folders_and_reports(report, tmp_path, capsys):
    a = cards.save(card(report), tmp_path, "a.json")
    run = tmp_path / "runs" / "2026-12-02_120000"
    cards.save(card(report, capstone__throughput=2000.0), run, "card.json")
    (run / "report.json").write_text(json.dumps({"notebooks": []}))
    assert main(["compare", str(a), str(run), "--plot", str(tmp_path / "c.png")]) == 0
    out = capsys.readouterr().out
    assert "throughput" in out and "2.00x" in out and "Why they differ" in out
    assert (tmp_path / "c.png").stat().st_size > 1000
    assert main(["compare", str(a), str(run / "report.json")]) == 0
    # a report without card.json beside it: the card notebook 10 recorded in it
    old = tmp_path / "old"
    old.mkdir()
    (old / "report.json").write_text(json.dumps({"notebooks": [
        {"name": "10_capstone", "measurements": {"capstone card": {"value": card(report)}}}]}))
    assert main(["compare", str(a), str(old / "report.json")]) == 0
    capsys.readouterr()
    assert main(["compare", str(a), str(tmp_path / "missing.json")]) == 2
    assert main(["compare", str(a), str(tmp_path)]) == 2
    assert "without card.json" in capsys.readouterr().out


def test_the_card_command_writes_a_valid_card(report, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(cards, "measure", lambda *a, **k: card(report, created="2026-12-02"))
    assert main(["card", "--out", str(tmp_path), "--budget", "1"]) == 0
    (written,) = tmp_path.glob("*.json")
    assert cards.load(written)["created"] == "2026-12-02"
    assert "card written to" in capsys.readouterr().out


def test_measure_fills_every_section_a_card_without_the_course_has(tmp_path):
    c = cards.measure("cpu", budget_s=0.5)
    assert c["method"]["by"] == "torchhw card" and c["tuning"] is None and c["capstone"] is None
    assert c["measured"]["fp32_gflops"] > 0 and c["measured"]["bandwidth_gbps"] > 0
    assert c["best"]["float32"]["gflops"] > 0 and len(c["best"]["float32"]["shape"]) == 3
    assert c["peak_basis"]
    assert c["method"]["busy"] is None or 0 <= c["method"]["busy"] <= 1
    assert cards.schema_errors(c) == []


def test_results_page_lists_every_card_and_what_was_refused(report, tmp_path, capsys):
    folder = tmp_path / "cards"
    for p in REFERENCE.glob("*.json"):
        (folder / p.name).parent.mkdir(exist_ok=True)
        (folder / p.name).write_text(p.read_text())
    bad = card(report, measured__fp32_gflops=500.0)
    (folder / "2026-12-03_impossible.json").write_text(json.dumps(bad))
    assert main(["cards", str(folder), "--out", str(tmp_path / "site")]) == 0
    md = (tmp_path / "site" / "results.md").read_text()
    page = (tmp_path / "site" / "results.html").read_text()
    names = sorted(REFERENCE.glob("*.json"))
    assert md.count("\n| 20") == len(names), "a row per reference card"
    assert "## Refused" in md and "2026-12-03_impossible.json" in md and "impossible" in md
    import re

    assert "data:image/png;base64," in page
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page), "offline: nothing fetched"
    assert "@import" not in page and "url(" not in page
    assert (tmp_path / "site" / "results.png").stat().st_size > 5000
    assert "1 refused" in capsys.readouterr().out
    assert main(["cards", str(tmp_path / "nowhere")]) == 2


def test_results_row_marks_findings(report):
    row = results.row(card(report, peak_clock="reported", measured__fp32_gflops=130.0))
    assert "reported clock" in row["marked"] and row["clock GHz"] == "3.00 measured"


def test_upgrade_leaves_the_original_alone():
    original = json.loads((REFERENCE / "2026-12-01_amd-epyc-2-cores.json").read_text())
    before = copy.deepcopy(original)
    cards.upgrade(original)
    assert original == before


def test_a_gpu_cards_peak_is_its_theoretical_bandwidth(report):
    """A CUDA machine presented to the card code: no FLOP peak derived, the bandwidth from the
    memory clock and bus width the GPU probe reports."""
    from types import SimpleNamespace

    from torchhw.hardware import GPUInfo

    h100 = GPUInfo(0, "NVIDIA H100 80GB HBM3", 79.6, "9.0", 132, memory_gbps=3352.3)
    gpu_machine = SimpleNamespace(**{**vars(report), "gpus": [h100]})
    assert cards.peaks_for(gpu_machine, "cuda:0", 1) == {"bandwidth_gbps": 3352.3}
    assert cards.peaks_for(gpu_machine, "cuda:1", 1) == {}      # no second GPU listed
    summary = cards.machine_summary(gpu_machine)
    assert summary["gpus"][0]["memory_gbps"] == 3352.3 and summary["gpus"][0]["sm_count"] == 132


def test_the_reference_readme_lists_every_card():
    listed = (REFERENCE / "README.md").read_text()
    for path in REFERENCE.glob("*.json"):
        assert f"| {path.name} |" in listed, f"{path.name} is not in reference/cards/README.md"


def test_one_cpu_at_two_clocks_is_the_boost_not_other_hardware(report):
    a, b = card(report), card(report)
    b["machine"]["clock"] = dict(b["machine"]["clock"], ghz=3.3)
    (line,) = [l for l in cards.compare(a, b).explain() if l.startswith("clock")]
    assert "1.10x" in line and "boost each run found" in line

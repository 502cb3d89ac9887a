"""The autotuner on a tiny model with a tiny budget: every knob is reported, failures and
knobs that do not apply included, trials have deadlines, and the plan never changes."""

import json
import time

import pytest
import torch
from torch import nn

from torchhw import tune
from torchhw.measurements import collected


def tiny():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(16, 8), nn.ReLU(), nn.Linear(8, 3))
    batch = (torch.randn(8, 16), torch.randint(0, 3, (8,)))
    return model, batch


def noop(setup):
    pass


def broken(setup):
    raise RuntimeError("this knob is broken on purpose")


def slow(setup):
    model = setup.model

    class Slow(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = model

        def forward(self, x):
            time.sleep(0.2)
            return self.inner(x)
    setup.model = Slow()


KNOBS = [
    tune.Knob("fine", True, "does nothing", lambda s: None, noop),
    tune.Knob("raises", True, "fails when applied", lambda s: None, broken),
    tune.Knob("gpu_only", True, "never applies here", lambda s: "needs a unicorn", noop),
]


def run(knobs=KNOBS, **kw):
    model, batch = tiny()
    kw.setdefault("budget_s", 20)
    kw.setdefault("threads", 1)  # one thread: a busy test machine makes more threads erratic
    return tune.tune(model, batch, knobs=knobs, min_run_time=0.01, **kw)


def test_every_knob_is_reported_with_its_reason():
    result = run()
    by_name = {t.name: t for t in result.trials}
    assert by_name["baseline"].status == "ok" and by_name["baseline"].median_s > 0
    assert by_name["fine=True"].status == "ok" and by_name["fine=True"].speedup > 0
    assert by_name["raises=True"].status == "failed"
    assert "broken on purpose" in by_name["raises=True"].reason
    assert by_name["gpu_only=True"].status == "not applicable"
    assert by_name["gpu_only=True"].reason == "needs a unicorn"
    assert set(result.reasons) == {"fine=True", "raises=True", "gpu_only=True"}
    assert "unicorn" in result.reasons["gpu_only=True"]
    assert "failed" in result.reasons["raises=True"]
    text = str(result)
    assert "unicorn" in text and "broken on purpose" in text and "recommended" in text


def test_the_plan_is_deterministic():
    names = [[t.name for t in run().trials] for _ in range(2)]
    assert names[0] == names[1] == [
        "baseline", "fine=True", "raises=True", "gpu_only=True", "fine=True + raises=True"]


def test_a_slow_trial_times_out_and_the_tuner_returns():
    knobs = [tune.Knob("slow", True, "sleeps", lambda s: None, slow)]
    result = run(knobs, trial_timeout_s=0.5, budget_s=3)
    slow_trial = [t for t in result.trials if t.name == "slow=True"][0]
    assert slow_trial.status == "timed out", slow_trial
    assert result.recommended == {} and result.recommended_trial == "baseline"


def test_budget_spent_means_skipped_not_dropped():
    result = run(budget_s=0.0001)
    statuses = {t.name: t.status for t in result.trials}
    assert statuses["baseline"] == "skipped" and statuses["fine=True"] == "skipped"
    assert statuses["gpu_only=True"] == "not applicable"


def test_result_is_json_and_recorded():
    result = run(record_as="tune test")
    data = json.loads(json.dumps(result.to_dict()))
    assert data["recommended_trial"] == result.recommended_trial
    assert collected()["tune test"]["value"]["reasons"] == result.reasons


def test_default_knobs_on_cpu_say_why_gpu_knobs_do_not_apply():
    model, batch = tiny()
    result = tune.tune(model, batch, budget_s=20, min_run_time=0.01, threads=1, record_as=None)
    reasons = result.reasons
    assert "CUDA" in reasons["cudnn_benchmark=True"] or torch.cuda.is_available()
    assert "no 2-D convolution" in reasons["channels_last=True"]
    assert "compile=True" in reasons["compile=True"]
    assert len(reasons) == len(tune.default_knobs())


def test_recommendation_prefers_fewer_knobs_within_the_margin():
    def make(name, knobs, s, verdict=None):
        verdict = verdict or ("faster" if s >= 1.05 else "no clear difference")
        return tune.Trial(name, knobs, "ok", speedup=s, verdict=verdict)

    trials = [make("baseline", [], 1.0), make("a=1", ["a=1"], 2.0), make("b=1", ["b=1"], 0.7),
              make("a=1 + b=1", ["a=1", "b=1"], 2.05)]
    assert tune.choose(trials).name == "a=1"
    trials[-1].speedup = 3.0
    assert tune.choose(trials).name == "a=1 + b=1"
    assert tune.choose([make("baseline", [], 1.0), make("a=1", ["a=1"], 1.02)]) is None
    # only the verdict "faster" wins: a busy machine's 1.8x or a noisy 1.1x never does
    busy = [make("baseline", [], 1.0), make("a=1", ["a=1"], 1.3),
            make("b=1", ["b=1"], 1.8, verdict="machine busy"),
            make("c=1", ["c=1"], 1.1, verdict="no clear difference")]
    assert tune.choose(busy).name == "a=1"


def test_settings_do_not_leak_out_of_the_tuner():
    threads = torch.get_num_threads()
    halve = tune.Knob("threads", "half", "half the threads", lambda s: None,
                      lambda s: setattr(s, "threads", 1))
    run([halve], threads=max(2, threads), budget_s=5)
    assert torch.get_num_threads() == threads


def test_the_winner_must_be_confirmed_and_its_gain_is_the_confirmation_s(monkeypatch):
    from torchhw import bench

    real = bench.compare_rounds
    calls = []

    def fake(base, candidates, **kw):
        out = real(base, candidates, **kw)
        calls.append(kw["rounds"])
        for c in out.values():  # the trials look 2x faster; the confirmation shows no gain
            c.cand_times = [t / (2.0 if len(calls) == 1 else 1.0) for t in c.base_times]
            c.busy = ""  # whatever this machine is doing meanwhile
        return out

    monkeypatch.setattr(bench, "compare_rounds", fake)
    result = run([tune.Knob("fine", True, "does nothing", lambda s: None, noop)], budget_s=10)
    assert calls == [tune.ROUNDS, 2 * tune.ROUNDS], "a trial, then the confirmation"
    assert result.recommended_trial == "baseline" and result.gain == 1.0
    assert "not confirmed" in result.confirmation
    assert "not confirmed" in result.reasons["fine=True"]


def fake_gains(monkeypatch, trial, final):
    """compare_rounds with each candidate's rounds set to a fixed gain over the baseline's:
    ``trial`` in the trials' rounds, ``final`` in the confirmation's (twice the rounds)."""
    from torchhw import bench

    real = bench.compare_rounds

    def fake(base, candidates, **kw):
        out = real(base, candidates, **kw)
        gains = final if kw["rounds"] == 2 * tune.ROUNDS else trial
        for name, c in out.items():
            c.cand_times = [t / gains[name] for t in c.base_times]
            c.busy = ""  # whatever this machine is doing meanwhile
        return out

    monkeypatch.setattr(bench, "compare_rounds", fake)


def test_a_knob_that_adds_nothing_to_the_winner_is_dropped(monkeypatch):
    """The pair a+b looked best in its own trial; in the confirmation, timed beside a alone
    and b alone, it is no faster than a: b is dropped, and a is what is recommended."""
    fake_gains(monkeypatch, trial={"a=True": 1.2, "b=True": 1.0, "a=True + b=True": 1.3},
               final={"a=True": 1.2, "b=True": 1.0, "a=True + b=True": 1.2})
    knobs = [tune.Knob("a", True, "", lambda s: None, noop),
             tune.Knob("b", True, "", lambda s: None, noop)]
    result = run(knobs, budget_s=20)
    assert result.recommended == {"a": True}, result
    assert result.gain == pytest.approx(1.2)
    assert "adds no clear gain" in result.reasons["b=True"]
    assert result.reasons["a=True"].startswith("kept")


def test_channels_last_needs_a_2d_convolution():
    conv3d = nn.Sequential(nn.Conv3d(1, 2, 3), nn.Flatten(), nn.LazyLinear(3))
    setup = tune.Setup(conv3d, (torch.randn(2, 1, 4, 4, 4), torch.randint(0, 3, (2,))),
                       torch.device("cpu"), 1, nn.functional.cross_entropy,
                       lambda p: torch.optim.SGD(p, lr=0.1))
    knob = next(k for k in tune.default_knobs() if k.name == "channels_last")
    assert knob.check(setup) == "the model has no 2-D convolution"


def test_a_larger_batch_is_judged_by_examples_per_second(monkeypatch):
    """Twice the batch in 1.6x the time per step is 1.25x the examples per second: the batch
    knob wins by that, not by its slower step; twice the batch in 2.2x the time loses."""
    from torchhw import bench, knobs

    real = bench.compare_rounds
    seen_batches = []

    for per_step, verdict in ((1.6, "faster"), (2.2, "slower")):
        def fake(base, candidates, **kw):
            out = real(base, candidates, **kw)
            for c in out.values():
                c.cand_times = [t * per_step for t in c.base_times]
                c.busy = ""
            return out

        monkeypatch.setattr(bench, "compare_rounds", fake)
        double = next(k for k in knobs.default_knobs() if k.name == "batch_size")
        result = run([double], budget_s=20)
        trial = next(t for t in result.trials if t.name == "batch_size=double")
        assert trial.verdict == verdict and trial.speedup == pytest.approx(2 / per_step)
        assert "examples per second" in result.reasons["batch_size=double"]
        seen_batches.append(result.recommended)
    assert seen_batches == [{"batch_size": "double"}, {}]
    ready = knobs.prepare(knobs.configure(tiny()[0], {"batch_size": "double"}, threads=1))
    assert ready.batch_size(64) == 128 and "2x the batch" in ready.describe()
    setup = knobs.configure(tiny()[0], {}, threads=1, batch=tiny()[1])
    double.apply(setup)
    assert len(setup.batch[0]) == 16 and setup.batch_factor == 2


def test_compile_is_tried_where_the_budget_leaves_room_for_a_first_compile():
    from torchhw.knobs import COMPILE_BUDGET_S

    assert tune.compile_choice(None, 2 * COMPILE_BUDGET_S) == (True, "")  # a trial gets half
    tried, why = tune.compile_choice(None, COMPILE_BUDGET_S)
    assert not tried and f"{COMPILE_BUDGET_S:g} s budget" in why
    assert f"budget_s >= {2 * COMPILE_BUDGET_S:g}" in why
    assert tune.compile_choice(True, 1) == (True, "")
    assert tune.compile_choice(False, 600)[0] is False
    knob = next(k for k in tune.default_knobs(False, why) if k.name == "compile")
    assert knob.check(None) == why


def test_a_doubtful_knob_left_in_the_recommendation_says_so(monkeypatch):
    """a+b+c won its trial; in the confirmation it is no faster than a+c or a+b, so b and c
    each look unneeded. a+b is recommended: b stays, and its reason says what was found."""
    fake_gains(monkeypatch,
               trial={"a=True": 1.2, "b=True": 1.0, "c=True": 1.0, "a=True + b=True": 1.25,
                      "a=True + c=True": 1.2, "b=True + c=True": 1.0,
                      "a=True + b=True + c=True": 1.4},
               final={"a=True + b=True + c=True": 1.3, "b=True + c=True": 1.0,
                      "a=True + c=True": 1.28, "a=True + b=True": 1.3})
    knobs = [tune.Knob(k, True, "", lambda s: None, noop) for k in "abc"]
    result = run(knobs, budget_s=30)
    assert result.recommended == {"a": True, "b": True}, result
    assert "though in the confirmation" in result.reasons["b=True"]
    assert "adds no clear gain" in result.reasons["c=True"]


def test_a_kept_knob_says_what_it_added_and_the_table_shows_each_trials_baseline(monkeypatch):
    """a alone makes no clear difference, but a+b is clearly faster than b alone in the
    confirmation: a is kept, and its reason says both, never that it gained alone. Each row
    shows the baseline of its own rounds, so its speed-up can be checked against it."""
    fake_gains(monkeypatch, trial={"a=True": 1.0, "b=True": 1.3, "a=True + b=True": 1.6},
               final={"a=True": 1.0, "b=True": 1.3, "a=True + b=True": 1.6})
    knobs = [tune.Knob("a", True, "", lambda s: None, noop),
             tune.Knob("b", True, "", lambda s: None, noop)]
    result = run(knobs, budget_s=20)
    assert result.recommended == {"a": True, "b": True}, result
    why = result.reasons["a=True"]
    assert why.startswith("kept: 1.00x alone (no clear difference)")
    assert "a=True + b=True was 1.23x b=True without it (faster)" in why
    assert "every knob" not in why
    rows = result.rows()
    assert rows[0][3] == "baseline, same rounds"
    pair = next(t for t in result.trials if t.name == "a=True + b=True")
    assert pair.base_median_s == pytest.approx(pair.median_s * 1.6, rel=0.01)
    text = str(result)
    assert "s spent, budget 20 s" in text and "s of a" not in text
    assert "baseline, same rounds" in result._repr_markdown_()

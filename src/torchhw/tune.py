"""An autotuner: which speed knobs apply on this machine, what each one buys, what to use.

Notebook 09 measures each technique by hand, one at a time; this module does the same
search for any model, within a time budget, so a reader can ask "what should I turn on
here?" for their own model and machine:

    result = tune(model, (x, y), budget_s=10)
    result.recommended          # {'channels_last': True, 'autocast': 'bfloat16', ...}
    result                      # a table: every trial, its speed-up over the baseline, why

What it promises:

- every knob in the list is reported: measured, "not applicable" with the reason (TF32 needs
  an NVIDIA GPU), "failed" with the error, "timed out", or "skipped" when the budget ran out.
  Nothing is dropped in silence, and nothing is excluded by a rule where it can be measured
  (fp16 on a CPU is timed like any other dtype);
- the set and order of trials is fixed by the knobs and the machine, never by the clock:
  the baseline, each applicable knob alone, then every compatible pair, then all of them;
- every trial is measured where training runs: in the calling thread, with its thread pool,
  against the baseline re-timed in every round (:func:`torchhw.bench.compare_rounds`), so a
  slow patch of the machine slows both and the ratio keeps its meaning. A trial that overruns
  its deadline is stopped before its next step;
- one verdict rule for every ratio (:data:`torchhw.bench.THRESHOLD`); a round where other
  processes took the CPUs gives no verdict, and such a trial never wins;
- the winner is timed against the baseline once more in a final comparison; when that does
  not confirm it, the baseline is recommended;
- a trial trains a private copy of the model, and settings a knob changes (threads, TF32,
  cudnn.benchmark) hold only while that trial's own steps run.
"""

from __future__ import annotations

import copy
import itertools
import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Sequence

import torch
from torch import nn

from . import bench, measurements, train
from .device import synchronize
from .knobs import Knob, Setup, default_knobs, prepare
from .knobs import label as knob_label

MARGIN = 1 + bench.THRESHOLD  # a knob is kept only if its gain is clear by the course's one rule
ROUNDS = 7  # alternating rounds per trial; the final comparison of the winner has twice as many


class TrialStopped(RuntimeError):
    """A trial passed its deadline; raised by its step before the next one starts."""


@dataclass
class Trial:
    """One measured configuration. ``speedup`` and ``spread`` are against the baseline."""

    name: str
    knobs: list[str]
    status: str  # ok, failed, timed out, skipped, not applicable
    reason: str = ""
    median_s: float | None = None
    base_median_s: float | None = None  # the baseline's median in this trial's own rounds
    iqr_s: float | None = None
    runs: int = 0
    first_step_s: float | None = None  # includes compiling and algorithm search
    speedup: float | None = None
    spread: tuple[float, float] | None = None  # interquartile range of the rounds' ratios
    verdict: str = ""  # faster, slower, no clear difference, machine busy
    busy: str = ""  # why the machine was too busy for a verdict
    times: list[float] = field(default_factory=list, repr=False)


@dataclass
class TuneResult:
    """What :func:`tune` found: every trial, the recommended configuration and why."""

    device: str
    threads: int
    budget_s: float
    spent_s: float
    trials: list[Trial]
    recommended: dict[str, Any]
    recommended_trial: str
    gain: float
    reasons: dict[str, str]
    confirmation: str = ""  # the winner against the baseline, timed once more
    busy: str = ""  # set when a round found the machine busy: the advice may be the load's

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for t in data["trials"]:
            t.pop("times")
        return data

    def knob_gains(self) -> dict[str, float | None]:
        """Each knob's measured speed-up alone (None when it was not measured)."""
        return {t.name: t.speedup for t in self.trials if len(t.knobs) == 1}

    def rows(self) -> list[list[str]]:
        rows = [["trial", "status", "median step", "baseline, same rounds", "speed-up",
                 "IQR of ratio", "verdict, note"]]
        # each speed-up is against the baseline re-timed in that trial's own rounds, so a row's
        # median step need not divide into the baseline row's (from the first trial's rounds):
        # the baseline of its own rounds is shown beside it
        for t in self.trials:
            note = "; ".join(x for x in (t.verdict, t.busy, t.reason) if x)
            rows.append([
                t.name, t.status, bench.fmt_time(t.median_s) if t.median_s else "",
                bench.fmt_time(t.base_median_s) if t.base_median_s else "",
                f"{t.speedup:.2f}x" if t.speedup else "",
                f"{t.spread[0]:.2f}-{t.spread[1]:.2f}" if t.spread else "", note])
        return rows

    def __str__(self) -> str:
        rows = self.rows()
        widths = [max(len(r[i]) for r in rows) for i in range(6)]
        lines = ["  ".join(c.ljust(w) for c, w in zip(r[:6], widths)) + "  " + r[6] for r in rows]
        lines += [f"({line})" for line in self._footer()]
        lines.append(f"recommended: {self.recommended_trial} ({self.gain:.2f}x the baseline); "
                     f"{self.spent_s:.1f} s spent, budget {self.budget_s:g} s")
        if self.confirmation:
            lines.append(f"  confirmed? {self.confirmation}")
        if self.busy:
            lines.append(f"  machine busy: {self.busy}; rerun on a quiet machine before trusting it")
        lines += [f"  {k}: {v}" for k, v in self.reasons.items()]
        return "\n".join(lines)

    __repr__ = __str__

    def _footer(self) -> list[str]:
        """How to read the columns, and how far the baseline drifted between trials."""
        lines = ["Each speed-up is the median of its rounds' ratios, in examples per second, "
                 "against the baseline timed in that trial's own rounds (\"baseline, same "
                 "rounds\"): close to that baseline over the trial's median step, per example "
                 "where the batch is doubled. The baseline row's median step is from the first "
                 "trial's rounds."]
        drift = [t.base_median_s for t in self.trials if t.base_median_s]
        if len(drift) > 1 and max(drift) > 1.1 * min(drift):
            lines.append(f"The baseline's own step ranged {bench.fmt_time(min(drift))}-"
                         f"{bench.fmt_time(max(drift))} from one trial's rounds to another's: the "
                         f"machine's speed drifted, which is why each trial is set against the "
                         f"baseline of its own rounds and not against the baseline row.")
        return lines

    def _repr_markdown_(self) -> str:
        rows = self.rows()
        lines = ["| " + " | ".join(rows[0]) + " |", "|---|---|--:|--:|--:|--:|---|"]
        lines += ["| " + " | ".join(r) + " |" for r in rows[1:]]
        lines += ["", " ".join(self._footer()),
                  "", f"**recommended:** {self.recommended_trial} ({self.gain:.2f}x the "
                      f"baseline; {self.spent_s:.1f} s spent, budget {self.budget_s:g} s)", ""]
        if self.confirmation:
            lines += [f"confirmed? {self.confirmation}", ""]
        if self.busy:
            lines += [f"**machine busy:** {self.busy}; rerun on a quiet machine before trusting "
                      f"it", ""]
        lines += [f"- `{k}`: {v}" for k, v in self.reasons.items()]
        return "\n".join(lines)


def _step(setup: Setup, deadline: list[float]) -> Callable[[], float]:
    """One full training step of ``setup``, as :func:`torchhw.train.fit` takes it (the same
    ``train_step``, on what :func:`knobs.prepare` builds); it refuses to start once
    ``deadline[0]`` has passed."""
    ready = prepare(setup)
    batch = setup.batch

    def step() -> float:
        if time.perf_counter() > deadline[0]:
            raise TrialStopped("deadline passed")
        loss, _ = train.train_step(ready.step_model, batch, setup.loss_fn, ready.optimizer,
                                   setup.device, scaler=ready.scaler)
        return loss
    step.settings = ready.settings  # type: ignore[attr-defined]
    return step


def _first_step(setup: Setup, step: Callable[[], float], context: Callable[[], Any]) -> float:
    """Run the first step (compiling, algorithm search) and check that training still works."""
    import math

    with context():
        start = time.perf_counter()
        loss = step()
        synchronize(setup.device)
        seconds = time.perf_counter() - start
    if not math.isfinite(loss):
        raise FloatingPointError(f"the loss is {loss}: this setting breaks training")
    return seconds


def _plan(applicable: Sequence[Knob]) -> list[list[Knob]]:
    """Baseline, singles, compatible pairs, all compatible together: fixed order."""
    plan: list[list[Knob]] = [[]] + [[k] for k in applicable]
    ok = [list(c) for c in itertools.combinations(applicable, 2)
          if not (c[0].group and c[0].group == c[1].group)]
    plan += ok
    if len(applicable) > 2:
        together, groups = [], set()
        for k in applicable:
            if not k.group or k.group not in groups:
                together.append(k)
                groups.add(k.group)
        if len(together) > 2:
            plan.append(together)
    return plan


def applicability(knobs: Sequence[Knob], fresh: Callable[[], Setup]) -> tuple[list[Knob], dict[str, str]]:
    """The knobs that apply to ``fresh()``'s setup on its device, and for each other one (by
    label) why not. Decided from what the device is, before anything runs."""
    applicable, why_not = [], {}
    for knob in knobs:
        why = knob.check(fresh())
        if why is None:
            applicable.append(knob)
        else:
            why_not[knob_label(knob)] = why
    return applicable, why_not


def choose(trials: Sequence[Trial]) -> Trial | None:
    """The trial to recommend, or None for the baseline.

    Only a trial whose comparison gave the verdict "faster" can win (a busy machine's or a
    noisy one's cannot); of those, the fastest, unless one with fewer knobs is within MARGIN
    of it: a knob stays only if it adds a gain clear of the rounds' spread.
    """
    winners = [t for t in trials if t.status == "ok" and t.knobs and t.verdict == "faster"]
    top = max((t.speedup or 0 for t in winners), default=0.0)
    return min((t for t in winners if (t.speedup or 0) * MARGIN >= top),
               key=lambda t: (len(t.knobs), -(t.speedup or 0)), default=None)


def compile_choice(compile: bool | None, budget_s: float) -> tuple[bool, str]:
    """Whether the tuner tries torch.compile, and the reason where it does not: the caller's
    choice, else whether the budget leaves room for a first compile."""
    from .knobs import COMPILE_BUDGET_S

    if compile is not None:
        return compile, "" if compile else "left out by the caller (compile=False)"
    if budget_s / 2 >= COMPILE_BUDGET_S:  # a trial may take half the budget (its timeout)
        return True, ""
    return False, (f"a first compile can take up to {COMPILE_BUDGET_S:g} s here, more than a "
                   f"trial's half of this {budget_s:g} s budget: to try it, tune with "
                   f"budget_s >= {2 * COMPILE_BUDGET_S:g}, or with compile=True")


def tune(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor], *, budget_s: float = 10,
         trial_timeout_s: float | None = None, min_run_time: float = 0.2,
         knobs: Sequence[Knob] | None = None, compile: bool | None = None,
         loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
         make_optimizer: Callable[[Any], torch.optim.Optimizer] | None = None,
         threads: int | None = None, record_as: str | None = "tune") -> TuneResult:
    """Try the knobs on ``model`` training on ``batch``; recommend the fastest configuration.

    The model and batch must be on the device to tune for; they are copied, never changed.
    Call it from the thread that will train (a notebook's main thread): that is where its
    trials run. ``trial_timeout_s`` defaults to half the budget (at least 2 s);
    ``min_run_time`` is the time each trial spends in each arm, over all its rounds.
    ``knobs`` defaults to :func:`default_knobs`; torch.compile is among them where a trial's
    half of the budget leaves room for a first compile (``COMPILE_BUDGET_S``), or where
    ``compile`` says so (True or False, whatever the budget). The
    result is recorded for the course report under ``record_as`` (None: not recorded).
    """
    start = time.perf_counter()
    device = next(model.parameters()).device
    threads = threads or torch.get_num_threads()
    knobs = list(default_knobs(*compile_choice(compile, budget_s)) if knobs is None else knobs)
    timeout = trial_timeout_s or max(2.0, budget_s / 2)
    loss_fn = loss_fn or nn.functional.cross_entropy
    make_optimizer = make_optimizer or (lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9))
    round_time = max(min_run_time / ROUNDS, 1e-3)
    trials_end = start + 0.85 * budget_s  # the rest is the winner's confirmation

    def fresh() -> Setup:
        return Setup(copy.deepcopy(model), tuple(t.clone() for t in batch), device, threads,
                     loss_fn, make_optimizer)

    trials: list[Trial] = []
    applicable, why_not = applicability(knobs, fresh)
    reasons = {name: f"not applicable: {why}" for name, why in why_not.items()}
    trials += [Trial(name, [name], "not applicable", why) for name, why in why_not.items()]

    # the baseline: one private copy, stepped in every trial's rounds
    base_setup, base_deadline = fresh(), [float("inf")]
    base_step = _step(base_setup, base_deadline)
    base_context = base_step.settings
    base = Trial("baseline", [], "ok")
    if budget_s - (time.perf_counter() - start) <= 0:
        base.status, base.reason = "skipped", "the time budget was spent"
    else:
        try:
            base.first_step_s = _first_step(base_setup, base_step, base_context)
        except Exception as err:
            base.status, base.reason = "failed", f"{type(err).__name__}: {err}"
    trials.append(base)
    # name -> (its step, its settings, its deadline, its examples per step over the batch asked)
    steps: dict[str, tuple[Callable[[], Any], Callable[[], Any], list[float], int]] = {}

    for combo in _plan(applicable)[1:]:
        name = " + ".join(knob_label(k) for k in combo)
        trial = Trial(name, [knob_label(k) for k in combo], "ok")
        trials.append(trial)
        left = trials_end - time.perf_counter()
        if left <= 0 or base.status != "ok":
            trial.status = "skipped"
            trial.reason = ("the time budget was spent" if left <= 0
                            else "the baseline could not be measured")
            continue
        setup = fresh()
        # rounds start until `soft`; a step still refuses to start after `deadline`, a little
        # later, so that a round in progress can finish
        soft = time.perf_counter() + min(timeout, left)
        deadline = [soft + max(0.25, timeout / 4)]
        try:
            for knob in combo:
                knob.apply(setup)
            step = _step(setup, deadline)
            context = step.settings
            trial.first_step_s = _first_step(setup, step, context)
            # a trial with a larger batch does more work per step: compared per example
            found = bench.compare_rounds(base_step, {name: step}, device=device, rounds=ROUNDS,
                                         round_time=round_time, deadline=soft,
                                         contexts={"baseline": base_context, name: context},
                                         work={name: setup.batch_factor})
        except TrialStopped:
            trial.status = "timed out"
            trial.reason = f"still running after {deadline[0] - start:.1f} s of the budget; stopped"
            continue
        except Exception as err:  # reported in the trial, never raised to the caller
            trial.status, trial.reason = "failed", f"{type(err).__name__}: {err}".strip()
            continue
        if len(found[name].ratios) < bench.MIN_ROUNDS:
            trial.status = "timed out"
            trial.reason = (f"{len(found[name].ratios)} rounds before its deadline, fewer than "
                            f"the {bench.MIN_ROUNDS} a verdict needs")
            continue
        _fill(trial, found[name])
        if base.median_s is None:
            _fill(base, found[name], baseline=True)
        steps[name] = (step, context, deadline, setup.batch_factor)

    chosen = choose(trials)
    confirmation, unconfirmed, gain, dropped, doubtful, added = "", None, 1.0, {}, {}, {}
    if chosen is not None:
        chosen, confirmation, gain, unconfirmed, dropped, doubtful, added = _confirm(
            chosen, trials, steps, base_step, base_context, base_deadline, device, round_time,
            start + budget_s, max(0.25, timeout / 4))
    busy = next((t.busy for t in trials if t.busy), "")
    chosen_knobs = set(chosen.knobs) if chosen else set()
    for knob in applicable:
        label = knob_label(knob)
        alone = next((t for t in trials if t.knobs == [label]), None)
        hardware = _in_hardware_terms(knob, base_setup)
        if alone is None or alone.status != "ok":
            what = alone.status if alone else "not run"
            reasons[label] = f"{what}: {alone.reason if alone else ''}".rstrip(": ")
        elif alone.verdict == "machine busy":
            reasons[label] = f"no verdict: {alone.busy}{hardware}"
        elif label in dropped:
            reasons[label] = (f"left out: {dropped[label]}, so it adds no clear gain{hardware}")
        elif unconfirmed is not None and label in unconfirmed.knobs:
            reasons[label] = (f"left out: {alone.speedup:.2f}x alone, and the winning "
                              f"{unconfirmed.name} was not confirmed against the baseline "
                              f"({confirmation.split(';')[0]}){hardware}")
        elif label in chosen_knobs and label in doubtful:
            reasons[label] = (f"kept: {alone.speedup:.2f}x alone, and in the recommended "
                              f"{chosen.name} ({gain:.2f}x the baseline when confirmed), though "
                              f"in the confirmation {doubtful[label]}{hardware}")
        elif label in chosen_knobs:
            # what the knob adds is what the recommendation loses without it, in the same
            # rounds; alone it may show no clear difference and still add a gain in company
            share = (f"; in the confirmation, {added[label]}: it adds a clear gain there"
                     if label in added else
                     "; the recommendation without it was not timed, so what it adds there is "
                     "not known" if len(chosen_knobs) > 1 else "")
            reasons[label] = (f"kept: {alone.speedup:.2f}x alone ({alone.verdict}); the "
                              f"recommended {chosen.name} was {gain:.2f}x the baseline when "
                              f"confirmed{share}{hardware}")
        elif alone.verdict != "faster":
            reasons[label] = (f"left out: {alone.speedup:.2f}x alone, {alone.verdict}"
                              f"{hardware}")
        else:
            reasons[label] = (f"left out: {alone.speedup:.2f}x alone, but a configuration "
                              f"without it does as well (within {MARGIN - 1:.0%}){hardware}")
    recommended = {k.name: k.value for k in knobs if knob_label(k) in chosen_knobs}
    # the "not applicable" lines were listed first: put every trial in the plan's knob order
    order = {knob_label(k): i for i, k in enumerate(knobs)}
    trials.sort(key=lambda t: (t.knobs != [], len(t.knobs),
                               [order.get(k, 99) for k in t.knobs]))
    result = TuneResult(str(device), threads, budget_s, time.perf_counter() - start, trials,
                        recommended, chosen.name if chosen else "baseline", gain,
                        {knob_label(k): reasons[knob_label(k)] for k in knobs},
                        confirmation, busy)
    if record_as:
        measurements.add(record_as, result.to_dict(), note="torchhw.tune: trials and recommendation")
        measurements.add(f"{record_as} gain", result.gain, "x", result.recommended_trial)
    return result


def _confirm(chosen: Trial, trials: Sequence[Trial], steps: dict, base_step: Callable[[], Any],
             base_context: Callable[[], Any], base_deadline: list[float], device: torch.device,
             round_time: float, end: float, grace: float):
    """Time the winner against the baseline once more, in twice the rounds, beside the winner
    without each of its knobs (where that was a trial of its own): a knob stays only if the
    winner is clearly faster than the winner without it, in the same rounds.

    Returns (the trial to recommend or None, the confirmation's text, its gain, the trial that
    was not confirmed or None, {knob: why it was dropped}, {knob in the recommendation that
    the confirmation found adding nothing clear: why}, {knob of the recommendation: the gain
    the confirmation measured it adding}).
    """
    by_name = {t.name: t for t in trials}
    subsets = {}
    for knob in chosen.knobs:
        rest = " + ".join(k for k in chosen.knobs if k != knob)
        if rest in steps:
            subsets[knob] = rest
    arms = [chosen.name, *subsets.values()]
    for name in arms:
        steps[name][2][0] = end + grace
    base_deadline[0] = end + grace
    try:
        final = bench.compare_rounds(
            base_step, {name: steps[name][0] for name in arms}, device=device, rounds=2 * ROUNDS,
            round_time=round_time, deadline=end,
            contexts={"baseline": base_context, **{name: steps[name][1] for name in arms}},
            work={name: steps[name][3] for name in arms})
    except TrialStopped:
        return None, "stopped at the end of the budget; not confirmed: the baseline is " \
                     "recommended", 1.0, chosen, {}, {}, {}
    dropped, added = {}, {}
    for knob, rest in subsets.items():
        needed = bench.Comparison(rest, chosen.name, final[rest].cand_times,
                                  final[chosen.name].cand_times, final[chosen.name].busy,
                                  steps[rest][3], steps[chosen.name][3])
        said = f"{chosen.name} was {needed.ratio:.2f}x {rest} without it ({needed.verdict})"
        if needed.verdict != "faster":
            dropped[knob] = said
        else:
            added[knob] = said
    pick = chosen.name
    if dropped:  # the best confirmed configuration without a knob that adds nothing clear
        kept = [subsets[k] for k in dropped if final[subsets[k]].verdict == "faster"]
        pick = max(kept, key=lambda n: final[n].ratio, default=None)
    if pick is None or final[pick].verdict != "faster":
        again = final[pick or chosen.name]
        return (None, f"{again}; not confirmed: the baseline is recommended", 1.0, chosen,
                dropped, {}, {})
    again = final[pick]
    # a knob dropped from the winner can remain in the subset picked (when two were dropped):
    # it is kept, and its reason says what the confirmation found
    doubtful = {k: why for k, why in dropped.items() if k in by_name[pick].knobs}
    dropped = {k: why for k, why in dropped.items() if k not in by_name[pick].knobs}
    # what each knob adds was measured against the winner; it holds for the pick only if the
    # pick is the winner
    added = added if pick == chosen.name else {}
    # the confirmation's own figure: the best of many trials is biased upwards
    return by_name[pick], str(again), again.ratio, None, dropped, doubtful, added


def _fill(trial: Trial, found: bench.Comparison, baseline: bool = False) -> None:
    """A trial's figures from its comparison with the baseline (or the baseline's own)."""
    times = found.base_times if baseline else found.cand_times
    trial.times = list(times)
    trial.median_s = statistics.median(times)
    trial.iqr_s = (statistics.quantiles(times, n=4)[2] - statistics.quantiles(times, n=4)[0]
                   if len(times) >= 4 else max(times) - min(times))
    trial.runs = len(times)
    if not baseline:
        trial.base_median_s = statistics.median(found.base_times)
        trial.speedup, trial.spread = found.ratio, found.interval
        trial.verdict, trial.busy = found.verdict, found.busy


def _in_hardware_terms(knob: Knob, setup: Setup) -> str:
    """A knob's meaning on this machine, for its reason: '(2 threads -> 1 on this 2-core ...)'."""
    if knob.name == "threads":
        from .cpu import affinity_count

        cores = affinity_count()
        return f" ({setup.threads} threads -> {max(1, setup.threads // 2)} on this {cores}-CPU machine)"
    if knob.name == "batch_size":
        b = len(setup.batch[0])
        return (f" (batch {b} -> {2 * b}; its speed-up is in examples per second, and half the "
                f"steps per epoch at the same learning rate can learn less per epoch: judge it "
                f"by time to accuracy)")
    if knob.name == "autocast" and setup.device.type == "cpu":
        from . import hardware

        info = hardware.cpu_info()
        if info.arch not in ("x86_64", "AMD64"):
            return ""  # the x86 flags below say nothing about an Arm CPU's bf16 or fp16
        isa = info.isa
        if knob.value == "bfloat16":
            has = "AMX" if isa.get("amx_bf16") else "AVX-512 BF16" if isa.get("avx512_bf16") else ""
        else:
            has = "AMX FP16" if isa.get("amx_fp16") else \
                "AVX-512 FP16" if isa.get("avx512_fp16") else ""
        return (f" (this CPU has {has} for it)" if has
                else " (this CPU has no instructions for it: a slow path)")
    return ""

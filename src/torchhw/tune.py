"""An autotuner: which speed knobs apply on this machine, what each one buys, what to use.

Notebook 09 measures each technique by hand, one at a time; this module does the same
search for any model, within a time budget, so a reader can ask "what should I turn on
here?" for their own model and machine:

    result = tune(model, (x, y), budget_s=10)
    result.recommended          # {'channels_last': True, 'autocast': 'bfloat16', ...}
    result                      # a table: every trial, its speed-up over the baseline, why

What it promises:

- every knob in the list is reported: measured, "not applicable" with the reason (fp16 with
  GradScaler needs a GPU), "failed" with the error, "timed out", or "skipped" when the budget
  ran out. Nothing is dropped in silence;
- the set and order of trials is fixed by the knobs and the machine, never by the clock:
  the baseline, each applicable knob alone, then every compatible pair, then all of them;
- every trial has a deadline: it runs in a thread that checks a stop flag before each step,
  so a slow trial ends within one step of its deadline;
- a trial's time is one full training step (forward, loss, backward, optimizer step),
  measured with :func:`torchhw.bench.measure` on a private copy of the model, and global
  settings a knob changes (TF32, cudnn.benchmark) are restored after it.
"""

from __future__ import annotations

import copy
import itertools
import statistics
import threading
import time
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Sequence

import torch
from torch import nn

from . import bench, measurements
from .device import synchronize
from .knobs import Knob, Setup, default_knobs
from .knobs import label as knob_label

MARGIN = 1.05  # a knob is kept only if it is at least 5% faster: smaller gains are noise here


class TrialStopped(RuntimeError):
    """A trial passed its deadline; raised inside the trial's own thread."""


@dataclass
class Trial:
    """One measured configuration. ``speedup`` and ``spread`` are against the baseline."""

    name: str
    knobs: list[str]
    status: str  # ok, failed, timed out, skipped, not applicable
    reason: str = ""
    median_s: float | None = None
    iqr_s: float | None = None
    runs: int = 0
    first_step_s: float | None = None  # includes compiling and algorithm search
    speedup: float | None = None
    spread: tuple[float, float] | None = None  # 25th and 75th percentile of the ratio
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

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for t in data["trials"]:
            t.pop("times")
        return data

    def knob_gains(self) -> dict[str, float | None]:
        """Each knob's measured speed-up alone (None when it was not measured)."""
        return {t.name: t.speedup for t in self.trials if len(t.knobs) == 1}

    def rows(self) -> list[list[str]]:
        rows = [["trial", "status", "median step", "speed-up", "IQR of ratio", "note"]]
        for t in self.trials:
            rows.append([
                t.name, t.status, bench.fmt_time(t.median_s) if t.median_s else "",
                f"{t.speedup:.2f}x" if t.speedup else "",
                f"{t.spread[0]:.2f}-{t.spread[1]:.2f}" if t.spread else "", t.reason])
        return rows

    def __str__(self) -> str:
        rows = self.rows()
        widths = [max(len(r[i]) for r in rows) for i in range(5)]
        lines = ["  ".join(c.ljust(w) for c, w in zip(r[:5], widths)) + "  " + r[5] for r in rows]
        lines.append(f"recommended: {self.recommended_trial} ({self.gain:.2f}x the baseline), "
                     f"{self.spent_s:.1f} s of a {self.budget_s:g} s budget")
        lines += [f"  {k}: {v}" for k, v in self.reasons.items()]
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_markdown_(self) -> str:
        rows = self.rows()
        lines = ["| " + " | ".join(rows[0]) + " |", "|---|---|--:|--:|--:|---|"]
        lines += ["| " + " | ".join(r) + " |" for r in rows[1:]]
        lines += ["", f"**recommended:** {self.recommended_trial} ({self.gain:.2f}x the "
                      f"baseline, {self.spent_s:.1f} s of a {self.budget_s:g} s budget)", ""]
        lines += [f"- `{k}`: {v}" for k, v in self.reasons.items()]
        return "\n".join(lines)


def ratio_spread(baseline: Sequence[float], other: Sequence[float]) -> tuple[float, float, float]:
    """Median and quartiles of baseline/other over every pair of runs (above 1: faster)."""
    ratios = sorted(b / o for b in baseline for o in other)
    if len(ratios) < 4:
        m = statistics.median(ratios)
        return m, ratios[0], ratios[-1]
    q1, q2, q3 = statistics.quantiles(ratios, n=4)
    return q2, q1, q3


def _step(setup: Setup, stop: threading.Event) -> Callable[[], float]:
    model = setup.model
    if setup.compile:
        model = torch.compile(model)
    optimizer = setup.make_optimizer(setup.model.parameters())
    scaler = torch.amp.GradScaler(setup.device.type) if setup.scaler else None
    x, y = setup.batch

    def step() -> float:
        if stop.is_set():
            raise TrialStopped("deadline passed")
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(setup.device.type, dtype=setup.autocast or torch.float32,
                            enabled=setup.autocast is not None):
            loss = setup.loss_fn(model(x), y)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
        return loss.detach()
    return step


def _run(setup: Setup, min_run_time: float, stop: threading.Event, out: dict[str, Any]) -> None:
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(setup.threads)  # for the first step too, not only the timed ones
        with ExitStack() as stack:
            for setting in setup.settings:
                stack.enter_context(setting())
            step = _step(setup, stop)
            start = time.perf_counter()
            loss = step()
            synchronize(setup.device)
            out["first"] = time.perf_counter() - start
            if not torch.isfinite(loss).all():
                raise FloatingPointError(f"the loss is {loss.item()}: this setting breaks training")
            r = bench.measure(step, label="step", threads=setup.threads, device=setup.device,
                              min_run_time=min_run_time)
            out["result"] = r
    except BaseException as err:  # reported in the trial, never raised to the caller
        out["error"] = err
    finally:
        torch.set_num_threads(threads)


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


def choose(trials: Sequence[Trial]) -> Trial | None:
    """The trial to recommend, or None for the baseline.

    The fastest trial at least MARGIN faster than the baseline, unless one with fewer knobs
    is within MARGIN of it: a knob stays only if it adds a gain the noise could not make.
    """
    winners = [t for t in trials if t.status == "ok" and t.knobs and (t.speedup or 0) >= MARGIN]
    top = max((t.speedup or 0 for t in winners), default=0.0)
    return min((t for t in winners if (t.speedup or 0) * MARGIN >= top),
               key=lambda t: (len(t.knobs), -(t.speedup or 0)), default=None)


def tune(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor], *, budget_s: float = 10,
         trial_timeout_s: float | None = None, min_run_time: float = 0.2,
         knobs: Sequence[Knob] | None = None, compile: bool = False,
         loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
         make_optimizer: Callable[[Any], torch.optim.Optimizer] | None = None,
         threads: int | None = None, record_as: str | None = "tune") -> TuneResult:
    """Try the knobs on ``model`` training on ``batch``; recommend the fastest configuration.

    The model and batch must be on the device to tune for; they are copied, never changed.
    ``trial_timeout_s`` defaults to half the budget (at least 2 s). ``knobs`` defaults to
    :func:`default_knobs` (``compile`` opts in to torch.compile). The result is recorded
    for the course report under ``record_as`` (None: not recorded).
    """
    start = time.perf_counter()
    device = next(model.parameters()).device
    threads = threads or torch.get_num_threads()
    knobs = list(default_knobs(compile) if knobs is None else knobs)
    timeout = trial_timeout_s or max(2.0, budget_s / 2)
    loss_fn = loss_fn or nn.functional.cross_entropy
    make_optimizer = make_optimizer or (lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9))

    def fresh() -> Setup:
        return Setup(copy.deepcopy(model), tuple(t.clone() for t in batch), device, threads,
                     loss_fn, make_optimizer)

    trials: list[Trial] = []
    applicable = []
    reasons: dict[str, str] = {}
    for knob in knobs:
        why = knob.check(fresh())
        if why is None:
            applicable.append(knob)
        else:
            trials.append(Trial(knob_label(knob), [knob_label(knob)], "not applicable", why))
            reasons[knob_label(knob)] = f"not applicable: {why}"
    base: Trial | None = None
    for combo in _plan(applicable):
        name = " + ".join(knob_label(k) for k in combo) or "baseline"
        trial = Trial(name, [knob_label(k) for k in combo], "ok")
        left = budget_s - (time.perf_counter() - start)
        if left <= 0 or (combo and (base is None or base.status != "ok")):
            trial.status = "skipped"
            trial.reason = ("the time budget was spent" if left <= 0
                            else "the baseline could not be measured")
            trials.append(trial)
            continue
        setup = fresh()
        try:
            for knob in combo:
                knob.apply(setup)
        except Exception as err:
            trial.status, trial.reason = "failed", f"{type(err).__name__}: {err}"
            trials.append(trial)
            continue
        stop, out = threading.Event(), {}
        worker = threading.Thread(target=_run, args=(setup, min(min_run_time, left / 4), stop, out),
                                  daemon=True, name=f"torchhw-tune-{name}")
        worker.start()
        # every other trial is compared with the baseline: it may use all that is left
        deadline = max(left, timeout) if not combo else min(timeout, max(left, 0.5))
        worker.join(deadline)
        if worker.is_alive():
            stop.set()
            worker.join(timeout)  # the step in progress finishes, the next one stops
            trial.status = "timed out"
            trial.reason = f"still running after {deadline:.1f} s; stopped"
            if worker.is_alive():
                trial.reason += " (its last step is still finishing in the background)"
        elif "error" in out:
            err = out["error"]
            trial.status, trial.reason = "failed", f"{type(err).__name__}: {err}".strip()
        else:
            r = out["result"]
            trial.median_s, trial.iqr_s, trial.runs = r.median, r.iqr, r.runs
            trial.times = list(r.measurement.times)
            trial.first_step_s = out["first"]
        if not combo:
            base = trial
        if trial.status == "ok" and base is not None and base.status == "ok":
            _, low, high = ratio_spread(base.times, trial.times)
            trial.speedup, trial.spread = base.median_s / trial.median_s, (low, high)
        trials.append(trial)

    chosen = choose(trials)
    chosen_knobs = set(chosen.knobs) if chosen else set()
    for knob in applicable:
        label = knob_label(knob)
        alone = next((t for t in trials if t.knobs == [label]), None)
        if alone is None or alone.status != "ok":
            what = alone.status if alone else "not run"
            reasons[label] = f"{what}: {alone.reason if alone else ''}".rstrip(": ")
        elif label in chosen_knobs:
            reasons[label] = (f"kept: {alone.speedup:.2f}x alone; the recommended "
                              f"{chosen.name} ({chosen.speedup:.2f}x) includes it, and no "
                              f"configuration with fewer knobs came within {MARGIN - 1:.0%}")
        elif (alone.speedup or 0) < MARGIN:
            reasons[label] = f"left out: {alone.speedup:.2f}x alone, not {MARGIN:.2f}x or better"
        else:
            reasons[label] = (f"left out: {alone.speedup:.2f}x alone, but a configuration "
                              f"without it does as well (within {MARGIN - 1:.0%})")
    recommended = {k.name: k.value for k in knobs if knob_label(k) in chosen_knobs}
    # the "not applicable" lines were listed first: put every trial in the plan's knob order
    order = {knob_label(k): i for i, k in enumerate(knobs)}
    trials.sort(key=lambda t: (t.knobs != [], len(t.knobs),
                               [order.get(k, 99) for k in t.knobs]))
    result = TuneResult(str(device), threads, budget_s, time.perf_counter() - start, trials,
                        recommended, chosen.name if chosen else "baseline",
                        chosen.speedup if chosen else 1.0,
                        {knob_label(k): reasons[knob_label(k)] for k in knobs})
    if record_as:
        measurements.add(record_as, result.to_dict(), note="torchhw.tune: trials and recommendation")
        measurements.add(f"{record_as} gain", result.gain, "x", result.recommended_trial)
    return result

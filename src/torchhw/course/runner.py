"""Executing the course with papermill, and the report of what this machine did.

    torchhw run                  # every notebook, quick mode, into runs/<timestamp>/
    torchhw run 00 tensors -p seed 1 --full

Each notebook runs on a fresh kernel. A failing notebook is reported with the failing cell
and error and the run goes on; the exit status says whether any failed. A ``-p`` value
goes to each notebook that declares that parameter; one that no selected notebook
declares is an error before anything runs (papermill itself only warns). Measurements a
notebook records with :func:`torchhw.measurements.add` end up in the report.

Every run leaves this machine's report card as ``card.json`` in its folder: the one notebook 10
writes (the runner gives it the run folder as ``card_dir``), or, when notebook 10 did not run or
failed, one measured by :func:`torchhw.cards.measure` (a short search, without tuning or
capstone). ``torchhw compare`` takes run folders, so two runs compare directly.
"""

from __future__ import annotations

import difflib
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Sequence

from .. import measurements as rec
from .paths import CourseError, discover, notebooks_dir, select

KERNEL = "python3"


def kernel_manager_class() -> type:
    """Kernels that talk over local IPC sockets in a private folder instead of TCP.

    Nothing on the network can reach them, and ipykernel no longer prints its "running over
    TCP without encryption" warning once per notebook. The folder is removed by
    :func:`remove_kernel_sockets` when the run ends.
    """
    from jupyter_client.manager import AsyncKernelManager

    class IPCKernelManager(AsyncKernelManager):
        def __init__(self, **kwargs: Any) -> None:
            kwargs.setdefault("transport", "ipc")
            kwargs.setdefault("ip", str(_socket_dir() / "kernel"))
            super().__init__(**kwargs)

    return IPCKernelManager


def _socket_dir() -> Path:
    folder = Path(tempfile.gettempdir()) / f"torchhw-kernels-{os.getpid()}"
    folder.mkdir(mode=0o700, exist_ok=True)
    return folder


def remove_kernel_sockets() -> None:
    shutil.rmtree(Path(tempfile.gettempdir()) / f"torchhw-kernels-{os.getpid()}",
                  ignore_errors=True)


def progress_wanted() -> bool:
    """Progress bars by default only for a person at a terminal.

    Off when TQDM_DISABLE is set (the Makefile sets it for tests and regenerated outputs), in
    CI (CI=true) and when stderr is not a terminal, so that logs and committed outputs never
    hold bars that differ from run to run.
    """
    if os.environ.get("TQDM_DISABLE", "").lower() not in ("", "0", "false"):
        return False
    if os.environ.get("CI", "").lower() not in ("", "0", "false"):
        return False
    return sys.stderr.isatty()


def parse_value(text: str) -> Any:
    """Read a -p value the way papermill does: True/False/None, int, float, else str."""
    if text in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[text]
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def declared_parameters(path: Path) -> dict[str, Any]:
    """Names and defaults in the notebook's cell tagged 'parameters'."""
    import papermill

    return {name: info["default"] for name, info in papermill.inspect_notebook(str(path)).items()}


@dataclass
class NotebookResult:
    name: str
    status: str  # "ok" or "failed"
    seconds: float
    output: str
    parameters: dict[str, Any]
    error: str = ""
    failing_cell: int | None = None
    failing_source: str = ""
    measurements: dict[str, Any] = field(default_factory=dict)


def _run_one(path: Path, out: Path, parameters: dict[str, Any], records: Path,
             timeout: int, progress: bool) -> NotebookResult:
    import papermill
    from papermill.exceptions import PapermillExecutionError

    records.unlink(missing_ok=True)
    os.environ[rec.ENV_VAR] = str(records)  # the kernel inherits it
    start = time.perf_counter()
    result = NotebookResult(path.stem, "ok", 0.0, str(out), parameters)
    try:
        papermill.execute_notebook(
            str(path), str(out), parameters=parameters, kernel_name=KERNEL,
            progress_bar=progress, cwd=str(path.parent), execution_timeout=timeout,
            start_timeout=120, kernel_manager_class=kernel_manager_class(),
        )
    except PapermillExecutionError as err:
        result.status = "failed"
        result.error = f"{err.ename}: {err.evalue}"
        result.failing_cell = err.exec_count
        result.failing_source = err.source
    except Exception as err:  # kernel death, timeout, bad notebook: report, go on
        result.status = "failed"
        result.error = f"{type(err).__name__}: {err}"
    finally:
        os.environ.pop(rec.ENV_VAR, None)
    result.seconds = time.perf_counter() - start
    result.measurements = rec.load(records)
    return result


def run_course(names: Sequence[str] = (), parameters: dict[str, Any] | None = None,
               out_dir: Path | None = None, notebooks: Path | None = None,
               quick: bool = True, timeout: int = 600, progress: bool | None = None,
               echo: Any = print, card: bool = True) -> tuple[Path, list[NotebookResult]]:
    """Run the chosen notebooks in order; return the run folder and each result.

    ``card``: leave ``card.json`` in the run folder (see the module's docstring); False skips
    the measurement a run without notebook 10 would need.

    ``progress``: a per-cell bar for each notebook; None decides by :func:`progress_wanted`.
    When off, the kernels get TQDM_DISABLE=1 too, so long cells show no bars either.
    """
    if progress is None:
        progress = progress_wanted()
    if not progress:
        os.environ["TQDM_DISABLE"] = "1"
    folder = notebooks_dir(notebooks)
    paths = select(discover(folder), names)
    if not paths:
        raise CourseError(f"{folder} holds no notebooks named NN_topic.ipynb")
    parameters = dict(parameters or {})
    declared = {p: declared_parameters(p) for p in paths}
    known = set().union(*(set(d) for d in declared.values()))
    for name in parameters:
        if name not in known:
            close = difflib.get_close_matches(name, sorted(known), n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise CourseError(f"unknown parameter {name!r}: no selected notebook declares it."
                              f"{hint} Declared: {', '.join(sorted(known))}.")
    # absolute: each kernel runs in the notebooks folder, not here
    out_dir = (out_dir or Path("runs") / datetime.now().strftime("%Y-%m-%d_%H%M%S")).resolve()
    (out_dir / "records").mkdir(parents=True, exist_ok=True)
    results = []
    for i, path in enumerate(paths, 1):
        mine = {k: v for k, v in parameters.items() if k in declared[path]}
        if "quick" in declared[path]:
            mine.setdefault("quick", quick)
        if card and "card_dir" in declared[path]:
            mine.setdefault("card_dir", str(out_dir))
        echo(f"[{i}/{len(paths)}] {path.stem} {mine} ...", flush=True)
        r = _run_one(path, out_dir / path.name, mine, out_dir / "records" / f"{path.stem}.json",
                     timeout, progress)
        where = f" in cell [{r.failing_cell}]" if r.failing_cell is not None else ""
        echo(f"      {r.status} in {r.seconds:.1f} s" +
             (f": {r.error.splitlines()[0] if r.error else ''}{where}" if r.error else ""),
             flush=True)
        results.append(r)
    remove_kernel_sockets()
    card_note = leave_card(out_dir, results, echo, quick) if card else "not asked for (card=False)"
    write_report(out_dir, results, card_note)
    echo("\n" + summary_table(results))
    echo(f"\nreport: {out_dir / 'report.md'}")
    return out_dir, results


def summary_table(results: Sequence[NotebookResult]) -> str:
    """A plain-text table: notebook, status, seconds, first line of any error."""
    width = max([len(r.name) for r in results] + [8])
    lines = [f"{'notebook':<{width}}  status  seconds  error", "-" * (width + 32)]
    for r in results:
        err = r.error.splitlines()[0][:80] if r.error else ""
        lines.append(f"{r.name:<{width}}  {r.status:<6}  {r.seconds:7.1f}  {err}")
    failed = sum(r.status != "ok" for r in results)
    total = sum(r.seconds for r in results)
    lines.append(f"{len(results) - failed} passed, {failed} failed, {total:.1f} s in all")
    return "\n".join(lines)


def _hardware_summary() -> dict[str, Any]:
    from .. import hardware, peak

    survey = hardware.survey()
    fp32 = peak.flops(survey.cpu)
    return {"rows": survey.rows(), "cpu_fp32_peak_gflops": fp32.gflops, "peak_basis": fp32.basis}


def leave_card(out_dir: Path, results: Sequence[NotebookResult] = (), echo: Any = print,
               quick: bool = True) -> str:
    """Make ``out_dir/card.json``: the card a notebook wrote there, else the card a notebook
    recorded (``measurements.add("capstone card", card)``: notebook 10 with its own
    ``card_dir``), else one measured now. Each is checked. Returns a line for the report on
    where the card came from."""
    from .. import cards

    target = out_dir / "card.json"
    written = sorted((p for p in out_dir.glob("*.json") if p.name not in ("report.json", "card.json")),
                     key=lambda p: p.stat().st_mtime)
    recorded = [r.measurements["capstone card"]["value"] for r in results
                if r.status == "ok" and "capstone card" in r.measurements]
    problems = []
    for path in reversed(written):   # the newest card file the notebooks left here
        try:
            cards.load(path)
        except cards.CardError as err:
            problems.append(f"{path.name} was refused: {err}")
            continue
        os.replace(path, target)
        return "written by notebook 10"
    if recorded:
        try:
            cards.save(recorded[-1], out_dir, "card.json")
            return "recorded by notebook 10 (which wrote its own copy into its card_dir)"
        except cards.CardError as err:
            problems.append(f"notebook 10's recorded card was refused: {err}")
    echo("measuring this machine's report card (notebook 10 did not leave one) ...", flush=True)
    budget = 6.0 if quick else 20.0
    try:
        cards.save(cards.measure(budget_s=budget, by="torchhw run (without notebook 10)"),
                   out_dir, "card.json")
    except Exception as err:  # a card is an extra: its failure must not cost the run's report
        problems.append(f"measuring one failed: {type(err).__name__}: {err}")
        return "; ".join(problems)
    return "; ".join(problems + ["measured by torchhw run (notebook 10 did not leave one): no "
                                 "tuning or capstone"])


def write_report(out_dir: Path, results: Sequence[NotebookResult], card_note: str = "") -> None:
    """report.json (everything) and report.md (for people) in ``out_dir``."""
    hw = _hardware_summary()
    data = {
        "created": datetime.now().isoformat(timespec="seconds"),
        "card": {"file": "card.json" if (out_dir / "card.json").is_file() else None, "note": card_note},
        "hardware": hw,
        "notebooks": [asdict(r) for r in results],
        "passed": sum(r.status == "ok" for r in results),
        "failed": sum(r.status != "ok" for r in results),
    }
    (out_dir / "report.json").write_text(json.dumps(data, indent=1, default=str))
    md = [f"# torchhw course run, {data['created']}", "",
          f"{data['passed']} passed, {data['failed']} failed.", "", "## Machine", "",
          "| item | value |", "|---|---|"]
    md += [f"| {k} | {v} |" for k, v in hw["rows"]]
    md += ["", "## Report card", ""]
    if (out_dir / "card.json").is_file():
        from .. import cards

        md += [f"[card.json](card.json), {card_note}. Compare it with another machine's: "
               f"`torchhw compare {out_dir / 'card.json'} reference/cards/<card>.json`.", "",
               "```", cards.summary(cards.load(out_dir / "card.json")), "```"]
    else:
        md += [f"No card: {card_note}."]
    md += ["", "## Notebooks", "", "| notebook | status | seconds | parameters |",
           "|---|---|--:|---|"]
    md += [f"| [{r.name}]({Path(r.output).name}) | {r.status} | {r.seconds:.1f} | "
           f"{r.parameters} |" for r in results]
    for r in results:
        if r.status != "ok":
            md += ["", f"### {r.name} failed", "", f"In cell [{r.failing_cell}]:", "",
                   "```python", r.failing_source.strip(), "```", "", "```", r.error.strip(), "```"]
    measured = [r for r in results if r.measurements]
    if measured:
        md += ["", "## Measured", "", "| notebook | measurement | value | unit |", "|---|---|--:|---|"]
        for r in measured:
            for name, m in r.measurements.items():
                value = m["value"]
                if isinstance(value, float):
                    value = f"{value:,.4g}"
                elif isinstance(value, (list, dict)):
                    value = json.dumps(value)[:80]
                md.append(f"| {r.name} | {name} | {value} | {m['unit']} |")
    (out_dir / "report.md").write_text("\n".join(md) + "\n")

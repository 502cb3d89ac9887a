"""Regenerating the committed outputs: ``make notebooks`` (``torchhw regen [NOTEBOOK ...]``).

Each notebook is executed in place on a fresh kernel with its default parameters. What is
committed is therefore one top-to-bottom run of the current code, and three things are stored
with it so that the tests can hold it to that:

- the hash of every code cell (:func:`source_hash`): editing a cell without regenerating
  fails ``tests/test_structure.py``;
- a line at the end of the opening cell saying which torch, machine and date made the outputs
  (:func:`verified_line`), so a reader knows what the stored figures came from;
- strict warnings (``TORCHHW_STRICT_WARNINGS=1``, read by :func:`torchhw.notebook.setup`): a
  DeprecationWarning or FutureWarning raised by a notebook is an error, here as in the tests.
"""

from __future__ import annotations

import datetime
import hashlib
import os
import re
import time
from pathlib import Path
from typing import Any, Sequence

from .. import measurements as rec
from .paths import CourseError, discover, notebooks_dir, select
from .runner import KERNEL, kernel_manager_class, remove_kernel_sockets

STRICT_WARNINGS = "TORCHHW_STRICT_WARNINGS"
VERIFIED = re.compile(r"\n*\*(Outputs verified with torch |输出验证于 torch )[^\n]*\*\s*$")


def source_hash(nb: Any) -> str:
    """A hash of every code cell's source: changes whenever code changes."""
    text = "\n\x00".join(c.source for c in nb.cells if c.cell_type == "code")
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def machine_label() -> dict[str, str]:
    """torch's version, the CPU, the kernels torch picked on it and the threads; for the line."""
    import torch

    from ..hardware import cpu_info, cpu_short_name

    cpu = cpu_info()
    return {"torch": torch.__version__, "machine": cpu_short_name(cpu),
            "kernels": torch.backends.cpu.get_cpu_capability(),
            "threads": str(torch.get_num_threads()),
            "date": datetime.date.today().isoformat()}


def verified_line(label: dict[str, str], lang: str = "en") -> str:
    if lang == "zh":
        machine = re.sub(r", (\d+) cores?$", r"，\1 个核心", label["machine"])
        return (f"*输出验证于 torch {label['torch']}，{machine}（{label['kernels']} 内核，"
                f"{label['threads']} 个线程），{label['date']}，由 `make notebooks` 生成。"
                f"凡取决于机器的结果，你的输出都会不同。*")
    return (f"*Outputs verified with torch {label['torch']} on {label['machine']} "
            f"({label['kernels']} kernels, {label['threads']} threads), {label['date']}, "
            f"by `make notebooks`. Yours will differ where they depend on the machine.*")


def with_verified_line(intro: str, label: dict[str, str], lang: str = "en") -> str:
    """The opening cell with its 'Outputs verified with ...' line replaced or added."""
    return VERIFIED.sub("", intro).rstrip() + "\n\n" + verified_line(label, lang)


def regenerate(names: Sequence[str] = (), notebooks: Path | None = None, timeout: int = 600,
               echo: Any = print) -> list[Path]:
    """Re-execute notebooks in place on a fresh kernel; store hash and 'verified' line."""
    import nbclient
    import nbclient.exceptions
    import nbformat

    folder = notebooks_dir(notebooks)
    paths = select(discover(folder), names)
    os.environ.pop(rec.ENV_VAR, None)
    os.environ["TQDM_DISABLE"] = "1"
    os.environ[STRICT_WARNINGS] = "1"
    label = machine_label()
    try:
        for path in paths:
            start = time.perf_counter()
            nb = nbformat.read(path, as_version=4)
            for cell in nb.cells:
                if cell.cell_type == "code":
                    cell.outputs, cell.execution_count = [], None
                    cell.metadata.pop("execution", None)
            client = nbclient.NotebookClient(nb, timeout=timeout, kernel_name=KERNEL,
                                             record_timing=False,
                                             kernel_manager_class=kernel_manager_class(),
                                             resources={"metadata": {"path": str(folder)}})
            try:
                client.execute()
            except nbclient.exceptions.CellExecutionError as err:
                # keep the file as it was; say which cell failed without the ANSI traceback
                raise CourseError(f"{path.name}: a cell failed, outputs not written.\n"
                                  f"{err.ename}: {err.evalue}") from None
            nb.metadata.pop("papermill", None)
            lang = nb.metadata.get("torchhw", {}).get("lang", "en")
            nb.metadata["torchhw"] = {"source_hash": source_hash(nb), "verified": label}
            if lang != "en":  # an edition (notebooks/zh/) keeps saying which it is
                nb.metadata["torchhw"]["lang"] = lang
            nb.cells[0].source = with_verified_line(nb.cells[0].source, label, lang)
            nbformat.write(nb, path)
            echo(f"{path.name}: regenerated in {time.perf_counter() - start:.1f} s", flush=True)
    finally:
        remove_kernel_sockets()
    return paths

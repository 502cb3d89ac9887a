"""The one set-up call every notebook makes after validating its parameters.

    device = setup(seed=seed, device=device, lang=lang)

sets the language of the package's messages (:mod:`torchhw.i18n`: "en", or "zh" in the Chinese
edition), seeds every random generator, applies the plot defaults, sets the thread count when asked,
picks the device (raising DeviceUnavailable for one that is not here) and prints what it
chose, so the top of every executed notebook says what it ran on. On a CUDA machine it also
sets ``CUBLAS_WORKSPACE_CONFIG`` (unless it is set already), which cuBLAS reads at its first
call and needs for the deterministic runs of notebooks 04 and 10 (:func:`torchhw.train.deterministic`).
"""

from __future__ import annotations

import os
import random
import warnings

import numpy as np
import torch

from . import i18n, plots
from .device import CUBLAS_DETERMINISTIC, describe, pick_device, use


def seed_everything(seed: int) -> None:
    """Seed Python's, NumPy's and torch's generators (all devices) with ``seed``."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device


def strict_warnings() -> bool:
    """Under ``TORCHHW_STRICT_WARNINGS=1`` (tests, ``make notebooks``) turn warnings into errors.

    A FutureWarning from anywhere, and a DeprecationWarning raised by the notebook's own code or
    by torchhw, means a cell teaches an API that is on its way out: better to fail the tests
    than to teach it. A reader's own runs are left alone.
    """
    if os.environ.get("TORCHHW_STRICT_WARNINGS") != "1":
        return False
    warnings.filterwarnings("error", category=FutureWarning)
    warnings.filterwarnings("error", category=DeprecationWarning, module=r"(__main__|torchhw)(\.|$)")
    return True


def setup(seed: int = 0, device: str = "auto", threads: int | None = None,
          verbose: bool = True, lang: str = i18n.DEFAULT) -> torch.device:
    """Set the language, seed, style plots, set threads (None keeps torch's default), pick the device."""
    i18n.set_language(lang)
    chosen = pick_device(device)
    use(chosen)   # cuda:1 becomes the current device: streams and events default to it
    if chosen.type == "cuda":
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_DETERMINISTIC)
    strict_warnings()
    seed_everything(seed)
    plots.use_defaults()
    if threads:
        torch.set_num_threads(threads)
    if verbose:
        how = i18n.tr("chosen automatically") if str(device) == "auto" else i18n.tr("as asked")
        print(i18n.tr("device: {device} ({how}); seed {seed}; torch {torch}; {threads} CPU threads",
                      device=describe(chosen), how=how, seed=seed, torch=torch.__version__,
                      threads=torch.get_num_threads()))
    return chosen


def say(message: str, /, **fields: object) -> None:
    """Print ``message`` (with its ``{fields}`` filled in) in the reader's language: what a
    cell says about this machine, such as which device the work stayed on."""
    print(i18n.tr(message, **fields))


def skip(reason: str, /, **fields: object) -> None:
    """Say that a section is skipped on this machine and why, in the reader's language."""
    print(i18n.tr("skipped: {reason}", reason=i18n.tr(reason, **fields)))

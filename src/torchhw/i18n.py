"""The language of what the package says to a reader: English, or Chinese (中文) for the Chinese edition.

Every notebook has a ``lang`` parameter (``"en"`` in the English notebooks, ``"zh"`` in
``notebooks/zh/``) and passes it to :func:`torchhw.notebook.setup`, which calls
:func:`set_language`. From then on the messages a reader sees (the exercise checkers' feedback
and hints, parameter errors, what a section skips on this machine) come in that language.

A message is written in English where it is raised, through :func:`tr`::

    raise Wrong(tr("returned {kind}: return a pair, (new_param, new_velocity).", kind=name))

and its translation is looked up by the English text, as gettext does. The catalogs are JSON
files in ``torchhw/locale/<lang>/``, one per module that speaks, mapping the English template
to its translation with the same ``{fields}``. ``tests/test_zh_edition.py`` reads every
``tr(...)`` and ``_(...)`` in the package and fails on a message without a translation, one
whose fields differ, or a translation nobody uses. A message missing from a catalog falls back
to English rather than failing a reader's run.
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any

LANGUAGES = {"en": "English", "zh": "中文 (Chinese)"}
DEFAULT = "en"

_current = DEFAULT


def set_language(lang: str) -> str:
    """Speak ``lang`` from now on ("en" or "zh"); returns it. Anything else is a ValueError."""
    global _current
    if lang not in LANGUAGES:
        raise ValueError(f"unknown language {lang!r}: the course speaks "
                         f"{', '.join(f'{k!r} ({v})' for k, v in LANGUAGES.items())}")
    _current = lang
    return lang


def language() -> str:
    """The language messages are in now."""
    return _current


@functools.cache
def catalog(lang: str) -> dict[str, str]:
    """Every translation into ``lang``: English template -> translated template."""
    if lang == DEFAULT:
        return {}
    merged: dict[str, str] = {}
    folder = resources.files("torchhw") / "locale" / lang
    if not folder.is_dir():
        return merged
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".json"):
            merged.update(json.loads(entry.read_text(encoding="utf-8")))
    return merged


def _(message: str) -> str:
    """``message`` in the current language (itself when there is no translation)."""
    return catalog(_current).get(message, message)


def tr(message: str, /, **fields: Any) -> str:
    """``message`` in the current language with its ``{fields}`` filled in."""
    text = _(message)
    return text.format(**fields) if fields else text

"""Feedback for the "Check yourself" exercises at the end of each notebook.

A checker takes the reader's answer and returns :class:`Feedback` instead of failing an
``assert``: correct, not attempted yet (the answer is still ``None`` or the function
raises NotImplementedError), or not yet, with what is off and a hint. It never raises,
so an exercise left undone does not stop a top-to-bottom run.

Checkers are written with :func:`exercise`; each notebook's live in
``torchhw.exercises.<topic>`` together with reference solutions that the tests run.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable

import torch


class Wrong(Exception):
    """Raised inside a checker to say what is off with an answer."""


@dataclass(frozen=True)
class Feedback:
    number: int
    title: str
    status: str  # "correct", "wrong" or "todo"
    message: str = ""
    hint: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "correct"

    def __repr__(self) -> str:
        head = f"Exercise {self.number} ({self.title})"
        if self.status == "correct":
            return f"✅ {head}: correct. {self.message}".rstrip()
        if self.status == "todo":
            return f"⏳ {head}: not attempted yet. Hint: {self.hint}"
        return f"❌ {head}: not yet. {self.message}\n   Hint: {self.hint}"


def exercise(number: int, title: str, hint: str) -> Callable[[Callable[[Any], str | None]],
                                                              Callable[[Any], Feedback]]:
    """Turn ``fn(answer) -> optional message`` (raising Wrong) into a feedback checker."""
    def wrap(fn: Callable[[Any], str | None]) -> Callable[[Any], Feedback]:
        @functools.wraps(fn)
        def check(answer: Any) -> Feedback:
            if answer is None or answer is Ellipsis:
                return Feedback(number, title, "todo", hint=hint)
            try:
                message = fn(answer)
            except NotImplementedError:
                return Feedback(number, title, "todo", hint=hint)
            except Wrong as err:
                return Feedback(number, title, "wrong", str(err), hint)
            except Exception as err:  # the reader's code failed: report it, don't crash
                return Feedback(number, title, "wrong",
                                f"your answer raised {type(err).__name__}: {err}", hint)
            return Feedback(number, title, "correct", message or "", hint)
        check.number = number  # type: ignore[attr-defined]
        check.title = title  # type: ignore[attr-defined]
        return check
    return wrap


def close(got: Any, want: float, what: str, rel: float = 1e-3) -> None:
    """Raise Wrong unless the number ``got`` is within ``rel`` of ``want``."""
    try:
        value = float(got)
    except (TypeError, ValueError):
        raise Wrong(f"{what} should be a number, got {got!r}.") from None
    if abs(value - want) > rel * abs(want):
        raise Wrong(f"{what}: got {value:g}, expected {want:g}.")


def equal(got: Any, want: Any, what: str, extra: str = "") -> None:
    """Raise Wrong unless ``got == want``; ``what`` names the call, e.g. 'f(2, 3)'."""
    if got != want:
        raise Wrong(f"{what} = {got}, expected {want}{extra}.")


def same_tensor(got: Any, want: torch.Tensor, what: str, atol: float = 1e-5,
                rtol: float = 1e-4) -> None:
    """Raise Wrong unless ``got`` is a tensor of ``want``'s shape and values."""
    if not isinstance(got, torch.Tensor):
        raise Wrong(f"{what} should be a torch.Tensor, got {type(got).__name__}.")
    if got.shape != want.shape:
        raise Wrong(f"{what} has shape {tuple(got.shape)}, expected {tuple(want.shape)}.")
    if not torch.allclose(got.to(want.dtype), want, atol=atol, rtol=rtol):
        worst = (got.to(want.dtype) - want).abs().max().item()
        raise Wrong(f"{what} has the right shape but wrong values (largest error {worst:.3g}).")

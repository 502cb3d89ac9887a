"""Feedback for the "Check yourself" exercises at the end of each notebook.

A checker takes the reader's answer and returns :class:`Feedback` instead of failing an
``assert``: correct, not attempted yet (the answer is still ``None`` or the function
raises NotImplementedError), or not yet, with what is off and a hint. It never raises,
so an exercise left undone does not stop a top-to-bottom run.

Hints come in two steps. The feedback shows a nudge that points the way without giving the
answer away, and says how to ask for more: ``ex.hint(2)`` shows exercise 2's fuller hint
(every notebook imports its exercises module as ``ex``).

Checkers are written with :func:`exercise`; each notebook's live in
``torchhw.exercises.<topic>`` together with reference solutions that the tests run, and a
``hint`` function made by :func:`hints_for`.
"""

from __future__ import annotations

import contextlib
import functools
import os
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch
from torch.overrides import TorchFunctionMode

from .i18n import _, tr


class Wrong(Exception):
    """Raised inside a checker to say what is off with an answer."""


@dataclass(frozen=True)
class Feedback:
    number: int
    title: str
    status: str  # "correct", "wrong" or "todo"
    message: str = ""
    hint: str = ""  # the nudge, shown with every answer that is not right yet
    more: str = ""  # the fuller hint, shown by the module's hint(number)

    @property
    def ok(self) -> bool:
        return self.status == "correct"

    def __repr__(self) -> str:
        head = tr("Exercise {number} ({title})", number=self.number, title=_(self.title))
        message, nudge = _(self.message), _(self.hint)
        if self.status == "correct":
            return tr("✅ {head}: correct. {message}", head=head, message=message).rstrip()
        hint = nudge + (tr(" (more: ex.hint({number}))", number=self.number) if self.more else "")
        if self.status == "todo":
            return tr("⏳ {head}: not attempted yet. Hint: {hint}", head=head, hint=hint)
        return tr("❌ {head}: not yet. {message}\n   Hint: {hint}", head=head, message=message,
                  hint=hint)


@dataclass(frozen=True)
class Hint:
    """The fuller hint of one exercise: what ``ex.hint(number)`` shows."""

    number: int
    title: str
    text: str

    def __repr__(self) -> str:
        if not self.title:  # no such exercise: the text says which there are
            return f"💡 {_(self.text)}"
        return tr("💡 Exercise {number} ({title}), more of a hint: {text}", number=self.number,
                  title=_(self.title), text=_(self.text))


# Where a NotImplementedError comes from a library, not from the reader's unfinished code
_LIBRARIES = tuple(os.path.dirname(os.path.abspath(path)) + os.sep
                   for path in (torch.__file__, contextlib.__file__, __file__))


def _placeholder(err: NotImplementedError) -> bool:
    """Whether ``err`` is the starter's ``raise NotImplementedError`` (or one like it in the
    reader's own code), not an operation that torch has not implemented (a module without a
    forward, an op the meta device lacks): those are answers that went wrong, not undone work."""
    frames = traceback.extract_tb(err.__traceback__)
    if not frames:
        return not err.args
    last = frames[-1]
    if os.path.abspath(last.filename).startswith(_LIBRARIES):
        return False
    line = (last.line or "").strip()
    # an error from torch's C++ code ends on the reader's line that called it, not on a raise
    return line.startswith("raise") if line else not err.args


def exercise(number: int, title: str, hint: str, more: str = "") -> Callable[
        [Callable[[Any], str | None]], Callable[[Any], Feedback]]:
    """Turn ``fn(answer) -> optional message`` (raising Wrong) into a feedback checker.

    ``hint`` is the nudge every answer that is not right yet sees: where to look, not the
    answer. ``more`` is the fuller hint (the formula, the steps), shown only when the reader
    asks for it with the module's ``hint(number)``.
    """
    def wrap(fn: Callable[[Any], str | None]) -> Callable[[Any], Feedback]:
        @functools.wraps(fn)
        def check(answer: Any) -> Feedback:
            def feedback(status: str, message: str = "") -> Feedback:
                return Feedback(number, title, status, message, hint, more)
            if answer is None or answer is Ellipsis:
                return feedback("todo")
            try:
                message = fn(answer)
            except NotImplementedError as err:
                if _placeholder(err):
                    return feedback("todo")
                return feedback("wrong", tr("your answer raised NotImplementedError: {err}", err=err))
            except Wrong as err:
                return feedback("wrong", str(err))
            except Exception as err:  # the reader's code failed: report it, don't crash
                return feedback("wrong", tr("your answer raised {kind}: {err}",
                                            kind=type(err).__name__, err=err))
            return feedback("correct", message or "")
        mark(check, number, title, hint, more)
        return check
    return wrap


def mark(check: Callable[..., Any], number: int, title: str, hint: str, more: str) -> None:
    """Give a checker the attributes :func:`hints_for` and the tests read (for a checker that
    wraps one made by :func:`exercise`, to take extra arguments)."""
    check.number = number  # type: ignore[attr-defined]
    check.title = title  # type: ignore[attr-defined]
    check.nudge = hint  # type: ignore[attr-defined]
    check.more = more  # type: ignore[attr-defined]


def hints_for(checks: dict[int, Callable[..., Any]]) -> Callable[[Any], Hint]:
    """The ``hint(number)`` function of an exercises module, from its ``CHECKS``."""
    def hint(number: Any) -> Hint:
        """The fuller hint of exercise ``number``, for when the feedback's nudge is not enough."""
        try:
            check = checks[int(number)]
        except (KeyError, TypeError, ValueError):
            known = ", ".join(str(n) for n in sorted(checks))
            return Hint(0, "", tr("there is no exercise {number} here: the exercises are {known}.",
                                  number=repr(number), known=known))
        text = getattr(check, "more", "") or getattr(check, "nudge", "")
        return Hint(check.number, check.title, text)  # type: ignore[attr-defined]
    return hint


def _same(a: Any, b: Any, rel: float = 1e-6) -> bool:
    """Whether two answers are the same value: numbers within ``rel``, anything else equal."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    try:
        x, y = float(a), float(b)
    except Exception:  # not numbers (a tuple, a list, a tensor of many elements)
        try:
            return bool(a == b)
        except Exception:
            return False
    return abs(x - y) <= rel * max(abs(x), abs(y)) or x == y


def why(got: Any, want: Any, *mistakes: tuple[Any, str], rel: float = 1e-6) -> str:
    """``" (reason)"`` for the first of ``mistakes`` (pairs of the value a known mistake gives,
    and what that mistake is) whose value ``got`` equals, or ``""``. A mistake that gives the
    right value for these inputs cannot be told apart there, and is skipped."""
    for value, reason in mistakes:
        if not _same(value, want, rel) and _same(got, value, rel):
            return tr(" ({reason})", reason=_(reason))
    return ""


def close(got: Any, want: float, what: str, rel: float = 1e-3, extra: str = "") -> None:
    """Raise Wrong unless the number ``got`` is within ``rel`` of ``want``; ``extra`` (from
    :func:`why`) names the mistake."""
    try:
        if isinstance(got, (str, bytes)):  # float() would take a number written as text
            raise TypeError
        value = float(got)
    except (TypeError, ValueError):
        raise Wrong(tr("{what} should be a number, got {got}.", what=_(what), got=repr(got))) from None
    if not abs(value - want) <= rel * abs(want):  # also refuses NaN
        raise Wrong(tr("{what}: got {value}, expected {want}{extra}.", what=_(what),
                       value=f"{value:g}", want=f"{want:g}", extra=extra))


def equal(got: Any, want: Any, what: str, extra: str = "") -> None:
    """Raise Wrong unless ``got == want``; ``what`` names the call, e.g. 'f(2, 3)'."""
    if got != want:
        raise Wrong(tr("{what} = {got}, expected {want}{extra}.", what=_(what), got=got, want=want,
                       extra=extra))


def same_tensor(got: Any, want: torch.Tensor, what: str, atol: float = 1e-5,
                rtol: float = 1e-4) -> None:
    """Raise Wrong unless ``got`` is a tensor of ``want``'s shape and values."""
    if not isinstance(got, torch.Tensor):
        raise Wrong(tr("{what} should be a torch.Tensor, got {kind}.", what=_(what),
                       kind=type(got).__name__))
    if got.shape != want.shape:
        raise Wrong(tr("{what} has shape {got}, expected {want}.", what=_(what),
                       got=tuple(got.shape), want=tuple(want.shape)))
    if not torch.allclose(got.to(want.dtype), want, atol=atol, rtol=rtol):
        worst = (got.to(want.dtype) - want).abs().max().item()
        raise Wrong(tr("{what} has the right shape but wrong values (largest error {worst}).",
                       what=_(what), worst=f"{worst:.3g}"))


class TorchCalls(TorchFunctionMode):
    """Counts the torch operations run inside it (factories such as torch.empty included)
    and remembers their names: how a checker sees a loop, or a call the exercise forbids."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0
        self.names: set[str] = set()

    def __torch_function__(self, func: Any, types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        self.calls += 1
        self.names.add(getattr(func, "__name__", ""))
        return func(*args, **(kwargs or {}))


@dataclass
class Watch:
    """What :func:`watching` saw: the labels of the watched functions that were called."""

    used: list[str] = field(default_factory=list)


@contextlib.contextmanager
def watching(*targets: tuple[Any, str, str]) -> Iterator[Watch]:
    """While active, each ``(owner, attribute, label)`` still works but notes ``label`` in the
    Watch it yields when called: a checker finds a forbidden call however the reader reached
    it (``torch.broadcast_shapes``, ``from torch import broadcast_shapes``), even one the
    reader's code catches the error of. Functions only: a class replaced by a function breaks
    isinstance() and the compiled modules that import it (NumPy's own, imported lazily), so
    a class is refused with TypeError before anything is replaced."""
    seen = Watch()
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in targets]
    for (_, _, label), (_, _, original) in zip(targets, saved):
        if isinstance(original, type):
            raise TypeError(f"watching() cannot watch the class {label}: replacing a class "
                            "breaks isinstance() and the modules that import it")

    def spy(original: Callable[..., Any], label: str) -> Callable[..., Any]:
        @functools.wraps(original)
        def call(*args: Any, **kwargs: Any) -> Any:
            seen.used.append(label)
            return original(*args, **kwargs)
        return call

    for (owner, name, label), (_, _, original) in zip(targets, saved):
        setattr(owner, name, spy(original, label))
    try:
        yield seen
    finally:
        for owner, name, original in saved:
            setattr(owner, name, original)

"""Validating the parameters that papermill injects into a notebook.

papermill parses ``-p quick maybe`` into the string ``'maybe'`` and ``-p epocs 3`` into a
new variable nobody reads; neither fails where the mistake was made. A notebook's
validation cell therefore calls::

    check_params(globals(), device=str, quick=bool, seed=int_range(0, 2**31 - 1))

which fails at once, naming the parameter, the value it got and what it expected, and
treats any parameter-like name it was not told about (a typo such as ``epocs``) as an
error. It runs straight after the ``parameters`` cell, when the notebook's namespace
holds nothing but the parameters, modules and IPython's own names.
"""

from __future__ import annotations

import difflib
import types
from dataclasses import dataclass
from typing import Any, Callable

from .i18n import tr

# Names IPython puts in every namespace; they are not parameters.
_IPYTHON_NAMES = {"In", "Out", "get_ipython", "exit", "quit", "open"}
# Values papermill can inject: anything else (a module, a function) is not a parameter.
_PARAM_TYPES = (bool, int, float, str, type(None), list, tuple, dict)


class ParameterError(ValueError):
    """A notebook parameter has a wrong type or value, or is not a parameter at all."""


@dataclass(frozen=True)
class Spec:
    """What one parameter accepts: a type, optional bounds, optional allowed values."""

    kind: type | tuple[type, ...]
    low: float | None = None
    high: float | None = None
    choices: tuple[Any, ...] | None = None
    describe: str = ""

    def check(self, name: str, value: Any) -> Any:
        kinds = self.kind if isinstance(self.kind, tuple) else (self.kind,)
        ok_type = isinstance(value, kinds) and not (
            isinstance(value, bool) and bool not in kinds)  # True is an int to Python
        if float in kinds and isinstance(value, int) and not isinstance(value, bool):
            value, ok_type = float(value), True
        if not ok_type or (isinstance(value, float) and value != value):  # NaN fails every check
            raise _error(name, value, self.expected())
        if self.choices is not None and value not in self.choices:
            raise _error(name, value, self.expected())
        if self.low is not None and value < self.low or self.high is not None and value > self.high:
            raise _error(name, value, self.expected())
        return value

    def expected(self) -> str:
        if self.describe:
            return self.describe
        if self.choices is not None:
            return tr("one of {choices}", choices=", ".join(repr(c) for c in self.choices))
        kinds = self.kind if isinstance(self.kind, tuple) else (self.kind,)
        text = tr(" or ").join(tr("True or False") if k is bool else tr("an {kind}", kind=k.__name__)
                               if k.__name__[0] in "aeiou" else tr("a {kind}", kind=k.__name__)
                               for k in kinds)
        if self.low is not None and self.high is not None:
            return tr("{kind} from {low} to {high}", kind=text, low=self.low, high=self.high)
        if self.low is not None:
            return tr("{kind} of at least {low}", kind=text, low=self.low)
        if self.high is not None:
            return tr("{kind} of at most {high}", kind=text, high=self.high)
        return text


def _error(name: str, value: Any, expected: str) -> ParameterError:
    return ParameterError(tr(
        "parameter {name} = {value} ({kind}): expected {expected}. Fix the value in the "
        "parameters cell, or pass it as: papermill ... -p {bare} VALUE",
        name=repr(name), value=repr(value), kind=type(value).__name__, expected=expected, bare=name))


def int_range(low: int | None = None, high: int | None = None) -> Spec:
    """An int within [low, high] (either bound may be None)."""
    return Spec(int, low, high)


def float_range(low: float | None = None, high: float | None = None) -> Spec:
    """A float within [low, high]; ints are accepted and converted."""
    return Spec(float, low, high)


def one_of(*choices: Any) -> Spec:
    """Exactly one of ``choices``."""
    kinds = tuple({type(c) for c in choices})
    return Spec(kinds, choices=choices)


def _as_spec(rule: type | Spec | Callable[..., Any]) -> Spec:
    if isinstance(rule, Spec):
        return rule
    if isinstance(rule, type):
        return Spec(rule)
    raise TypeError(f"a parameter rule must be a type or a Spec, not {rule!r}")


def candidates(namespace: dict[str, Any]) -> set[str]:
    """Names in ``namespace`` that look like injected parameters (public plain values)."""
    return {
        k for k, v in namespace.items()
        if not k.startswith("_") and k not in _IPYTHON_NAMES
        and isinstance(v, _PARAM_TYPES) and not isinstance(v, types.ModuleType)
    }


def check_params(namespace: dict[str, Any], **rules: type | Spec) -> dict[str, Any]:
    """Validate the notebook's parameters in ``namespace`` (pass ``globals()``).

    Each keyword names a parameter and its rule: a type (``bool``, ``int``, ``str``) or a
    Spec from int_range / float_range / one_of. Returns the validated values; ints given
    for float parameters are converted in ``namespace`` too. Raises ParameterError for a
    wrong value, a declared parameter that is missing, or an unknown one.
    """
    unknown = sorted(candidates(namespace) - set(rules))
    if unknown:
        hints = []
        for name in unknown:
            close = difflib.get_close_matches(name, rules, n=1)
            hints.append(tr("{name} (did you mean {close}?)", name=repr(name), close=repr(close[0]))
                         if close else repr(name))
        raise ParameterError(tr(
            "unknown parameter {names}: this notebook's parameters are {known}. Check the "
            "spelling of the -p option.", names=", ".join(hints), known=", ".join(rules)))
    values = {}
    for name, rule in rules.items():
        if name not in namespace:
            raise ParameterError(tr(
                "parameter {name} is validated but not set: add it to the cell tagged "
                "'parameters'.", name=repr(name)))
        values[name] = namespace[name] = _as_spec(rule).check(name, namespace[name])
    return values

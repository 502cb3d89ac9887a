"""The messages the package and the notebooks say to a reader, and their translations.

    torchhw zh --messages      # every message without a translation, or translated but unused

The messages are read from the source, as gettext's xgettext does: the first argument of every
``tr(...)``, ``_(...)``, ``say(...)`` and ``skip(...)`` call in ``src/torchhw/`` and in the
notebooks' code cells; the title, nudge and fuller hint of every ``@exercise``; the reasons
passed to ``why(...)``; the names (``what``) passed to ``close``, ``equal`` and
``same_tensor``; and what a checker returns. A message built where it is raised, an f-string
handed to ``Wrong`` or returned by a checker, cannot be looked up, so it is reported too: write
it as ``tr("... {name} ...", name=value)``.

The translations are ``torchhw/locale/<lang>/*.json`` (:mod:`torchhw.i18n`).
"""

from __future__ import annotations

import ast
import json
import string
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

LOOKUPS = {"tr", "_"}  # in the package; the notebooks also say() and skip() (torchhw.notebook)
NOTEBOOK_LOOKUPS = LOOKUPS | {"say", "skip"}
WHAT_AT = {"close": 2, "equal": 2, "same_tensor": 2}  # the position of the ``what`` argument
BUILT = (ast.JoinedStr, ast.BinOp)  # f"..." and "..." % x / "a" + b: made at run time


@dataclass
class Messages:
    """What the source says: message -> where, and the places that build a message at run
    time where it would have to be looked up."""

    found: dict[str, list[str]] = field(default_factory=dict)
    built: list[str] = field(default_factory=list)

    def add(self, text: str, where: str) -> None:
        if text.strip():
            self.found.setdefault(text, []).append(where)


def _name(func: ast.expr) -> str:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return ""


def _text(node: ast.expr | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def scan(tree: ast.AST, where: str, into: Messages, lookups: set[str] = LOOKUPS) -> None:
    """Collect the messages of one module (or one notebook's code) into ``into``."""
    checkers: set[ast.AST] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if any(isinstance(d, ast.Call) and _name(d.func) == "exercise" for d in node.decorator_list):
                checkers.add(node)
        if not isinstance(node, ast.Call):
            continue
        name, at = _name(node.func), f"{where}:{node.lineno}"
        first = node.args[0] if node.args else None
        if name in lookups and first is not None:
            text = _text(first)
            if text is not None:
                into.add(text, at)
            elif isinstance(first, BUILT):
                into.built.append(f"{at}: {name}() of a message built at run time")
        elif name == "exercise":
            for arg in [*node.args[1:2], *(k.value for k in node.keywords if k.arg in ("title", "hint", "more"))]:
                text = _text(arg)
                if text is not None:
                    into.add(text, at)
        elif name == "why":
            for pair in node.args[2:]:
                if isinstance(pair, ast.Tuple) and len(pair.elts) == 2:
                    text = _text(pair.elts[1])
                    if text is not None:
                        into.add(text, at)
                    elif isinstance(pair.elts[1], BUILT):
                        into.built.append(f"{at}: a why() reason built at run time")
        elif name in WHAT_AT:
            what = node.args[WHAT_AT[name]] if len(node.args) > WHAT_AT[name] else next(
                (k.value for k in node.keywords if k.arg == "what"), None)
            text = _text(what)
            if text is not None:
                into.add(text, at)
            elif isinstance(what, BUILT):
                into.built.append(f"{at}: the name passed to {name}() is built at run time")
        elif name == "Wrong" and isinstance(first, (ast.Constant, *BUILT)):
            into.built.append(f"{at}: Wrong() of a bare string: wrap it in tr()")
    for fn in checkers:
        for node in ast.walk(fn):
            if isinstance(node, ast.Return) and node.value is not None:
                text = _text(node.value)
                if text is not None:
                    into.add(text, f"{where}:{node.lineno}")
                elif isinstance(node.value, BUILT):
                    into.built.append(f"{where}:{node.lineno}: a checker returns a message built "
                                      f"at run time")


def collect(root: Path) -> Messages:
    """Every message of the package under ``root/src/torchhw`` and of ``root/notebooks``."""
    import nbformat

    found = Messages()
    package = root / "src" / "torchhw"
    for path in sorted(package.rglob("*.py")):
        if "course" in path.relative_to(package).parts:
            continue  # the tooling speaks to maintainers, in English
        scan(ast.parse(path.read_text()), str(path.relative_to(root)), found)
    for path in sorted((root / "notebooks").glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        for number, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            code = "\n".join(line[:len(line) - len(line.lstrip())] + "pass"
                             if line.lstrip().startswith(("%", "!")) else line
                             for line in cell.source.splitlines())
            scan(ast.parse(code), f"notebooks/{path.name}, cell {number}", found, NOTEBOOK_LOOKUPS)
    return found


def fields(template: str) -> set[str]:
    """The ``{names}`` a template fills in."""
    return {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}


def load(root: Path, lang: str) -> dict[str, tuple[str, str]]:
    """English -> (translation, file) over every catalog file of ``lang``."""
    merged: dict[str, tuple[str, str]] = {}
    for path in sorted((root / "src" / "torchhw" / "locale" / lang).glob("*.json")):
        for en, text in json.loads(path.read_text(encoding="utf-8")).items():
            if en in merged:
                raise ValueError(f"{path.name} and {merged[en][1]} both translate {en!r}: keep one")
            merged[en] = (text, path.name)
    return merged


def problems(root: Path, lang: str) -> list[str]:
    """Everything wrong between the messages and their translations, one line each."""
    said = collect(root)
    known = load(root, lang)
    out = [f"built at run time, cannot be translated: {b}" for b in said.built]
    for text, where in sorted(said.found.items()):
        if text not in known:
            out.append(f"no translation ({where[0]}): {text!r}")
        elif fields(known[text][0]) != fields(text):
            out.append(f"fields differ in {known[text][1]} ({where[0]}): {text!r} has "
                       f"{sorted(fields(text))}, the translation {sorted(fields(known[text][0]))}")
    out += [f"unused translation in {f}: {en!r}" for en, (_, f) in sorted(known.items())
            if en not in said.found]
    return out


def untranslated(root: Path, lang: str, module: str | None = None) -> dict[str, str]:
    """A skeleton catalog: each message without a translation (optionally only those found in
    files whose path contains ``module``), mapped to an empty string, for a translator."""
    said = collect(root)
    known = load(root, lang)
    return {text: "" for text, where in sorted(said.found.items())
            if text not in known and (module is None or any(module in w for w in where))}


def report(lines: Iterable[str]) -> str:
    return "\n".join(lines)


def main(root: Path, lang: str, echo: Any = print) -> int:
    found = problems(root, lang)
    for line in found:
        echo(line)
    echo(f"{len(found)} problem(s) with the {lang} messages" if found else
         f"every message has its {lang} translation")
    return 1 if found else 0

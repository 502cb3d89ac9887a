"""The Chinese edition (中文版): notebooks/zh/, built from the English notebooks and a translation.

    torchhw zh                 # what is stale, untranslated or orphaned; exit 1 if anything is
    torchhw zh --build         # rebuild notebooks/zh/ from notebooks/ and translations/zh/
    torchhw zh --todo 04       # make 04's translation file ready for a translator (see below)
    torchhw zh --messages      # the package's messages (checkers, errors, skips) without Chinese
    torchhw regen --zh 04      # execute the Chinese notebook, as for the English ones

The English notebooks are the source. ``translations/zh/NN_topic.md`` holds the translation of
each markdown cell of ``notebooks/NN_topic.ipynb``, in this form::

    <!-- cell c005 en 3f2a9c1b0d4e -->
    <!-- en -->
    ## 1. The data: handwritten digits          (the English the translation was made from)
    <!-- zh -->
    ## 1. 数据：手写数字                          (its translation)

The marker names the English cell by its id and by a hash of its text. A translation is
*current* when that hash is the hash of the English cell as it is now; when the English cell
changes, its translation is *stale* until a translator updates it, and ``torchhw zh`` (and the
test suite, ``pytest -k zh``) lists it with the English diff, which the stored English makes
possible. An English cell with no entry, or an empty Chinese block, is *untranslated*; an
entry whose cell is gone is *orphaned*.

A translator's turn: ``torchhw zh --todo 04`` rewrites 04's file in the notebook's cell order:
new entries for untranslated cells (English filled in, Chinese empty), and each stale entry
brought up to the current English with its old Chinese kept under a ``<!-- fuzzy -->`` line
that holds the English diff. Translate, delete the fuzzy lines, run ``torchhw zh --build``,
then ``torchhw regen --zh 04``.

The Chinese notebook's code cells are the English ones, with one change: the parameters cell
says ``lang = "zh"``, so the package speaks Chinese (:mod:`torchhw.i18n`). Its badges open the
Chinese notebook, its links to ``../`` reach up one folder further, and each markdown cell
carries the hash of the English cell it translates in its metadata.
"""

from __future__ import annotations

import copy
import difflib
import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from .badges import BADGE_START, badge_line, repository
from .paths import CourseError, discover, find_root, select
from .regen import VERIFIED

LANG = "zh"
CELL = re.compile(r"^<!-- cell (\S+) en ([0-9a-f]{12}) -->$")
EN, ZH = "<!-- en -->", "<!-- zh -->"
FUZZY = re.compile(r"^<!-- fuzzy\b.*?-->\n?", re.S | re.M)
LANG_LINE = re.compile(r'^lang = "en"', re.M)
HEADER = ("<!-- The Chinese translation of notebooks/{name}, one entry per markdown cell: the "
          "English cell's id and the hash of its text, the English as translated, then the "
          "Chinese. `torchhw zh` says what is stale; `torchhw zh --todo {stem}` prepares this "
          "file for a translator; the terms follow translations/zh/TERMS.md. -->")


def english_text(source: str) -> str:
    """An English cell's text as translated: without the 'Outputs verified' line that regen
    rewrites on every run, and without surrounding blank lines."""
    return VERIFIED.sub("", source).strip("\n")


def text_hash(text: str) -> str:
    """The 12-hex-digit hash that names one version of an English cell's text."""
    return hashlib.sha256(english_text(text).encode()).hexdigest()[:12]


@dataclass
class Entry:
    """One translated cell: the English cell's id, the hash and text of the English it was
    translated from, and the Chinese (empty: not translated yet). ``fuzzy`` holds the English
    diff a ``--todo`` wrote into a stale translation, until the translator deletes it."""

    cell: str
    hash: str
    en: str
    zh: str
    fuzzy: str = ""

    def render(self) -> str:
        zh = (self.fuzzy.rstrip("\n") + "\n" if self.fuzzy else "") + self.zh
        return f"<!-- cell {self.cell} en {self.hash} -->\n{EN}\n{self.en}\n{ZH}\n{zh}".rstrip("\n")


def parse(text: str, where: str = "translation") -> list[Entry]:
    """The entries of a translation file; a malformed one is a CourseError naming its line."""
    entries: list[Entry] = []
    part = None
    lines: dict[str, list[str]] = {}
    head: tuple[str, str] | None = None

    def close() -> None:
        if head is None:
            return
        if part != "zh":
            raise CourseError(f"{where}: the entry for cell {head[0]} has no '{ZH}' line: each "
                              f"entry is its marker, '{EN}', the English, '{ZH}', the Chinese")
        zh = "\n".join(lines["zh"]).strip("\n")
        fuzzy = "".join(m.group(0) for m in FUZZY.finditer(zh))
        entries.append(Entry(head[0], head[1], "\n".join(lines["en"]).strip("\n"),
                             FUZZY.sub("", zh).strip("\n"), fuzzy))

    for number, line in enumerate(text.splitlines(), 1):
        marker = CELL.match(line)
        if marker:
            close()
            head, part, lines = (marker.group(1), marker.group(2)), None, {"en": [], "zh": []}
        elif line == EN and head is not None and part is None:
            part = "en"
        elif line == ZH and part == "en":
            part = "zh"
        elif part in ("en", "zh"):
            lines[part].append(line)
        elif line.strip() and head is not None:
            raise CourseError(f"{where}, line {number}: text between the marker of cell {head[0]} "
                              f"and its '{EN}' line; each entry is its marker, '{EN}', the "
                              f"English, '{ZH}', the Chinese")
    close()
    seen: set[str] = set()
    for entry in entries:
        if entry.cell in seen:
            raise CourseError(f"{where}: cell {entry.cell} is translated twice; keep one entry")
        seen.add(entry.cell)
    return entries


def render(entries: Sequence[Entry], name: str) -> str:
    stem = name.removesuffix(".ipynb")
    return HEADER.format(name=name, stem=stem) + "\n\n" + "\n\n".join(e.render() for e in entries) + "\n"


@dataclass
class Status:
    """Where one notebook's translation stands."""

    name: str
    cells: int = 0  # markdown cells in the English notebook
    current: list[str] = field(default_factory=list)
    stale: dict[str, str] = field(default_factory=dict)  # cell -> English diff
    untranslated: list[str] = field(default_factory=list)
    orphaned: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.stale or self.untranslated or self.orphaned)

    def report(self, diffs: bool = True) -> str:
        line = (f"{self.name}: {len(self.current)}/{self.cells} cells current, "
                f"{len(self.stale)} stale, {len(self.untranslated)} untranslated, "
                f"{len(self.orphaned)} orphaned")
        out = [line]
        for cell, diff in self.stale.items():
            out.append(f"  stale {cell}: the English changed since it was translated"
                       + (":\n" + "\n".join("    " + d for d in diff.splitlines()) if diffs else ""))
        if self.untranslated:
            out.append(f"  untranslated: {', '.join(self.untranslated)}")
        if self.orphaned:
            out.append(f"  orphaned (no such English cell any more): {', '.join(self.orphaned)}")
        return "\n".join(out)


def _markdown(nb: Any) -> list[Any]:
    return [c for c in nb.cells if c.cell_type == "markdown"]


def status(english: Any, entries: Sequence[Entry], name: str) -> Status:
    """Compare a translation's entries with the English notebook as it is now."""
    found = Status(name)
    by_cell = {e.cell: e for e in entries}
    ids = set()
    for cell in _markdown(english):
        found.cells += 1
        ids.add(cell.id)
        entry = by_cell.get(cell.id)
        now = english_text(cell.source)
        if entry is None or not entry.zh.strip():
            found.untranslated.append(cell.id)
        elif entry.hash != text_hash(now) or entry.fuzzy:
            diff = difflib.unified_diff(entry.en.splitlines(), now.splitlines(), "translated",
                                        "now", lineterm="", n=1)
            found.stale[cell.id] = "\n".join(diff) or (
                "(the Chinese still holds its fuzzy comment; the English diff it was marked with:)\n"
                + entry.fuzzy.strip())
        else:
            found.current.append(cell.id)
    found.orphaned = [e.cell for e in entries if e.cell not in ids]
    return found


def todo(english: Any, entries: Sequence[Entry]) -> list[Entry]:
    """The entries rewritten for a translator: in cell order, untranslated cells added with an
    empty Chinese block, stale ones brought to the current English with a fuzzy diff line;
    orphans dropped (``torchhw zh`` listed them)."""
    by_cell = {e.cell: e for e in entries}
    out = []
    for cell in _markdown(english):
        now = english_text(cell.source)
        entry = by_cell.get(cell.id)
        if entry is None:
            out.append(Entry(cell.id, text_hash(now), now, ""))
        elif entry.hash != text_hash(now):
            diff = "\n".join(difflib.unified_diff(entry.en.splitlines(), now.splitlines(),
                                                  "translated", "now", lineterm="", n=1))
            note = (f"<!-- fuzzy: the English changed; update the Chinese, then delete this "
                    f"comment.\n{diff}\n-->")
            out.append(Entry(cell.id, text_hash(now), now, entry.zh, entry.fuzzy or note))
        else:
            out.append(entry)
    return out


def localise(text: str, repo: str, name: str) -> str:
    """A translated cell as the Chinese notebook shows it: badges that open the Chinese notebook,
    links that leave notebooks/ one folder deeper, the Chinese README."""
    lines = [badge_line(repo, f"{LANG}/{name}") if line.startswith(BADGE_START) else line
             for line in text.split("\n")]
    text = "\n".join(lines)
    text = text.replace("](../README.md)", f"](../../README.{LANG}.md)")
    return re.sub(r"\]\(\.\./(?!\.\./)", "](../../", text)


def build(english: Any, entries: Sequence[Entry], existing: Any | None, repo: str, name: str) -> Any:
    """The Chinese notebook: the English one's cells in order, code as in English (the
    parameters cell saying lang = "zh") with the outputs of the existing Chinese notebook where
    its code is unchanged, markdown from the translation (English, marked, where there is none)."""
    nb = copy.deepcopy(english)
    by_cell = {e.cell: e for e in entries}
    old = {c.id: c for c in existing.cells} if existing is not None else {}
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.source = zh_code(cell)
            before = old.get(cell.id)
            if before is not None and before.cell_type == "code" and before.source == cell.source:
                cell.outputs, cell.execution_count = before.outputs, before.execution_count
            else:
                cell.outputs, cell.execution_count = [], None
            continue
        if cell.cell_type != "markdown":
            continue
        entry = by_cell.get(cell.id)
        now = english_text(cell.source)
        meta = cell.metadata.setdefault("torchhw", {})
        if entry is None or not entry.zh.strip():
            cell.source = english_text(cell.source)
            meta.clear()
            meta["untranslated"] = True
        else:
            cell.source = localise(entry.zh, repo, name)
            meta.clear()
            meta["en"] = entry.hash
            if entry.hash != text_hash(now) or entry.fuzzy:
                meta["stale"] = True
    # the opening cell keeps the Chinese run's own 'verified' line, which regen writes
    if existing is not None and existing.cells and nb.cells and nb.cells[0].cell_type == "markdown":
        line = VERIFIED.search(existing.cells[0].source)
        if line:
            nb.cells[0].source = nb.cells[0].source.rstrip() + "\n\n" + line.group(0).strip()
    info = dict(existing.metadata.get("torchhw", {})) if existing is not None else {}
    info["lang"] = LANG
    nb.metadata["torchhw"] = info
    return nb


def zh_code(cell: Any) -> str:
    """A code cell's source in the Chinese notebook: the English, the parameters cell saying
    lang = "zh"."""
    if "parameters" in cell.metadata.get("tags", []):
        return LANG_LINE.sub('lang = "zh"', cell.source, count=1)
    return cell.source


@dataclass(frozen=True)
class Paths:
    english: Path
    translation: Path
    chinese: Path


def paths_for(root: Path, names: Sequence[str] = ()) -> list[Paths]:
    """The English notebook, translation file and Chinese notebook of each chosen notebook."""
    return [Paths(p, root / "translations" / LANG / (p.stem + ".md"), root / "notebooks" / LANG / p.name)
            for p in select(discover(root / "notebooks"), names)]


def load_entries(path: Path) -> list[Entry]:
    return parse(path.read_text(encoding="utf-8"), str(path)) if path.is_file() else []


def main(argv: Sequence[str] | None = None, echo: Any = print) -> int:
    import argparse

    import nbformat

    parser = argparse.ArgumentParser(prog="torchhw zh", description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="*", help="numbers or topics; all by default")
    parser.add_argument("--build", action="store_true", help="rebuild notebooks/zh/")
    parser.add_argument("--todo", action="store_true",
                        help="prepare the translation files for a translator")
    parser.add_argument("--no-diff", action="store_true", help="list stale cells without diffs")
    parser.add_argument("--messages", action="store_true",
                        help="the package's messages instead: which lack a translation")
    args = parser.parse_args(argv)
    root = find_root()
    if args.messages:
        from .catalog import main as messages

        return messages(root, LANG, echo)
    repo = repository(root / "pyproject.toml")
    all_ok = True
    for where in paths_for(root, args.notebooks):
        english = nbformat.read(where.english, as_version=4)
        entries = load_entries(where.translation)
        if args.todo:
            entries = todo(english, entries)
            where.translation.parent.mkdir(parents=True, exist_ok=True)
            where.translation.write_text(render(entries, where.english.name), encoding="utf-8")
        if args.build:
            existing = nbformat.read(where.chinese, as_version=4) if where.chinese.is_file() else None
            built = build(english, entries, existing, repo, where.english.name)
            where.chinese.parent.mkdir(parents=True, exist_ok=True)
            nbformat.write(built, where.chinese)
        found = status(english, entries, where.english.name)
        all_ok &= found.ok
        echo(found.report(diffs=not args.no_diff))
    if not all_ok:
        echo("\nA stale cell: update its Chinese to say what the English now says (`torchhw zh "
             "--todo NN` marks it fuzzy with the diff), then `torchhw zh --build` and "
             "`torchhw regen --zh NN`.")
    return 0 if all_ok else 1

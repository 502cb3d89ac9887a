"""The Chinese edition (notebooks/zh/) says what the English says, and says it in Chinese.

Every test here has ``zh`` in its name, so ``pytest -k zh`` runs them alone. What they hold:

- each English markdown cell has a current translation (its stored hash is the hash of the
  English text as it is now); a changed English cell fails here, listed with its English diff,
  until its translation is updated (``torchhw zh`` says the same; ``torchhw zh --todo NN``
  prepares the file);
- notebooks/zh/ is what ``torchhw zh --build`` makes of the English notebooks and the
  translations, its code cells the English ones (the parameters cell says ``lang = "zh"``), its
  outputs from executing it (``torchhw regen --zh``; ``make portability`` runs nbval over it);
- every message a reader can see (checkers' feedback and hints, parameter errors, skips) has a
  translation with the same fields, and the checkers' feedback really comes out in Chinese.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import nbformat
import pytest

from torchhw import i18n
from torchhw.course import catalog, edition
from torchhw.course.badges import repository
from torchhw.course.paths import CourseError, discover
from torchhw.course.regen import VERIFIED, source_hash
from torchhw.exercises import MODULES

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = discover(ROOT / "notebooks")
CJK = re.compile(r"[\u4e00-\u9fff]")


def paths(name: str) -> edition.Paths:
    (found,) = edition.paths_for(ROOT, [name])
    return found


def english(name: str):
    return nbformat.read(paths(name).english, as_version=4)


def chinese(name: str):
    return nbformat.read(paths(name).chinese, as_version=4)


@pytest.fixture
def speak_zh():
    i18n.set_language("zh")
    yield
    i18n.set_language("en")


@pytest.mark.parametrize("name", [p.stem for p in NOTEBOOKS])
def test_zh_every_cell_translated_and_current(name):
    where = paths(name)
    assert where.translation.is_file(), f"{name} has no translation: torchhw zh --todo {name[:2]}"
    found = edition.status(english(name), edition.load_entries(where.translation), name)
    assert found.ok, (found.report() + f"\n\nUpdate translations/zh/{name}.md (torchhw zh --todo "
                      f"{name[:2]} marks the stale cells), then torchhw zh --build")


@pytest.mark.parametrize("name", [p.stem for p in NOTEBOOKS])
def test_zh_notebook_is_built_from_the_english_and_its_translation(name):
    where = paths(name)
    assert where.chinese.is_file(), f"no {where.chinese}: torchhw zh --build {name[:2]}"
    zh = chinese(name)
    built = edition.build(english(name), edition.load_entries(where.translation), zh,
                          repository(ROOT / "pyproject.toml"), where.english.name)
    assert [c.id for c in zh.cells] == [c.id for c in built.cells], "cells differ: torchhw zh --build"
    for mine, want in zip(zh.cells, built.cells):
        assert mine.cell_type == want.cell_type and mine.source == want.source, \
            f"cell {mine.id} is not what the build makes of the English: torchhw zh --build {name[:2]}"
        if mine.cell_type == "markdown":
            assert mine.metadata.get("torchhw") == want.metadata.get("torchhw"), mine.id
    assert zh.metadata["torchhw"]["lang"] == "zh"


@pytest.mark.parametrize("name", [p.stem for p in NOTEBOOKS])
def test_zh_code_cells_are_the_english_ones_and_speak_chinese(name):
    en, zh = english(name), chinese(name)
    en_code = [c for c in en.cells if c.cell_type == "code"]
    zh_code = [c for c in zh.cells if c.cell_type == "code"]
    assert len(en_code) == len(zh_code)
    for a, b in zip(en_code, zh_code):
        if "parameters" in a.metadata.get("tags", []):
            assert 'lang = "en"' in a.source and 'lang = "zh"' in b.source
            assert b.source == a.source.replace('lang = "en"', 'lang = "zh"', 1)
        else:
            assert a.source == b.source, f"code cell {a.id} differs from the English"
        assert a.metadata.get("tags", []) == b.metadata.get("tags", [])


@pytest.mark.parametrize("name", [p.stem for p in NOTEBOOKS])
def test_zh_outputs_come_from_executing_the_chinese_notebook(name):
    zh = chinese(name)
    meta = zh.metadata["torchhw"]
    assert meta.get("source_hash") == source_hash(zh), \
        f"code changed since the Chinese notebook ran: torchhw regen --zh {name[:2]}"
    assert VERIFIED.search(zh.cells[0].source) and "输出验证于" in zh.cells[0].source
    setup = next(c for c in zh.cells if c.cell_type == "code" and "setup(" in c.source)
    text = "".join(o.get("text", "") for o in setup.outputs)
    assert "设备：" in text, "the setup cell's output is not Chinese: was it run with lang = 'zh'?"


@pytest.mark.parametrize("name", [p.stem for p in NOTEBOOKS])
def test_zh_prose_is_chinese_with_chinese_links(name):
    zh = chinese(name)
    slug = repository(ROOT / "pyproject.toml").removeprefix("https://github.com/")
    for cell in zh.cells:
        if cell.cell_type != "markdown":
            continue
        assert CJK.search(cell.source), f"cell {cell.id} has no Chinese"
        assert "](../README.md)" not in cell.source and "](../reference" not in cell.source
    opening = zh.cells[0].source
    assert f"{slug}/blob/main/notebooks/zh/{name}.ipynb" in opening
    assert f"urlpath=lab/tree/notebooks/zh/{name}.ipynb" in opening


def test_zh_a_changed_english_cell_is_stale_until_its_translation_is_updated(tmp_path):
    en = english("04_optim")
    entries = edition.load_entries(paths("04_optim").translation)
    assert edition.status(en, entries, "04").ok
    cell = next(c for c in en.cells if c.cell_type == "markdown" and c.id != en.cells[0].id)
    cell.source = cell.source + "\n\nA sentence the translation does not have."
    found = edition.status(en, entries, "04")
    assert list(found.stale) == [cell.id] and not found.ok
    assert "+A sentence the translation does not have." in found.stale[cell.id]
    assert "stale " + cell.id in found.report()
    # --todo brings the entry to the new English and marks it fuzzy: still stale
    marked = edition.todo(en, entries)
    again = edition.parse(edition.render(marked, "04_optim.ipynb"))
    assert list(edition.status(en, again, "04").stale) == [cell.id]
    fuzzy = next(e for e in again if e.cell == cell.id)
    assert "A sentence the translation does not have." in fuzzy.fuzzy
    # the translator updates the Chinese and deletes the fuzzy comment: current again
    fuzzy.zh += "\n\n一句译文里没有的话。"
    fuzzy.fuzzy = ""
    assert edition.status(en, again, "04").ok
    built = edition.build(en, again, None, "https://github.com/o/n", "04_optim.ipynb")
    assert "一句译文里没有的话。" in next(c for c in built.cells if c.id == cell.id).source


def test_zh_untranslated_and_orphaned_cells_are_reported():
    en = english("04_optim")
    entries = edition.load_entries(paths("04_optim").translation)
    first = next(c for c in en.cells if c.cell_type == "markdown")
    kept = [e for e in entries if e.cell != first.id]
    kept.append(edition.Entry("gone-cell", "0" * 12, "old English", "旧的译文"))
    found = edition.status(en, kept, "04")
    assert found.untranslated == [first.id] and found.orphaned == ["gone-cell"]
    built = edition.build(en, kept, None, "https://github.com/o/n", "04_optim.ipynb")
    assert built.cells[0].metadata["torchhw"] == {"untranslated": True}
    assert [e.cell for e in edition.todo(en, kept)][0] == first.id  # todo adds it, drops the orphan
    assert "gone-cell" not in [e.cell for e in edition.todo(en, kept)]


def test_zh_the_stale_report_fails_the_command(tmp_path, monkeypatch, capsys):
    """`torchhw zh` exits 1 and prints the diff when the English moved on."""
    root = tmp_path / "course"
    (root / "notebooks").mkdir(parents=True)
    (root / "translations" / "zh").mkdir(parents=True)
    (root / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    en = english("01_tensors")
    nbformat.write(en, root / "notebooks" / "01_tensors.ipynb")
    (root / "translations" / "zh" / "01_tensors.md").write_text(
        paths("01_tensors").translation.read_text(encoding="utf-8"), encoding="utf-8")
    monkeypatch.chdir(root)
    assert edition.main(["--build"]) == 0
    cell = next(c for c in en.cells if c.cell_type == "markdown" and c.id != en.cells[0].id)
    cell.source = cell.source.replace(" ", "  ", 1)
    nbformat.write(en, root / "notebooks" / "01_tensors.ipynb")
    capsys.readouterr()
    assert edition.main([]) == 1
    out = capsys.readouterr().out
    assert f"stale {cell.id}" in out and "+" in out


def test_zh_a_malformed_translation_says_where():
    with pytest.raises(CourseError, match="no '<!-- zh -->' line"):
        edition.parse("<!-- cell c1 en 0123456789ab -->\n<!-- en -->\nText\n")
    with pytest.raises(CourseError, match="line 2"):
        edition.parse("<!-- cell c1 en 0123456789ab -->\nstray\n<!-- en -->\nA\n<!-- zh -->\n甲\n")
    with pytest.raises(CourseError, match="twice"):
        one = "<!-- cell c1 en 0123456789ab -->\n<!-- en -->\nA\n<!-- zh -->\n甲\n"
        edition.parse(one + "\n" + one)


def test_zh_hash_ignores_the_verified_line():
    text = "# Title\n\nIntro."
    assert edition.text_hash(text) == edition.text_hash(
        text + "\n\n*Outputs verified with torch 2.13.0 on X (avx512 kernels, 2 threads), "
               "2026-12-01, by `make notebooks`. Yours will differ where they depend on the machine.*")
    assert edition.text_hash(text) != edition.text_hash(text + " More.")


def test_zh_localised_links_and_badges():
    text = ("[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](x) y\n"
            "见 [README](../README.md) 和 [卡片](../reference/cards/) 以及 [04](04_optim.ipynb)")
    out = edition.localise(text, "https://github.com/o/n", "04_optim.ipynb")
    assert "notebooks/zh/04_optim.ipynb" in out
    assert "](../../README.zh.md)" in out and "](../../reference/cards/)" in out
    assert "](04_optim.ipynb)" in out


def test_zh_every_message_has_a_translation():
    found = catalog.problems(ROOT, "zh")
    assert not found, "\n".join(found[:40]) + (f"\n... and {len(found) - 40} more" if len(found) > 40
                                               else "") + "\n(torchhw zh --messages lists them)"


def test_zh_catalog_entries_are_chinese():
    for en, (text, where) in catalog.load(ROOT, "zh").items():
        words = re.sub(r"\{\w*\}", "", en)  # the fields are names, not words to translate
        if re.match(r"[A-Za-z_][\w.]*[({]", en) and text == en:
            continue  # a call as code, e.g. verdict({median}, {low}, {high}): stays as it is
        if re.search(r"[A-Za-z]{3}", words):
            assert CJK.search(text) or text == en.strip() == "", (where, en, text)


def test_zh_parameter_errors_are_chinese(speak_zh):
    from torchhw.params import ParameterError, check_params, int_range

    with pytest.raises(ParameterError) as err:
        check_params({"seed": 5, "quick": "maybe"}, seed=int_range(0, 3), quick=bool)
    assert CJK.search(str(err.value)) and "-p" in str(err.value)
    with pytest.raises(ParameterError) as err:
        check_params({"sed": 1}, seed=int)
    assert "seed" in str(err.value) and CJK.search(str(err.value))


def test_zh_setup_and_skips_speak_the_notebooks_language(capsys):
    from torchhw.notebook import setup, skip

    try:
        setup(lang="zh")
        skip("thread counts matter for CPU work; the models here run on {device}", device="cuda")
        out = capsys.readouterr().out
        assert out.startswith("设备：") and "cuda" in out and CJK.search(out.splitlines()[-1])
        with pytest.raises(ValueError, match="unknown language"):
            setup(lang="fr")
    finally:
        i18n.set_language("en")
    setup()
    assert capsys.readouterr().out.startswith("device: ")


CASES = [(name, number) for name in MODULES
         for number in importlib.import_module(f"torchhw.exercises.{name}").CHECKS]


@pytest.mark.parametrize("name, number", CASES)
def test_zh_feedback_and_hints_are_chinese(name, number, speak_zh, monkeypatch):
    from torchhw.exercises import data_parallel, devices

    monkeypatch.setattr(devices, "_copy_seconds", lambda nbytes, device: nbytes / 5e9)
    monkeypatch.setattr(data_parallel, "_calibrate", lambda seconds: 1)
    monkeypatch.setattr(data_parallel, "_run_replicas",
                        lambda replicas, work: 0.03 * (replicas if work.holds_gil else 1))
    module = importlib.import_module(f"torchhw.exercises.{name}")
    check = module.CHECKS[number]
    right = check(module.SOLUTIONS[number])
    assert right.ok and repr(right).startswith("✅ 练习")
    assert not right.message or CJK.search(i18n._(right.message)), right.message
    for wrong in module.WRONG[number]:
        feedback = check(wrong)
        assert feedback.status == "wrong"
        assert CJK.search(i18n._(feedback.message)), (name, number, feedback.message)
    for text in (check.title, check.nudge, check.more):
        assert CJK.search(i18n._(text)), (name, number, text)
    assert CJK.search(repr(module.hint(99)))


def test_zh_readme_has_the_same_commands():
    en = (ROOT / "README.md").read_text()
    zh = (ROOT / "README.zh.md").read_text(encoding="utf-8")
    assert CJK.search(zh)
    for command in re.findall(r"^make (?:run|test)\b[^\n#]*", en, re.M)[:2]:
        assert command.strip() in zh, command
    assert "notebooks/zh/" in zh and "README.md" in zh
    assert "README.zh.md" in en


def test_zh_terms_table_exists():
    terms = (ROOT / "translations" / "zh" / "TERMS.md").read_text(encoding="utf-8")
    for term in ("张量", "自动求导", "计算图", "数据并行", "分布式数据并行", "屋顶线模型", "算术强度",
                 "带宽", "检查点", "混合精度"):
        assert term in terms


def test_zh_handouts_index_is_chinese():
    from torchhw.course import handouts

    page = handouts.index_page([("04_optim.html", "04 · 优化器与训练循环", [("1", "1. 数据")])], "zh")
    assert '<html lang="zh">' in page and "目录" in page and "优化器" in page
    # the page's own heading, not the last notebook's title
    assert "<h1>torchhw：在真实硬件上学 PyTorch</h1>" in page and "<title>torchhw：" in page
    assert "<h1>torchhw: PyTorch on real hardware</h1>" in handouts.index_page(
        [("04_optim.html", "04 · Optimizers", [])])
    assert handouts.language_of(chinese("04_optim")) == "zh"
    assert handouts.language_of(english("04_optim")) == "en"

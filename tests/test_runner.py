"""The runner behind `make run`: selection, parameters, failures, the report.

Runs small synthetic notebooks (a kernel start each, a few seconds in all), not the course.
"""

import json
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from torchhw.course import runner
from torchhw.course.cli import main


def write(folder, name, *sources, params="quick = True\nseed = 0"):
    nb = new_notebook(metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                               "language": "python"}})
    cell = new_code_cell(params)
    cell.metadata["tags"] = ["parameters"]
    nb.cells = [cell] + [new_code_cell(s) for s in sources]
    nbformat.write(nb, folder / name)


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    folder = tmp_path_factory.mktemp("course")
    write(folder, "00_first.ipynb",
          "from torchhw import measurements\nmeasurements.add('answer', 42 if quick else 0, 'units')\n"
          "measurements.add('seed seen', seed)")
    write(folder, "01_broken.ipynb", "x = 1", "1 / 0", params="quick = True")
    write(folder, "02_after.ipynb", "print('still ran')", params="quick = True\nlr = 0.1")
    return folder


def test_select_by_number_topic_or_name(course):
    paths = runner.discover(course)
    assert [p.stem for p in paths] == ["00_first", "01_broken", "02_after"]
    assert [p.stem for p in runner.select(paths, ["02", "first"])] == ["00_first", "02_after"]
    assert runner.select(paths, ["01_broken.ipynb"])[0].stem == "01_broken"
    assert runner.select(paths, []) == paths


def test_unknown_notebook_lists_what_exists(course):
    with pytest.raises(runner.CourseError) as err:
        runner.select(runner.discover(course), ["frist"])
    message = str(err.value)
    assert "no notebook matches 'frist'" in message
    assert "00_first, 01_broken, 02_after" in message and "Did you mean 'first'" in message


def test_cli_unknown_notebook_exits_2_and_lists(course, capsys):
    assert main(["run", "nosuchbook", "--dir", str(course)]) == 2
    err = capsys.readouterr().err
    assert "no notebook matches 'nosuchbook'" in err and "00_first" in err


def test_unknown_parameter_is_refused_before_running(course, tmp_path):
    with pytest.raises(runner.CourseError, match="unknown parameter 'sed'.*Did you mean 'seed'"):
        runner.run_course(parameters={"sed": 1}, notebooks=course, out_dir=tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_parse_value_like_papermill():
    assert runner.parse_value("3") == 3 and runner.parse_value("0.5") == 0.5
    assert runner.parse_value("True") is True and runner.parse_value("None") is None
    assert runner.parse_value("cuda") == "cuda" and runner.parse_value("maybe") == "maybe"


def test_run_goes_past_a_failure_and_reports_it(course, tmp_path):
    lines = []
    out, results = runner.run_course(parameters={"seed": 7, "lr": 0.5}, notebooks=course,
                                     out_dir=tmp_path / "run", progress=False, card=False,
                                     echo=lambda *a, **k: lines.append(" ".join(map(str, a))))
    first, broken, after = results
    assert (first.status, broken.status, after.status) == ("ok", "failed", "ok")
    assert first.parameters == {"seed": 7, "quick": True}       # lr only where declared
    assert after.parameters == {"lr": 0.5, "quick": True}
    assert first.measurements["answer"]["value"] == 42
    assert first.measurements["seed seen"]["value"] == 7
    # In [4] of the executed copy: papermill injects a parameters cell after the tagged one
    assert "ZeroDivisionError" in broken.error and broken.failing_cell == 4
    assert "1 / 0" in broken.failing_source
    assert (out / "02_after.ipynb").exists()

    report = json.loads((out / "report.json").read_text())
    assert report["passed"] == 2 and report["failed"] == 1
    assert report["hardware"]["rows"]
    md = (out / "report.md").read_text()
    assert "01_broken failed" in md and "ZeroDivisionError" in md and "| answer | 42 |" in md
    assert "2 passed, 1 failed" in "\n".join(lines)


def test_full_mode_and_exit_status_through_the_cli(course, tmp_path, capsys):
    code = main(["run", "first", "--full", "--no-progress", "--no-card", "--dir", str(course),
                 "--out", str(tmp_path / "r")])
    assert code == 0
    data = json.loads((tmp_path / "r" / "report.json").read_text())
    assert data["notebooks"][0]["parameters"] == {"quick": False}
    assert data["notebooks"][0]["measurements"]["answer"]["value"] == 0
    assert main(["run", "broken", "--no-progress", "--no-card", "--dir", str(course),
                 "--out", str(tmp_path / "r2")]) == 1
    assert not (tmp_path / "r2" / "card.json").exists()


CARD_WRITER = """
import json, shutil
from pathlib import Path
from torchhw import cards
source = sorted(Path(reference).glob("*.json"))[0]
card = cards.load(source)
card.pop("path")
cards.save(card, card_dir)
"""


def test_a_run_leaves_the_card_notebook_10_wrote_as_card_json(tmp_path):
    from conftest import ROOT

    from torchhw import cards

    folder = tmp_path / "course"
    folder.mkdir()
    write(folder, "10_capstone.ipynb", CARD_WRITER,
          params=f"quick = True\ncard_dir = ''\nreference = {str(ROOT / 'reference' / 'cards')!r}")
    out, results = runner.run_course(notebooks=folder, out_dir=tmp_path / "run", progress=False,
                                     echo=lambda *a, **k: None)
    assert results[0].status == "ok", results[0].error
    assert results[0].parameters["card_dir"] == str(out)        # the run folder, given
    assert sorted(p.name for p in out.glob("*.json")) == ["card.json", "report.json"]
    assert cards.load(out)["created"]                             # compare takes the folder
    report = json.loads((out / "report.json").read_text())
    assert report["card"] == {"file": "card.json", "note": "written by notebook 10"}
    assert "## Report card" in (out / "report.md").read_text()


def test_a_run_without_notebook_10_measures_a_card(course, tmp_path, monkeypatch):
    from torchhw import cards

    made = []

    def measure(**kwargs):
        made.append(kwargs)
        return cards.load(sorted((Path(__file__).parents[1] / "reference" / "cards").glob("*.json"))[0])

    monkeypatch.setattr(cards, "measure", measure)
    out, _ = runner.run_course(["first"], notebooks=course, out_dir=tmp_path / "run",
                               progress=False, echo=lambda *a, **k: None)
    assert made and made[0]["budget_s"] <= 10 and "without notebook 10" in made[0]["by"]
    assert cards.load(out / "card.json")
    assert "measured by torchhw run" in json.loads((out / "report.json").read_text())["card"]["note"]

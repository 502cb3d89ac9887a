"""Every notebook keeps the course's shape (see STYLE in the README): the same opening, the
same ending, parameters that are validated, outputs from one fresh run of the current code."""

import ast
import re

import nbformat
import papermill
import pytest

from torchhw.exercises import MODULES
from torchhw.course.regen import VERIFIED, source_hash, verified_line

from conftest import notebook_paths

PATHS = notebook_paths()
IDS = [p.stem for p in PATHS]
TIMING = re.compile(r"\bbench\.|time\.perf_counter|hardware\.report\(|setup\(")


@pytest.fixture(params=PATHS, ids=IDS)
def nb(request):
    notebook = nbformat.read(request.param, as_version=4)
    notebook.path = request.param
    return notebook


def test_notebooks_are_numbered_in_reading_order():
    assert PATHS, "no notebooks found"
    numbers = [int(p.name[:2]) for p in PATHS]
    # the plan has 00..10; parts of it land at different times, but the order never changes
    assert numbers[0] == 0 and numbers == sorted(set(numbers)) and numbers[-1] <= 10, numbers
    assert all(re.fullmatch(r"\d\d_[a-z0-9_]+\.ipynb", p.name) for p in PATHS)


def test_opening(nb):
    name, number = nb.path.name, nb.path.name[:2]
    intro = nb.cells[0]
    assert intro.cell_type == "markdown"
    assert re.match(rf"# {number} · \S", intro.source), "title must be '# NN · Title'"
    assert f"colab.research.google.com/github/" in intro.source and f"notebooks/{name})" in intro.source
    assert f"mybinder.org/v2/gh/" in intro.source and f"urlpath=lab/tree/notebooks/{name}" in intro.source
    goals = intro.source.split("What you will learn", 1)[1].split("Prerequisites", 1)[0]
    assert 3 <= len(re.findall(r"^- ", goals, re.M)) <= 5, "3 to 5 learning goals"
    assert "**Prerequisites:**" in intro.source and "GPU:" in intro.source

    install = nb.cells[1]
    assert install.cell_type == "code"
    assert '"google.colab" in sys.modules' in install.source and "%pip install" in install.source


def parameter_names(cell):
    names = []
    for line in cell.source.splitlines():
        if not line.strip():
            continue
        match = re.fullmatch(r"(\w+) = (.+?)\s+# \S.*", line)
        assert match, f"parameters are 'name = value  # why', one per line: {line!r}"
        assert line.count("=") == 1, f"papermill skips a parameter line with a second '=': {line!r}"
        names.append(match.group(1))
        ast.literal_eval(match.group(2))  # plain values, as papermill can override them
    return names


def test_parameters_cell_and_its_validation(nb):
    params = nb.cells[2]
    assert params.cell_type == "code" and "parameters" in params.metadata.get("tags", [])
    names = parameter_names(params)
    assert list(papermill.inspect_notebook(str(nb.path))) == names, "papermill must see them all"
    assert {"device", "quick", "seed"} <= set(names)
    assert 'device = "auto"' in params.source and "quick = True" in params.source

    check = nb.cells[3]
    calls = [node for node in ast.walk(ast.parse(check.source))
             if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "check_params"]
    assert calls, "the cell after 'parameters' must call check_params(globals(), ...)"
    assert sorted(k.arg for k in calls[0].keywords) == sorted(names), \
        "check_params must validate exactly the parameters the cell declares"
    assert "setup(seed=seed, device=device" in check.source


def test_ending(nb):
    md = [(i, c.source) for i, c in enumerate(nb.cells) if c.cell_type == "markdown"]
    summary = [i for i, s in md if "## Summary" in s]
    exercises = [i for i, s in md if "## Exercises" in s]
    assert summary and exercises and summary[0] <= exercises[0]
    checks = [c for c in nb.cells[exercises[0]:] if c.cell_type == "code"
              and re.search(r"\bex\.check_\d+\(", c.source)]
    assert len(checks) >= 3, "at least three checked exercises"
    topic = nb.path.stem[3:]
    assert topic in MODULES and f"torchhw.exercises import {topic} as ex" in checks[0].source
    last = nb.cells[-1]
    assert last.cell_type == "markdown" and "**Next:**" in last.source


def test_outputs_come_from_one_fresh_run_of_the_current_code(nb):
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert [c.execution_count for c in code] == list(range(1, len(code) + 1)), \
        "outputs are not from one top-to-bottom run: run `make notebooks`"
    stored = nb.metadata.get("torchhw", {}).get("source_hash")
    assert stored == source_hash(nb), \
        "code changed since the outputs were made: run `make notebooks` and commit the result"
    for c in code:
        errors = [o for o in c.outputs if o.output_type == "error"]
        assert not errors or "raises-exception" in c.metadata.get("tags", []), c.source[:60]


def test_machine_dependent_cells_are_marked_for_nbval(nb):
    for c in nb.cells:
        if c.cell_type == "code" and TIMING.search(c.source):
            tags = c.metadata.get("tags", [])
            assert "nbval-ignore-output" in tags or "nbval-skip" in tags, \
                f"this cell prints machine- or clock-dependent output: tag it\n{c.source[:80]}"


def test_notebook_stays_small(nb):
    assert nb.path.stat().st_size < 1_000_000


def test_outputs_say_which_torch_machine_and_date_made_them(nb):
    label = nb.metadata.get("torchhw", {}).get("verified")
    assert label, "no 'verified' record: run `make notebooks`"
    assert nb.cells[0].source.rstrip().endswith(verified_line(label)), \
        "the opening cell must end with the 'Outputs verified with ...' line of the last regeneration"
    assert len(VERIFIED.findall(nb.cells[0].source)) == 1


def test_no_deprecation_or_future_warning_in_any_output(nb):
    for c in nb.cells:
        if c.cell_type == "code":
            text = nbformat.writes(nbformat.v4.new_notebook(cells=[c]))
            assert "DeprecationWarning" not in text and "FutureWarning" not in text, \
                f"a cell warns of an API on its way out: use its replacement\n{c.source[:80]}"


LINK = re.compile(r"\]\((?:\.\./notebooks/|notebooks/|\./)?(\d\d_[a-z0-9_]+\.ipynb)(?:#[^)]*)?\)")


def test_links_between_notebooks_point_at_notebooks_that_exist_in_course_order(nb):
    names = [p.name for p in PATHS]
    for c in nb.cells:
        if c.cell_type == "markdown":
            for target in LINK.findall(c.source):
                assert target in names, f"{nb.path.name} links to {target}, which does not exist"
    following = names[names.index(nb.path.name) + 1:]
    nexts = LINK.findall(nb.cells[-1].source.split("**Next:**", 1)[1])
    if following:
        assert nexts and nexts[0] == following[0], \
            f"**Next:** must point at {following[0]}, the next notebook in the course"


def test_readme_links_only_to_notebooks_that_exist():
    from conftest import ROOT

    names = {p.name for p in PATHS}
    for target in LINK.findall((ROOT / "README.md").read_text()):
        assert target in names, f"README links to {target}, which does not exist"

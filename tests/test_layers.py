"""The package's architecture, held by a test: what notebooks import sits in layers, each module
importing only from layers below it, with no cycles; the course tooling (torchhw.course) sits
on top and nothing below imports it; the learner's part needs only the learner's libraries.

The imports are read from the source (every import statement, also those inside functions),
so an import added anywhere is seen.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

# Each learner module's layer: a module may import only from lower layers.
LAYERS: dict[str, int] = {
    # ground: knows no other torchhw module
    "torchhw": 0, "torchhw.clock": 0, "torchhw.data": 0, "torchhw.models": 0,
    "torchhw.checkpoint": 0, "torchhw.plots": 0, "torchhw.measurements": 0, "torchhw.i18n": 0,
    "torchhw.device": 0, "torchhw.cpu": 0,
    "torchhw.distributed.comm": 0, "torchhw.distributed.elastic": 0,
    "torchhw.distributed.processes": 0,
    # built on the ground
    "torchhw.hardware": 1, "torchhw.bench": 1, "torchhw.train": 1, "torchhw.widgets": 1,
    "torchhw.notebook": 1, "torchhw.knobs": 1, "torchhw.checks": 1, "torchhw.params": 1,
    "torchhw.distributed.placement": 1, "torchhw.distributed.diagnosis": 1,
    "torchhw.distributed.guard": 1,
    # built on those
    "torchhw.peak": 2, "torchhw.achievable": 2, "torchhw.tune": 2, "torchhw.cards": 3,
    "torchhw.distributed.launcher": 2, "torchhw.distributed.agents": 2,
    "torchhw.distributed.train": 2,
    "torchhw.distributed.jobs": 3,
    # the distributed package's face: what notebooks import from torchhw.distributed
    "torchhw.distributed": 4,
    # what the notebooks' exercises check with
    "torchhw.exercises": 5,
}
TOOLING = "torchhw.course"
# what the learner's modules may import from outside the standard library
LEARNER_LIBRARIES = {"torch", "numpy", "matplotlib", "matplotlib_inline", "IPython", "ipywidgets",
                     "psutil", "sklearn", "yaml", "jsonschema"}


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """Absolute names of everything ``path`` imports."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module
            found.add(prefix)
            found.update(f"{prefix}.{alias.name}" for alias in node.names)
    return found


MODULES = {module_name(p): p for p in SRC.rglob("*.py")}


def layer_of(name: str) -> int | None:
    """The layer of a torchhw module; the modules of ``exercises`` share its layer."""
    if name in LAYERS:
        return LAYERS[name]
    parent = name.rpartition(".")[0]
    return LAYERS.get(parent) if parent == "torchhw.exercises" else None


def torchhw_imports(name: str) -> set[str]:
    """The torchhw modules ``name`` imports (names that are not modules are dropped)."""
    return {i for i in imports(MODULES[name]) if i in MODULES and i != name}


LEARNER = sorted(n for n in MODULES if not n.startswith(TOOLING) and n != "torchhw.__main__")


@pytest.mark.parametrize("name", LEARNER)
def test_every_learner_module_has_a_layer(name):
    assert layer_of(name) is not None, f"{name}: add it to LAYERS in {Path(__file__).name}"


@pytest.mark.parametrize("name", LEARNER)
def test_imports_only_go_down_the_layers(name):
    mine = layer_of(name)
    for other in torchhw_imports(name):
        assert not other.startswith(TOOLING), \
            f"{name} imports the course tooling {other}: notebooks must not need it"
        if other == "torchhw" or other.startswith(name + "."):
            continue
        theirs = layer_of(other)
        same_package = other.rpartition(".")[0] == name.rpartition(".")[0] == "torchhw.exercises"
        assert theirs is not None and (theirs < mine or same_package), \
            f"{name} (layer {mine}) imports {other} (layer {theirs}): only lower layers"


@pytest.mark.parametrize("name", LEARNER)
def test_learner_modules_need_only_the_learners_libraries(name):
    stdlib = set(sys.stdlib_module_names)
    for other in imports(MODULES[name]):
        top = other.split(".")[0]
        assert top in stdlib or top == "torchhw" or top in LEARNER_LIBRARIES, \
            f"{name} imports {other}, which the learner's install does not bring"


def test_no_import_cycles():
    graph = {n: torchhw_imports(n) for n in MODULES}
    state: dict[str, int] = {}  # 1 visiting, 2 done

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycle = trail[trail.index(nxt):] + [nxt] if nxt in trail else [node, nxt]
                raise AssertionError(f"import cycle: {' -> '.join(cycle)}")
            if nxt not in state:
                visit(nxt, trail + [nxt])
        state[node] = 2

    for start in sorted(graph):
        if start not in state:
            visit(start, [start])


"""Every checker accepts its reference solution, rejects typical wrong answers with feedback,
and treats an untouched exercise as 'not attempted' rather than failing."""

import importlib

import pytest

from torchhw.checks import Feedback, Wrong, close, exercise
from torchhw.exercises import MODULES

@pytest.fixture(autouse=True)
def deterministic_clocks(monkeypatch):
    """The 'predict, then measure' checkers time real work. Here a model of the machine takes
    the clock's place, so a busy test machine cannot fail them: what is tested is the grading."""
    from torchhw.exercises import data_parallel, devices

    monkeypatch.setattr(devices, "_copy_seconds", lambda nbytes, device: nbytes / 5e9)
    monkeypatch.setattr(data_parallel, "_calibrate", lambda seconds: 1)
    monkeypatch.setattr(data_parallel, "_run_replicas",
                        lambda replicas, work: 0.03 * (replicas if work.holds_gil else 1))


CASES = [(name, number) for name in MODULES
         for number in importlib.import_module(f"torchhw.exercises.{name}").CHECKS]


def load(name):
    return importlib.import_module(f"torchhw.exercises.{name}")


def test_every_notebook_has_at_least_three_exercises():
    for name in MODULES:
        module = load(name)
        assert len(module.CHECKS) >= 3, name
        assert set(module.CHECKS) == set(module.SOLUTIONS) == set(module.WRONG), name


@pytest.mark.parametrize("name, number", CASES)
def test_reference_solution_is_accepted(name, number):
    module = load(name)
    feedback = module.CHECKS[number](module.SOLUTIONS[number])
    assert feedback.ok, feedback
    assert repr(feedback).startswith("✅")


@pytest.mark.parametrize("name, number", CASES)
def test_typical_wrong_answers_are_rejected_with_a_hint(name, number):
    module = load(name)
    for wrong in module.WRONG[number]:
        feedback = module.CHECKS[number](wrong)
        assert feedback.status == "wrong", (name, number, feedback)
        assert feedback.message and "Hint:" in repr(feedback)


@pytest.mark.parametrize("name, number", CASES)
def test_untouched_exercise_is_not_attempted(name, number):
    module = load(name)

    def placeholder(*args, **kwargs):
        raise NotImplementedError

    # the starters in the notebooks: `x = None`, or a function whose body raises
    starters = [None] if isinstance(module.SOLUTIONS[number], type) else [None, placeholder]
    for answer in starters:
        feedback = module.CHECKS[number](answer)
        assert feedback.status == "todo" and "not attempted" in repr(feedback)


def test_checker_reports_a_crash_in_the_answer():
    @exercise(9, "demo", hint="h")
    def check(answer):
        close(answer(), 1.0, "answer()")

    assert check(lambda: 1.0).ok
    broken = check(lambda: 1 / 0)
    assert broken.status == "wrong" and "ZeroDivisionError" in broken.message
    assert "got 2" in check(lambda: 2.0).message
    assert check(lambda: "x").status == "wrong"


def test_feedback_text():
    assert repr(Feedback(1, "t", "correct", "well done")) == "✅ Exercise 1 (t): correct. well done"
    with pytest.raises(Wrong):
        close(1.1, 1.0, "x")

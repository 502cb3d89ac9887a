"""Exercises of notebooks 00-02 beyond the shared contract: other right answers are accepted,
and the checkers that watch *how* an answer was reached leave no trace behind."""

import importlib

import pytest
import torch

from torchhw.exercises import autograd

BASICS = ["hardware_tour", "tensors", "autograd"]


@pytest.mark.parametrize("name", BASICS)
def test_other_right_answers_are_accepted(name):
    module = importlib.import_module(f"torchhw.exercises.{name}")
    for number, answers in getattr(module, "ALSO_RIGHT", {}).items():
        for answer in answers:
            feedback = module.CHECKS[number](answer)
            assert feedback.ok, (name, number, feedback)


def test_by_hand_check_restores_autograd():
    engine, dual = torch.autograd._engine_run_backward, torch.autograd.forward_ad.make_dual
    assert autograd.check_1(autograd.WRONG[1][2]).status == "wrong"  # used backward
    assert autograd.check_1(autograd.SOLUTIONS[1]).ok
    assert torch.autograd._engine_run_backward is engine
    assert torch.autograd.forward_ad.make_dual is dual
    x = torch.tensor(3.0, requires_grad=True)
    (x * x).backward()
    assert x.grad.item() == 6.0


def test_by_hand_feedback_names_the_problem():
    feedback = autograd.check_1(autograd.WRONG[1][3])  # torch.func.grad
    assert "by hand" in feedback.message


def test_function_that_skips_save_for_backward_is_told_why():
    feedback = autograd.check_3(autograd.WRONG[3][2])
    assert "save_for_backward" in feedback.message

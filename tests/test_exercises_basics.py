"""Exercises of notebooks 00-02 beyond the shared contract: the checkers that watch *how* an
answer was reached leave no trace behind. (Other right answers, ALSO_RIGHT, are tested for
every module in test_exercises.py.)"""

import torch

from torchhw.exercises import autograd


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


def test_a_numerical_gradient_must_not_ask_autograd_either():
    engine = torch.autograd._engine_run_backward
    feedback = autograd.check_2(autograd._numerical_by_autograd)
    assert feedback.status == "wrong" and "autograd" in feedback.message
    assert torch.autograd._engine_run_backward is engine
    assert torch.autograd.forward_ad.make_dual is not None


def test_checks_that_watch_calls_leave_torch_and_numpy_as_they_were():
    import numpy as np
    import torch._refs

    from torchhw.exercises import tensors

    saved = (torch.broadcast_shapes, torch._refs._broadcast_shapes, np.broadcast_shapes,
             np.broadcast)
    assert tensors.check_1(tensors._broadcast_shape_by_torch).status == "wrong"
    assert tensors.check_1(tensors.SOLUTIONS[1]).ok
    assert (torch.broadcast_shapes, torch._refs._broadcast_shapes, np.broadcast_shapes,
            np.broadcast) == saved
    makers = (np.empty, np.zeros, torch._C._infer_size)
    assert tensors.check_3(tensors.WRONG[3][-1]).status == "wrong"  # np.empty(shape).strides
    assert tensors.check_1(tensors.WRONG[1][-1]).status == "wrong"  # torch._C._infer_size
    assert (np.empty, np.zeros, torch._C._infer_size) == makers

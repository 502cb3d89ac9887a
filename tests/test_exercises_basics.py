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


def test_forward_mode_imported_by_name_is_refused_and_torch_restored():
    entries = autograd._engine_entries()
    before = [(owner, name, vars(owner).get(name)) for owner, name in entries]
    feedback = autograd.check_1(autograd._grad_by_forward_mode)
    assert feedback.status == "wrong" and "make_dual" in feedback.message
    assert [(owner, name, vars(owner).get(name)) for owner, name in entries] == before
    x = torch.tensor([1.0, 2.0])
    _, tangent = torch.func.jvp(lambda t: t**2, (x,), (torch.ones_like(x),))
    assert torch.equal(tangent, 2 * x)


def test_a_right_formula_in_float32_is_told_the_dtype_not_an_estimate():
    feedback = autograd.check_1(autograd._grad_in_float32)
    assert feedback.status == "wrong"
    assert "x's dtype" in feedback.message and "numerical estimate" not in feedback.message
    feedback = autograd.check_1(lambda x: autograd.SOLUTIONS[1](x.float()).double())
    assert feedback.status == "wrong" and "computed in float32" in feedback.message


def test_a_function_that_saves_but_reads_ctx_x_is_refused():
    feedback = autograd.check_3(autograd._CubeSavesButReadsCtx)
    assert feedback.status == "wrong" and "ctx.saved_tensors" in feedback.message


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


def test_watching_refuses_a_class_and_replaces_nothing():
    import numpy as np
    import pytest

    from torchhw.checks import watching

    saved = (np.broadcast, np.broadcast_shapes)
    with pytest.raises(TypeError, match="cannot watch the class"):
        with watching((np, "broadcast_shapes", "numpy.broadcast_shapes"),
                      (np, "broadcast", "numpy.broadcast")):
            pass
    assert (np.broadcast, np.broadcast_shapes) == saved

"""The feedback of notebooks 03 and 04's exercises for the mistakes readers actually make."""

from torchhw.exercises import nn as ex_nn
from torchhw.exercises import optim as ex_optim


def test_conv_out_with_padding_and_stride_swapped_says_so():
    swapped = lambda size, kernel, stride=1, padding=0: (size + 2 * stride - kernel) // padding + 1
    feedback = ex_nn.check_2(swapped)
    assert feedback.status == "wrong"
    assert "padding was used as the stride" in feedback.message
    assert "raised ZeroDivisionError" not in feedback.message


def test_conv_out_with_other_argument_names_is_told_conv2d_order():
    feedback = ex_nn.check_2(lambda n, k, s=1, p=0: (n + 2 * p - k) // s + 1)
    assert feedback.status == "wrong" and "stride=1, padding=0" in feedback.message


def test_a_plain_list_of_layers_is_explained():
    feedback = ex_nn.check_4(ex_nn.WRONG[4][0])
    assert feedback.status == "wrong" and "Python lists hide" in feedback.message


def test_conv_out_padding_on_one_side_is_not_called_a_missing_plus_one():
    # both give 7 on the first case (8, 3, padding 1): the other cases tell them apart
    one_side = ex_nn.check_2(lambda size, kernel, stride=1, padding=0:
                             (size + padding - kernel) // stride + 1)
    no_plus_one = ex_nn.check_2(lambda size, kernel, stride=1, padding=0:
                                (size + 2 * padding - kernel) // stride)
    assert one_side.status == no_plus_one.status == "wrong"
    assert "both sides" in one_side.message and "add 1" not in one_side.message
    assert "add 1" in no_plus_one.message and "both sides" not in no_plus_one.message


def test_count_trainable_counts_a_tied_parameter_once():
    def per_module(m):
        return sum(p.numel() for c in m.modules() for p in c.parameters(recurse=False)
                   if p.requires_grad)

    feedback = ex_nn.check_3(per_module)
    assert feedback.status == "wrong" and "tied" in feedback.message


def test_make_stack_must_leave_something_to_train():
    import torch

    feedback = ex_nn.check_4(ex_nn._NoGrad)
    assert feedback.status == "wrong" and "no_grad" in feedback.message
    with torch.no_grad():  # the checker trains as an optimizer would, whatever the caller's mode
        assert ex_nn.check_4(ex_nn._Stack).ok

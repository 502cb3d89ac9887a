"""Feedback names what is wrong: each typical wrong answer in WRONG gets a message that says
its mistake, and the answers a review found graded unfairly are graded right now."""

import importlib

import pytest
import torch
from torch import nn

from test_exercises import deterministic_clocks  # noqa: F401  (autouse: the model clocks)
from torchhw.exercises import MODULES

# For every WRONG answer, in order, a phrase its feedback must contain: the mistake named, not
# only "expected something else". None marks an answer with no one mistake to name (nonsense,
# or nothing at all), whose feedback still shows what it got and what was expected.
NAMED = {
    ("hardware_tour", 1): ["two FLOP", "divides by it", "divide by 1e9", "k - 1 additions"],
    ("hardware_tour", 2): ["multiply-add one FLOP or two", "bytes_per_element", "C is written"],
    ("hardware_tour", 3): ["larger of the two roofs", "memory roof alone", "compute peak alone",
                           "needs no factor"],
    ("tensors", 1): ["missing sizes count as 1", None, "not the larger", "from the left",
                     "torch.broadcast_shapes", "numpy.broadcast_shapes", "making tensors",
                     "raise ValueError", "NumPy's broadcasting", "torch._C._infer_size"],
    ("tensors", 2): ["axis of size 1", "torch.cdist", "torch.cdist", "loop over pairs",
                     "tolist", "loop over the feature dimension"],
    ("tensors", 3): ["reversed", None, "without creating a tensor", "strides count elements",
                     "nor a NumPy array"],
    ("autograd", 1): ["derivative of -4x is -4", None, "by hand", "by hand", "+cos(x)",
                      "numerical estimate"],
    ("autograd", 2): ["one-sided", "half the gradient", None, "twice the gradient",
                      "values of f alone"],
    ("autograd", 3): ["grad_output", "the class itself", "save_for_backward"],
    ("nn", 1): ["leaves out the bias", "per output, not per input", "bias=False"],
    ("nn", 2): ["add 1", "stride is left out", "padding was used as the stride",
                "name the arguments as nn.Conv2d does", "round the division down",
                "padding was used as the stride", "takes padding before stride"],
    ("nn", 3): ["frozen layer", "batch-norm buffers", "numel()", "requires_grad",
                "requires_grad"],
    ("nn", 4): ["Python lists hide", "same Linear", "without a forward", "ReLU is missing",
                "no ReLU after the last layer", "no nn.Linear layers"],
    ("optim", 1): ["update it", "dampening", "learning rate", "Nesterov", "swapped"],
    ("optim", 2): ["cosine starts when warm-up ends", "(step + 1)", "(step + 1)"],
    ("optim", 3): ["its own norm", "clipping by value", "changed the gradients",
                   "below max_norm"],
    ("optim", 4): ["best epoch", "equal loss is no improvement", "equal loss is no improvement",
                   "starts again at 0", "count from 1", "lowest loss so far, not the epoch before"],
    ("devices", 1): ["1e9 bytes per second", "not bits", "8 times the bytes",
                     "8 times the bytes", "not milliseconds"],
    ("devices", 2): ["recurse", "recurse", "keep each container's type",
                     "keep each container's type", "original batch was changed"],
    ("devices", 3): ["quota in cpu.max is left out", "not shared", "round the quota down",
                     "cannot use more CPUs than the affinity", "never fewer than 1"],
    ("data_parallel", 1): ["without torch.chunk", "add up to the batch", "last one gets what",
                           "without torch.chunk"],
    ("data_parallel", 2): ["start only", "still start with 'module.'", "Unexpected key",
                           "changed the state_dict", "not the prefix 'module.'"],
    ("data_parallel", 3): ["take turns under the GIL", "overlap", "times what the threads took",
                           "same for both kinds", "does not grow with the number of replicas",
                           "times what the threads took"],
    ("ddp", 1): ["not in blocks", "without padding", "without padding"],
    ("ddp", 2): ["world_size times smaller", "mean loss needs no scaling", "upside down"],
    ("ddp", 3): ["ideal speed-up", "ideal speed-up", "nobody to talk to", "does not shrink"],
    ("ddp", 4): ["only FSDP splits it", "weights alone", "one piece is missing",
                 "leaves DDP's buckets out"],
    ("clusters", 1): ["node_rank ranks of nodes come before", "swapped"],
    ("clusters", 2): ["only the steps since the last checkpoint", "counts the checkpoints",
                      "at the crash step itself"],
    ("clusters", 3): ["--standalone", "--rdzv-id", "--standalone", "--rdzv-id",
                      "take it from the arguments", "--rdzv-backend should be c10d",
                      "torchrun rejects this command"],
    ("clusters", 4): ["rank 0 reports", "not only the first", None, "not strings",
                      "sort them", "every number in the report"],
    ("performance", 1): ["median alone", "ends are swapped", "course's threshold, 5%",
                         "not 0.95", "course's threshold is 5%",
                         "median alone is not enough: the whole interval must clear the threshold",
                         "the ends are swapped: 'faster' needs"],
    ("performance", 2): ["contiguous (NCHW)", None, "memory order"],
    ("performance", 3): ["both reads its input and writes", "reads once and writes once",
                         "those are elements"],
    ("performance", 4): ["counts elements", "counted once", "input batch too",
                         "same for all three models", "leaves the parameters out",
                         "4 bytes, not 2"],
    ("capstone", 1): ["one epoch's time", "stop adding", "falls again later", ">=, not >",
                      "include its seconds", "return None"],
    ("capstone", 2): ["epochs count from 0", "must be skipped", "swapped"],
    ("capstone", 3): ["a quarter", "twice", "parameters alone", "num_batches_tracked counters",
                      "num_batches_tracked counters", "are int64: 8 bytes", "size of the file",
                      "parameters alone"],
}


def load(name):
    return importlib.import_module(f"torchhw.exercises.{name}")


def test_every_wrong_answer_has_its_phrase():
    listed = {(name, number) for name in MODULES for number in load(name).CHECKS}
    assert set(NAMED) == listed
    for (name, number), phrases in NAMED.items():
        assert len(phrases) == len(load(name).WRONG[number]), (name, number)


@pytest.mark.parametrize("name, number", sorted(NAMED))
def test_feedback_names_the_mistake(name, number):
    module = load(name)
    for i, (wrong, phrase) in enumerate(zip(module.WRONG[number], NAMED[name, number])):
        feedback = module.CHECKS[number](wrong)
        assert feedback.status == "wrong", (name, number, i, feedback)
        if phrase is not None:
            assert phrase in feedback.message, (name, number, i, feedback.message)


# The review's findings, each with the answer it named


def test_01_2_a_loop_over_the_features_is_a_loop():
    from torchhw.exercises import tensors

    def loop_over_d(X, Y):
        return sum((X[:, None, k] - Y[None, :, k]) ** 2 for k in range(X.shape[1]))

    feedback = tensors.check_2(loop_over_d)
    assert feedback.status == "wrong" and "feature dimension" in feedback.message


def test_04_1_a_velocity_with_the_learning_rate_folded_in_is_not_sgds():
    from torchhw.exercises import optim

    def folded(param, grad, velocity, lr, momentum):
        velocity = momentum * velocity + lr * grad
        return param - velocity, velocity

    feedback = optim.check_1(folded)
    assert feedback.status == "wrong" and "learning rate" in feedback.message


@pytest.mark.parametrize("form", [int, float, torch.tensor, lambda n: (lambda: n)])
def test_10_3_parameters_without_buffers_are_refused_however_given(form):
    from torchhw.exercises import capstone

    params = sum(p.numel() * p.element_size() for p in capstone._cnn().parameters())
    feedback = capstone.check_3(form(params))
    assert feedback.status == "wrong" and "buffers" in feedback.message


def test_10_3_the_hints_mistake_is_named_by_the_hint_too():
    from torchhw.exercises import capstone

    assert "buffers" in capstone.check_3.more and "buffers" in capstone.check_3(1).message + \
        capstone.check_3(sum(p.numel() * 4 for p in capstone._cnn().parameters())).message


def test_09_4_section_10s_count_with_the_loss_is_right_too():
    from torchhw.exercises import performance

    def like_section_10(batch, features, hidden, depth):
        # activations, plus what F.cross_entropy keeps: its (batch, 10) log-softmax output, the
        # int64 labels, and a one-element total weight
        return 4 * (batch * features + depth * batch * hidden + 10 * batch + 1) + 8 * batch

    assert performance.check_4(like_section_10).ok


def test_09_4_the_measurement_with_the_loss_is_section_10s():
    from torchhw.exercises import performance
    from torchhw.models import MLP

    torch.manual_seed(0)
    model = MLP(8, 10, hidden=32, depth=1)
    x, y = torch.randn(16, 8), torch.randint(0, 10, (16,))
    alone = performance.saved_activation_bytes(model, x)
    with_loss = performance.saved_activation_bytes(model, x, y)
    assert alone == 4 * (16 * 8 + 16 * 32)
    assert with_loss == alone + 4 * 16 * 10 + 8 * 16 + 4


def test_03_4_a_bare_module_list_is_wrong_not_untouched():
    from torchhw.exercises import nn as ex_nn

    feedback = ex_nn.check_4(lambda depth, width: nn.ModuleList(
        nn.Linear(width, width) for _ in range(depth)))
    assert feedback.status == "wrong" and "forward" in feedback.message


def test_03_4_a_missing_relu_is_named_not_called_a_shape_error():
    from torchhw.exercises import nn as ex_nn

    for wrong in (ex_nn._NoReLU, ex_nn._NoLastReLU):
        feedback = ex_nn.check_4(wrong)
        assert feedback.status == "wrong" and "ReLU" in feedback.message
        assert "shape" not in feedback.message


def test_03_4_a_relu_missing_between_layers_is_caught_though_outputs_are_positive():
    from torchhw.exercises import nn as ex_nn

    class NoMiddleReLU(ex_nn._Stack):
        def forward(self, x):
            for i, layer in enumerate(self.layers):
                x = layer(x) if i == 0 else torch.relu(layer(x))
            return x

    feedback = ex_nn.check_4(NoMiddleReLU)
    assert feedback.status == "wrong" and "ReLU" in feedback.message


# Other rules the checkers now hold answers to


def test_05_1_a_constant_prediction_is_refused_before_it_can_be_lucky():
    from torchhw.exercises import devices

    # 27 ms is what the model clock measures for 128 MiB: a constant that lands on it
    feedback = devices.check_1(lambda nbytes, gbps: 0.0268)
    assert feedback.status == "wrong" and "8 times as long" in feedback.message


def test_05_1_a_right_answer_survives_a_busy_machine(monkeypatch):
    from torchhw.exercises import devices

    # the 128 MiB copies of the first tries are slowed 5x and 12x by other work, then one is
    # clean: the right answer passes, and the noise is never blamed on bits
    slow = iter([1, 5, 1, 12, 1, 1])
    monkeypatch.setattr(devices, "_copy_seconds", lambda n, d: n / 5e9 * next(slow))
    assert devices.check_1(devices.SOLUTIONS[1]).ok


def test_05_1_noise_is_not_blamed_on_bits(monkeypatch):
    from torchhw.exercises import devices

    # in every try the two timings disagree by a different factor between 4 and 16: refused,
    # but not blamed on bits
    slow = iter([1, 1 / 5, 1, 1 / 14, 1, 1 / 6, 1, 1 / 11, 1, 1 / 15])
    monkeypatch.setattr(devices, "_copy_seconds", lambda n, d: n / 5e9 * next(slow))
    feedback = devices.check_1(devices.SOLUTIONS[1])
    assert feedback.status == "wrong" and "bits" not in feedback.message
    assert "best of 5" in feedback.message


def test_06_3_a_constant_prediction_is_refused():
    from torchhw.exercises import data_parallel

    for constant in (0.03, 0.06, 0.18):
        assert data_parallel.check_3(lambda r, s, g: constant).status == "wrong"


def test_08_3_a_command_must_come_from_its_arguments():
    from torchhw.exercises import clusters

    feedback = clusters.check_3(clusters.WRONG[3][4])
    assert feedback.status == "wrong" and "from the arguments" in feedback.message


def test_08_4_the_ranks_are_sorted_ints():
    from torchhw.exercises import clusters

    assert clusters.check_4(clusters._culprits_as_found).status == "wrong"
    assert clusters.check_4(lambda r: [str(x) for x in clusters._culprits(r)]).status == "wrong"
    assert clusters.check_4(lambda r: tuple(clusters._culprits(r))).ok


def test_04_3_new_tensors_are_returned_and_the_given_ones_kept():
    from torchhw.exercises import optim

    feedback = optim.check_3(optim._clip_in_place)
    assert feedback.status == "wrong" and "changed the gradients" in feedback.message


def test_07_4_is_checked_against_what_the_ranks_measured():
    from torchhw.exercises import ddp

    total = 67_210  # section 11's MLP
    # as memory.py reports it: DDP holds everything on both ranks; FSDP's shards are uneven
    # where a dimension does not divide by 2, but add up to the whole
    ddp_rank = {"params": total, "weights": 4 * total, "grads": 4 * total, "adam": 8 * total}
    shards = [{"weights": 4 * (total // 2 + 5), "grads": 4 * (total // 2 + 5),
               "adam": 8 * (total // 2 + 5)},
              {"weights": 4 * (total // 2 - 5), "grads": 4 * (total // 2 - 5),
               "adam": 8 * (total // 2 - 5)}]
    measured = [{"ddp": ddp_rank, "fsdp": shard} for shard in shards]
    right = ddp.check_4(ddp.SOLUTIONS[4], measured=measured)
    assert right.ok and "measured" in right.message
    assert ddp.check_4(None, measured=measured).status == "todo"
    assert ddp.check_4(ddp.WRONG[4][3], measured=measured).status == "wrong"


def test_a_prediction_is_never_told_its_gap():
    """10-3 names what a wrong prediction left out, never by how many bytes: told the gap, a
    reader could add it and pass without knowing what was missing."""
    from torchhw.exercises import capstone

    exact = capstone._predicted()
    for wrong in capstone.WRONG[3] + [exact - 1000, exact + 7]:
        value = wrong() if callable(wrong) else wrong
        message = capstone.check_3(wrong).message
        gap = abs(exact - value)
        assert f"{exact:,}" not in message, message
        if gap >= 100:   # a gap of a few bytes is a rule ("8 bytes each"), not the answer
            assert f"{gap:,.0f}" not in message, message


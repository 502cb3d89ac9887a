"""Checkers and reference solutions for each notebook's "Check yourself" exercises.

One module per notebook, named after its topic. Each defines ``CHECKS`` (number ->
checker), ``SOLUTIONS`` (number -> a reference answer), ``ALSO_RIGHT`` (number -> right
answers written another way) and ``WRONG`` (number -> typical wrong answers: among them one
that breaks the exercise's stated rule and the mistake its hint warns about); the tests prove
every checker accepts the right answers and rejects the wrong ones, naming the mistake. Each
also has ``hint(number)``, made by :func:`torchhw.checks.hints_for`, which shows an exercise's
fuller hint: the feedback itself only gives a nudge.
"""

MODULES = ["hardware_tour", "tensors", "autograd", "nn", "optim", "devices", "data_parallel", "ddp",
           "clusters", "performance", "capstone"]

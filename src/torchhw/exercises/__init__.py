"""Checkers and reference solutions for each notebook's "Check yourself" exercises.

One module per notebook, named after its topic. Each defines ``CHECKS`` (number ->
checker), ``SOLUTIONS`` (number -> a reference answer) and ``WRONG`` (number -> typical
wrong answers); the tests prove every checker accepts its solution and rejects those.
"""

MODULES = ["hardware_tour", "tensors", "autograd", "nn", "optim", "devices", "data_parallel", "ddp",
           "clusters", "performance", "capstone"]

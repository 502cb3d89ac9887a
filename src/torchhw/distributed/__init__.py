"""Training on many processes, one machine or many: the course's distributed layer.

What a notebook imports is here, at the top (``from torchhw.distributed import launch``); each
part lives in a module of its own:

- :mod:`~torchhw.distributed.launcher`: :func:`launch` runs a function on N ranks of this
  machine (notebooks 06, 07, 09, 10).
- :mod:`~torchhw.distributed.placement`: which backend and device each rank gets
  (:func:`rank_device`, :func:`plan`).
- :mod:`~torchhw.distributed.diagnosis`: which rank caused a failure, where hung ranks wait.
- :mod:`~torchhw.distributed.processes`: free ports, environment blocks, stopping processes.
- :mod:`~torchhw.distributed.guard`: ``python -m torchhw.distributed.guard``, which stops a
  torchrun agent when the process that started it dies.
- :mod:`~torchhw.distributed.agents`: torchrun from Python, one node or several simulated.
- :mod:`~torchhw.distributed.elastic`: a process group that survives restarts on any node.
- :mod:`~torchhw.distributed.jobs`: one job description, as Slurm, PyTorchJob and TrainJob files.
- :mod:`~torchhw.distributed.train`: the training script those job files run.
- :mod:`~torchhw.distributed.comm`: the latency-bandwidth model of a collective.
"""

from .diagnosis import LaunchTimeout, RankFailed
from .launcher import RankInfo, launch
from .placement import Placement, plan, rank_device
from .processes import environ, free_port, is_helper, stop_processes

__all__ = ["LaunchTimeout", "RankFailed", "RankInfo", "launch", "Placement", "plan",
           "rank_device", "environ", "free_port", "is_helper", "stop_processes"]

"""torchhw: the helper package of the torchhw course (PyTorch on real hardware).

Importing it changes nothing global and initialises no CUDA context: every module is
imported on demand (``from torchhw import hardware``) and all set-up is an explicit call
such as :func:`torchhw.notebook.setup`.

What the notebooks import, in layers (each module imports only from the layers above it in
this list; ``tests/test_layers.py`` holds them to it):

- ground: ``hardware`` (what this machine is), ``cpu`` (the CPUs a process may really use),
  ``device`` (picking one, with a clear error; what each kind of device can do), ``params`` (papermill parameters), ``data``,
  ``models``, ``checkpoint`` (atomic save, exact resume), ``plots``, ``measurements`` (what
  a notebook hands to the run report), ``checks`` (exercise feedback)
- on the ground: ``peak`` (theoretical FLOP/s), ``bench`` (timing on torch.utils.benchmark),
  ``train`` (the loop), ``widgets``, ``notebook`` (the set-up call), ``knobs`` (the tuning knobs)
- above those: ``tune`` (the autotuner), ``cards`` (report cards)
- ``distributed``: a package of its own, layered inside (processes and placement; the
  launcher and the diagnosis of failures; torchrun agents and elastic joining; the job files
  and the training script they run; the cost model of a collective)
- ``exercises``: each notebook's checkers and reference solutions

The course's own tooling (running the course with papermill, regenerating outputs, badges,
handouts, Binder, JupyterLab, stress and portability checks) is ``torchhw.course``: it needs
the ``course`` extra and is never imported by a notebook.
"""

__version__ = "0.1.0"

"""torchhw: the helper package of the torchhw course (PyTorch on real hardware).

Importing it changes nothing global and initialises no CUDA context: every module is
imported on demand (``from torchhw import hardware``) and all set-up is an explicit call
such as :func:`torchhw.notebook.setup`.

Modules, lower ones knowing nothing of higher ones:

- ``hardware``  what this machine is (CPU, ISA, memory, GPUs, build) and its peak FLOP/s
- ``device``    picking a device, with a clear error when the one asked for is missing
- ``params``    validating the parameters papermill injects into a notebook
- ``bench``     timing on top of torch.utils.benchmark: GFLOP/s, GB/s, ratios, tables
- ``plots``     plot defaults and the roofline chart
- ``record``    measurements a notebook hands to the course report
- ``checks``    feedback for "Check yourself" exercises (``exercises`` holds them)
- ``notebook``  the set-up call every notebook makes after validating its parameters
- ``runner``    executing the course with papermill and writing the report
"""

__version__ = "0.1.0"

"""The course's own tooling: what runs, tests and publishes the notebooks, not what they teach.

Nothing here is imported by a notebook. It needs the ``course`` extra (papermill, nbclient,
nbformat, ipykernel, nbconvert, JupyterLab) and a checkout of the course, which every tool
finds from the current directory (:mod:`torchhw.course.paths`).

- ``paths``     the checkout, its notebooks/ folder, the notebooks in reading order
- ``runner``    executing the course with papermill, the run report, regenerating outputs
- ``profiles``  nbval under emulated machines (other ISAs, thread counts)
- ``badges``    Colab/Binder badges and setup cells from the repository address
- ``handouts``  the offline HTML site
- ``lab``       JupyterLab with the course's settings, and a private server for checks
- ``binder``    Binder's build simulated here
- ``stress``    the distributed jobs run many times, failures counted
- ``gpucheck``  ``make gpu-check``: the gpu tests and every notebook on a CUDA GPU, into reference/
- ``cli``       the ``torchhw`` command
"""

"""The ``torchhw`` command (also ``python -m torchhw``).

    torchhw run [NOTEBOOK ...] [-p NAME VALUE ...] [--full]   execute the course, write a report
    torchhw list                                              notebooks and their parameters
    torchhw regen [NOTEBOOK ...]                              regenerate committed outputs
    torchhw report [--json]                                   this machine's hardware report
    torchhw bench [--quick]                                   matmul and memory bandwidth here
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Sequence


def _run(args: argparse.Namespace) -> int:
    from .runner import parse_value, run_course

    params = {name: parse_value(value) for name, value in args.param}
    _, results = run_course(args.notebooks, params, out_dir=args.out, notebooks=args.dir,
                            quick=not args.full, timeout=args.timeout,
                            progress=not args.no_progress)
    return 1 if any(r.status != "ok" for r in results) else 0


def _list(args: argparse.Namespace) -> int:
    from .runner import declared_parameters, discover, find_notebooks_dir

    for path in discover(find_notebooks_dir(args.dir)):
        params = ", ".join(f"{k}={v}" for k, v in declared_parameters(path).items())
        print(f"{path.stem:<24} {params}")
    return 0


def _regen(args: argparse.Namespace) -> int:
    from .runner import regenerate

    regenerate(args.notebooks, notebooks=args.dir, timeout=args.timeout)
    return 0


def _report(args: argparse.Namespace) -> int:
    from . import hardware

    report = hardware.report()
    if args.json:
        print(json.dumps(report.to_dict(), indent=1))
    else:
        print(report)
        print(hardware.peak_flops(report.cpu))
    return 0


def _bench(args: argparse.Namespace) -> int:
    import torch

    from . import bench, hardware
    from .device import pick_device

    device = pick_device(args.device)
    threads = args.threads or torch.get_num_threads()
    sizes = [256, 512, 1024] if args.quick else [256, 512, 1024, 2048, 4096]
    results = []
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        fast, ratio = bench.has_fast_kernel(dtype, device, threads=threads)
        if not fast:
            print(f"{dtype}: {ratio:.1%} of the fp32 rate at n=128, no fast kernel here; "
                  f"skipped the larger sizes")
            continue
        results += [bench.matmul(n, dtype, device, threads) for n in sizes]
    print(bench.table(results))
    if device.type == "cpu":
        print(hardware.peak_flops(cores=threads))
    mib = 64 if args.quick else 512
    print(bench.table(bench.bandwidth(mib * 2**20, device, threads)))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="torchhw", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="execute the course with papermill and write a report")
    run.add_argument("notebooks", nargs="*", help="numbers or topics, e.g. 00 tensors (default: all)")
    run.add_argument("-p", "--param", nargs=2, action="append", default=[],
                     metavar=("NAME", "VALUE"), help="a notebook parameter, as papermill's -p")
    run.add_argument("--full", action="store_true", help="quick = False: full sizes, slower")
    run.add_argument("--out", type=Path, help="run folder (default runs/<timestamp>)")
    run.add_argument("--timeout", type=int, default=600, help="seconds a cell may take")
    run.add_argument("--no-progress", action="store_true", help="no per-cell progress bar")
    run.set_defaults(func=_run)

    lst = sub.add_parser("list", help="the notebooks and their parameters")
    lst.set_defaults(func=_list)

    regen = sub.add_parser("regen", help="regenerate committed outputs on a fresh kernel")
    regen.add_argument("notebooks", nargs="*")
    regen.add_argument("--timeout", type=int, default=600)
    regen.set_defaults(func=_regen)

    rep = sub.add_parser("report", help="this machine's hardware report")
    rep.add_argument("--json", action="store_true")
    rep.set_defaults(func=_report)

    b = sub.add_parser("bench", help="matmul GFLOP/s and memory bandwidth on this machine")
    b.add_argument("--quick", action="store_true", help="smaller sizes, seconds")
    b.add_argument("--device", default="auto")
    b.add_argument("--threads", type=int, default=0, help="0: torch's default")
    b.set_defaults(func=_bench)

    for p in (run, lst, regen):
        p.add_argument("--dir", type=Path, help="the notebooks folder (default: notebooks/)")

    args = parser.parse_args(argv)
    from .runner import CourseError
    from .device import DeviceUnavailable

    try:
        return args.func(args)
    except (CourseError, DeviceUnavailable) as err:
        print(f"torchhw: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

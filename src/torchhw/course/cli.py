"""The ``torchhw`` command (also ``python -m torchhw``): the course tooling.

    torchhw run [NOTEBOOK ...] [-p NAME VALUE ...] [--full]   execute the course, write a report
    torchhw list                                              notebooks and their parameters
    torchhw regen [--zh] [NOTEBOOK ...]                       regenerate committed outputs
    torchhw zh [--build] [--todo] [NOTEBOOK ...]              the Chinese edition: stale cells, rebuild
    torchhw hardware [--json]                                 this machine's hardware survey
    torchhw bench [--quick]                                   matmul and memory bandwidth here
    torchhw lab [--configure [--server]]                      JupyterLab at notebooks/, news off
    torchhw badges [--check] [NOTEBOOK ...]                   Colab/Binder badges and setup cells
    torchhw handouts [--zh] [--from DIR] [--out DIR] [NOTEBOOK ...]  static HTML site, offline
    torchhw binder                                            simulate Binder's build here
    torchhw card [--out DIR] [--budget S]                     measure and write this machine's card
    torchhw compare A B [--plot FILE]                         two cards (or run folders) side by side
    torchhw cards [PATH ...] [--out DIR]                      a results page, a row per card
    torchhw portability [--profile NAME] [NOTEBOOK ...]       nbval as other machines run it
    torchhw learner                                           the learner's install alone works
    torchhw system [--install] [NAME ...]                     chromium, npm, shellcheck for the tests
    torchhw colab                                             Colab's setup cell in a Colab-like venv
    torchhw deps [--check]                                    write (or check) binder/requirements.txt
    torchhw gpu-check [--wheels DIR] [--out DIR] [--dry-run]  on a GPU: gpu tests, notebooks on cuda
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
                            progress=False if args.no_progress else None, card=not args.no_card)
    return 1 if any(r.status != "ok" for r in results) else 0


def _list(args: argparse.Namespace) -> int:
    from .paths import discover, notebooks_dir
    from .runner import declared_parameters

    for path in discover(notebooks_dir(args.dir)):
        params = ", ".join(f"{k}={v}" for k, v in declared_parameters(path).items())
        print(f"{path.stem:<24} {params}")
    return 0


def _regen(args: argparse.Namespace) -> int:
    from .regen import regenerate

    folder = args.dir
    if args.zh:
        from .paths import find_root

        folder = find_root() / "notebooks" / "zh"
    regenerate(args.notebooks, notebooks=folder, timeout=args.timeout)
    return 0


def _zh(args: argparse.Namespace) -> int:
    from .edition import main

    return main(args.zh_args)


def _hardware(args: argparse.Namespace) -> int:
    from .. import hardware, peak

    survey = hardware.survey()
    if args.json:
        print(json.dumps(survey.to_dict(), indent=1))
    else:
        print(survey)
        print(peak.flops(survey.cpu))
    return 0


def _bench(args: argparse.Namespace) -> int:
    import torch

    from .. import bench, peak
    from ..device import pick_device

    device = pick_device(args.device)
    threads = args.threads or torch.get_num_threads()
    sizes = [256, 512, 1024] if args.quick else [256, 512, 1024, 2048, 4096]
    results, skipped = bench.dtype_sweep(sizes, (torch.float32, torch.bfloat16, torch.float16),
                                         device, threads)
    for name, why in skipped.items():
        print(f"{name}: {why}")
    print(bench.table(results))
    if device.type == "cpu":
        print(peak.flops(cores=threads))
    mib = 64 if args.quick else 512
    print(bench.table(bench.bandwidth(mib * 2**20, device, threads)))
    return 0


def _lab(args: argparse.Namespace) -> int:
    from .lab import main as lab_main

    return lab_main(args.lab_args, configure_only=args.configure, server=args.server)


def _badges(args: argparse.Namespace) -> int:
    from .badges import main as badges_main

    return badges_main(args.notebooks, folder=args.dir, check=args.check)


def _handouts(args: argparse.Namespace) -> int:
    from .handouts import HandoutError, build

    try:
        source, out = args.source, args.out
        if args.zh:  # the Chinese edition's pages, beside the English ones
            from .paths import find_root

            source = source or find_root() / "notebooks" / "zh"
            out = out if out != Path("build/handouts") else Path("build/handouts/zh")
        build(out, source=source, names=args.notebooks)
    except HandoutError as err:
        print(f"torchhw handouts: error: {err}", file=sys.stderr)
        return 1
    return 0


def _binder(args: argparse.Namespace) -> int:
    from .binder import main as binder_main

    return binder_main()


def _compare(args: argparse.Namespace) -> int:
    from ..cards import main as compare_main

    return compare_main([str(args.a), str(args.b)] + (["--plot", str(args.plot)] if args.plot else []))


def _card(args: argparse.Namespace) -> int:
    from ..cards import card_main

    return card_main(["--out", str(args.out), "--budget", str(args.budget), "--device", args.device,
                      "--threads", str(args.threads)])


def _cards(args: argparse.Namespace) -> int:
    from .results import main as results_main

    return results_main([str(p) for p in args.paths] + ["--out", str(args.out)])


def _learner(args: argparse.Namespace) -> int:
    from .learner import main as learner_main

    return learner_main()


def _system(args: argparse.Namespace) -> int:
    from .system import main as system_main

    return system_main(install=args.install, names=args.names)


def _colab(args: argparse.Namespace) -> int:
    from .colab import main as colab_main

    return colab_main()


def _deps(args: argparse.Namespace) -> int:
    from .deps import main as deps_main

    return deps_main(check=args.check, freeze_to=args.freeze)


def _gpu_check(args: argparse.Namespace) -> int:
    from .gpucheck import gpu_check

    return gpu_check(out_root=args.out, wheels=args.wheels, dry_run=args.dry_run,
                     index=not args.no_index)


def _portability(args: argparse.Namespace) -> int:
    from .profiles import main as profiles_main

    return profiles_main(args.notebooks, args.profile, folder=args.dir)


def _stress(args: argparse.Namespace) -> int:
    import time

    from .stress import stress

    start = time.monotonic()
    failures = stress(args.runs, cases=args.case or None)
    for kind, failed in failures.items():
        print(f"{kind}: {args.runs} runs, {len(failed)} failed")
        for line in failed:
            print("  " + line)
    print(f"{time.monotonic() - start:.0f} s in all")
    return 1 if any(failures.values()) else 0


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
    run.add_argument("--no-progress", action="store_true",
                     help="no progress bars (default: bars only at a terminal, never in CI "
                          "or with TQDM_DISABLE=1)")
    run.add_argument("--no-card", action="store_true",
                     help="leave no card.json (by default notebook 10's card, or one measured "
                          "in seconds when notebook 10 did not run)")
    run.set_defaults(func=_run)

    lst = sub.add_parser("list", help="the notebooks and their parameters")
    lst.set_defaults(func=_list)

    regen = sub.add_parser("regen", help="regenerate committed outputs on a fresh kernel")
    regen.add_argument("notebooks", nargs="*")
    regen.add_argument("--timeout", type=int, default=600)
    regen.add_argument("--zh", action="store_true", help="the Chinese edition, notebooks/zh/")
    regen.set_defaults(func=_regen)

    zh = sub.add_parser("zh", add_help=False,
                        help="the Chinese edition: what is stale, untranslated or orphaned; "
                             "--build rebuilds notebooks/zh/, --todo prepares translations")
    zh.set_defaults(func=_zh, zh_args=[])

    hw = sub.add_parser("hardware", help="this machine's hardware survey and CPU peak")
    hw.add_argument("--json", action="store_true")
    hw.set_defaults(func=_hardware)

    b = sub.add_parser("bench", help="matmul GFLOP/s and memory bandwidth on this machine")
    b.add_argument("--quick", action="store_true", help="smaller sizes, seconds")
    b.add_argument("--device", default="auto")
    b.add_argument("--threads", type=int, default=0, help="0: torch's default")
    b.set_defaults(func=_bench)

    lab = sub.add_parser("lab", help="open JupyterLab at notebooks/ with the course's settings")
    lab.add_argument("--configure", action="store_true",
                     help="only write the settings into this environment, start nothing")
    lab.add_argument("--server", action="store_true",
                     help="with --configure: every server of this environment opens at "
                          "notebooks/ (Binder)")
    lab.set_defaults(lab_args=[])  # any other option goes on to `jupyter lab`
    lab.set_defaults(func=_lab)

    badges = sub.add_parser("badges", help="rewrite badges and setup cells from pyproject.toml")
    badges.add_argument("notebooks", nargs="*")
    badges.add_argument("--check", action="store_true",
                        help="change nothing; exit 1 if a notebook disagrees")
    badges.set_defaults(func=_badges)

    handouts = sub.add_parser("handouts", help="a static HTML site of the executed course")
    handouts.add_argument("notebooks", nargs="*")
    handouts.add_argument("--from", dest="source", type=Path,
                          help="folder of executed notebooks (default: notebooks/)")
    handouts.add_argument("--out", type=Path, default=Path("build/handouts"))
    handouts.add_argument("--zh", action="store_true",
                          help="the Chinese edition (notebooks/zh/) into build/handouts/zh/")
    handouts.set_defaults(func=_handouts)

    binder = sub.add_parser("binder", help="simulate Binder's build in a fresh environment")
    binder.set_defaults(func=_binder)

    cmp = sub.add_parser("compare", help="two report cards side by side: table, reasons, plot")
    cmp.add_argument("a", type=Path, help="a card (reference/cards/2026-11-30_....json), a run "
                                          "folder (runs/<stamp>/) or a run's report.json")
    cmp.add_argument("b", type=Path, help="another, e.g. the card notebook 10 or `torchhw card` wrote")
    cmp.add_argument("--plot", type=Path, help="also save the comparison plot (PNG) here")
    cmp.set_defaults(func=_compare)

    card = sub.add_parser("card", help="measure this machine's report card (under a minute) "
                                       "without running the course")
    card.add_argument("--out", type=Path, default=Path("."), help="folder for the card (default: here)")
    card.add_argument("--budget", type=float, default=20.0,
                      help="seconds for the search over matmul shapes (default 20)")
    card.add_argument("--device", default="auto", help="cpu, cuda, mps, xpu or auto (default)")
    card.add_argument("--threads", type=int, default=0, help="0: torch's default")
    card.set_defaults(func=_card)

    results = sub.add_parser("cards", help="a results page (Markdown, offline HTML, plot) with a "
                                           "row per report card")
    results.add_argument("paths", nargs="*", type=Path,
                         help="cards, folders of cards, run folders (default: reference/cards)")
    results.add_argument("--out", type=Path, default=Path("build/results"))
    results.set_defaults(func=_cards)

    learner = sub.add_parser("learner", help="the learner's install alone runs notebook 01")
    learner.set_defaults(func=_learner)

    system = sub.add_parser("system", help="find (or --install) chromium, npm and shellcheck, "
                                           "which the tests need")
    system.add_argument("names", nargs="*", metavar="NAME",
                        help="chromium, npm or shellcheck (default: all three)")
    system.add_argument("--install", action="store_true",
                        help="install what is missing (apt-get as root; Playwright's Chromium)")
    system.set_defaults(func=_system)

    colab = sub.add_parser("colab", help="Colab's setup cell in a venv with Colab's versions: "
                                         "nothing upgraded, 04's widgets run")
    colab.set_defaults(func=_colab)

    deps = sub.add_parser("deps", help="binder/requirements.txt from pyproject.toml and "
                                       "constraints.txt")
    deps.add_argument("--check", action="store_true", help="write nothing; exit 1 if stale")
    deps.add_argument("--freeze", action="store_true",
                      help="write constraints.txt.new from this environment, comments kept")
    deps.set_defaults(func=_deps)

    gpu = sub.add_parser("gpu-check", help="on a CUDA GPU: the gpu tests and every notebook "
                                           "with device cuda, a dated report in reference/")
    gpu.add_argument("--wheels", type=Path, default=Path("build/gpu-wheels"),
                     help="wheels to install missing modules from, no index (make gpu-wheels "
                          "fills it; default: build/gpu-wheels)")
    gpu.add_argument("--out", type=Path, default=Path("reference"),
                     help="writes <out>/gpu-check/<date>_<gpu>/ and cards into <out>/cards/ "
                          "(default: reference)")
    gpu.add_argument("--dry-run", action="store_true",
                     help="print each step (commands, folders) and run none, GPU or not")
    gpu.add_argument("--no-index", action="store_true",
                     help="never ask the package index (a machine without network)")
    gpu.set_defaults(func=_gpu_check)

    port = sub.add_parser("portability", help="strict nbval under emulated machines (ISA, threads)")
    port.add_argument("notebooks", nargs="*")
    port.add_argument("--profile", action="append", default=[],
                      help="one profile (repeatable; default: all)")
    port.set_defaults(func=_portability)

    st = sub.add_parser("stress", help="the 2-rank launch, the fault-free 2-node job and the 2-node crash many times; count failures")
    st.add_argument("--runs", type=int, default=50)
    st.add_argument("--case", action="append", choices=["launch", "clean", "crash"],
                    help="one case (repeatable; default: all three)")
    st.set_defaults(func=_stress)

    for p in (run, lst, regen, badges, port):
        p.add_argument("--dir", type=Path, help="the notebooks folder (default: notebooks/)")

    args, unknown = parser.parse_known_args(argv)
    if unknown and args.command not in ("lab", "zh"):
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    if args.command == "lab":
        args.lab_args = unknown
    if args.command == "zh":
        args.zh_args = unknown
    from ..device import DeviceUnavailable
    from .paths import CourseError

    try:
        return args.func(args)
    except (CourseError, DeviceUnavailable) as err:
        print(f"torchhw: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

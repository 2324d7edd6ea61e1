"""`chute infer-bench CONFIG DATASET`: run an inference pipeline under Poisson load and report
throughput, latency percentiles and where the time went; `--search` first picks replicas and
batch sizes from measurement (docs/design.md, "Inference pipelines")."""

from __future__ import annotations

import contextlib
import json
import signal
import sys
import threading
from pathlib import Path

from chute._cli._args import positive
from chute._cli._output import add_json_flag, print_json
from chute.errors import FormatError


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "infer-bench", help="load-test an inference pipeline (chute.infer) on a dataset",
        description="Start the pipeline of CONFIG (JSON, or YAML with PyYAML) on DATASET, offer "
        "REQUESTS requests (sample ids 0, 1, ... of DATASET, or the video files of --files, "
        "repeated; --clips N asks N clips of each) as a Poisson process "
        "of RATE requests/s, and print throughput, latency p50/p95/p99, per-stage busy "
        "fraction, batch sizes, queue waits, service times, dropped and failed requests. "
        "Exit status: 0 when every accepted request succeeded (dropped requests are load "
        "shed, not failures), 3 when some failed, 4 when none succeeded, 130 on Ctrl-C "
        "(after the partial report).")
    parser.add_argument("config", metavar="CONFIG", type=Path, help="inference config file")
    parser.add_argument("dataset", metavar="DATASET", nargs="?", default=None,
                        help="dataset handed to the stages (e.g. one made by `chute convert "
                        "video`); optional with --files")
    parser.add_argument("--files", type=Path, default=None, metavar="LIST",
                        help="requests are the video files LIST names (one path a line, "
                        "relative to --root; '#' starts a comment) instead of sample ids; "
                        "every path must lie inside --root")
    parser.add_argument("--root", type=Path, default=None, metavar="DIR",
                        help="the folder file requests may read from (default: LIST's "
                        "folder); given to a chute.infer:VideoClipLoader first stage")
    parser.add_argument("--clips", type=positive(int), default=None, metavar="N",
                        help="each request asks for N clips spread over its video (the "
                        "loader gives [N, 3, T, H, W] per request)")
    parser.add_argument("--decode", choices=("auto", "cpu", "dali", "nvdec"), default=None,
                        help="how a chute.infer:VideoClipLoader first stage decodes its "
                        "requests, dataset and file ones alike (its backend option; default: "
                        "the config's, else auto): cpu (PyAV), dali (DALI: NVDEC when the "
                        "stage's devices are CUDA, DALI's CPU-only mode, VP8/VP9/MJPEG only, "
                        "on the CPU; it needs DATASET), nvdec (NVDEC through PyNvVideoCodec on "
                        "CUDA devices, for DATASET requests), auto (dali on a CUDA device "
                        "where DALI imports and there is a DATASET, else nvdec where "
                        "PyNvVideoCodec imports, else cpu)")
    parser.add_argument("--rate", type=positive(float), default=None,
                        help="offered requests/s (default: bulk, as fast as it goes)")
    parser.add_argument("--requests", type=positive(int), default=100, help="(default: 100)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the arrival times")
    parser.add_argument("--search", action="store_true",
                        help="first measure a small grid of (replicas, batch size) per stage and "
                        "run with the configuration that sustains the highest rate with p95 "
                        "under --slo-ms")
    parser.add_argument("--slo-ms", type=positive(float), default=1000.0,
                        help="p95 latency bound of --search (default: 1000)")
    parser.add_argument("--budget-s", type=positive(float), default=300.0,
                        help="seconds --search may take (default: 300)")
    parser.add_argument("--search-waits", type=float, nargs="+", default=None, metavar="MS",
                        help="max_wait_ms values --search also tries with batch sizes above 1 "
                        "(default: only each stage's own; every value adds trials)")
    parser.add_argument("--search-requests", type=positive(int), default=None,
                        help="requests per --search measurement (default: min(REQUESTS, 30))")
    parser.add_argument("--save-config", type=Path, default=None, metavar="PATH",
                        help="write the configuration that ran (the one --search picked) here")
    parser.add_argument("--allow-outside", action="store_true",
                        help="let CONFIG's \"file.py:attr\" specs name files outside CONFIG's "
                        "folder (absolute paths, '..'); a config is trusted code either way "
                        "(docs/inference.md, \"A config is code\")")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_json_flag(parser)
    parser.set_defaults(func=run)


def _save(config, path: Path) -> None:
    data = config.to_dict()
    data.pop("base")
    data.pop("dataset")
    folder = path.parent.resolve()
    outside = []
    if config.base:
        # specs relative to the original config's folder stay valid next to the new file:
        # relative to it when the file is inside its folder, else absolute (and loading the
        # saved config then needs --allow-outside)
        for stage in data["stages"]:
            where, sep, attr = stage["fn"].rpartition(":")
            if where.endswith(".py"):
                target = (Path(config.base) / where).resolve()
                if target.is_relative_to(folder):
                    stage["fn"] = f"{target.relative_to(folder).as_posix()}{sep}{attr}"
                else:
                    stage["fn"] = f"{target}{sep}{attr}"
                    outside.append(stage["name"])
    path.write_text(json.dumps(data, indent=1) + "\n")
    if outside:
        print(f"chute infer-bench: {path} names files outside its folder (stages "
              f"{', '.join(outside)}); run it with --allow-outside", file=sys.stderr)


def read_file_list(path: Path, root: Path) -> list[str]:
    """The video paths `path` lists (one a line, '#' comments and blank lines skipped), each
    checked to lie inside `root` (symlinks followed) as the loader checks it.

    Args:
        path: the list file.
        root: the folder the paths are relative to and must stay inside.
    """
    try:
        lines = path.read_text(encoding="utf-8-sig").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise FormatError(f"{path}: cannot read the list of video files ({exc})") from None
    names = []
    for number, line in enumerate(lines, 1):
        name = line.split("#", 1)[0].strip()
        if not name:
            continue
        try:
            target = (root / name).resolve()
        except (OSError, ValueError) as exc:
            raise FormatError(f"{path}:{number}: {name!r} is not a usable path ({exc})") \
                from None
        if not target.is_relative_to(root):
            raise FormatError(f"{path}:{number}: {name!r} leads to {target}, outside the root "
                              f"{root}; list only files inside it, or pass --root")
        if not target.is_file():
            raise FormatError(f"{path}:{number}: no file {target}")
        names.append(name)
    if not names:
        raise FormatError(f"{path}: lists no video files (one path a line)")
    return names


def _first_loader(config):
    """The first stage (where requests go) when it is a chute.infer:VideoClipLoader, else None."""
    import importlib

    from chute.infer import VideoClipLoader

    first = config.stages[0]
    fn = first.fn
    if isinstance(fn, str) and fn.startswith("chute."):  # chute's own modules: no user code
        module, _, name = fn.partition(":")  # any spelling (chute.infer._video_loader:...)
        try:
            fn = getattr(importlib.import_module(module), name, None)
        except ImportError:
            return None
    return first if fn is VideoClipLoader else None


def _give_root(config, root: Path) -> None:
    """Hand `root` to a VideoClipLoader first stage (file requests go to the first stage)."""
    first = _first_loader(config)
    if first is not None:
        first.options = {**(first.options or {}), "root": str(root)}


def _give_decode(config, backend: str) -> None:
    """Set the backend of a VideoClipLoader first stage; refuse any other first stage."""
    first = _first_loader(config)
    if first is None:
        other = config.stages[0]
        raise FormatError(f"chute infer-bench --decode {backend}: the first stage "
                          f"{other.name!r} is {other.fn!r}, not chute.infer:VideoClipLoader; "
                          "set its decoder in the config instead")
    first.options = {**(first.options or {}), "backend": backend}


# exit status of a run whose requests failed (docs/cli.md, "chute infer-bench")
SOME_FAILED = 3
NONE_SUCCEEDED = 4
INTERRUPTED = 130


class _Interrupt:
    """Ctrl-C as a flag the clients poll, instead of a KeyboardInterrupt raised wherever the
    main thread happens to be (inside a queue's or a lock's bookkeeping, or half-way through
    a replica restart it is waiting for): the run stops, the partial report is printed, the
    pipeline closes in order. A second Ctrl-C raises KeyboardInterrupt at once."""

    def __init__(self) -> None:
        self.set = False

    def __call__(self) -> bool:
        return self.set

    def _handler(self, signum, frame) -> None:
        self.set = True
        signal.signal(signal.SIGINT, signal.default_int_handler)

    @contextlib.contextmanager
    def installed(self):
        if threading.current_thread() is not threading.main_thread():
            yield self  # signal handlers belong to the main thread (e.g. under a test runner)
            return
        previous = signal.signal(signal.SIGINT, self._handler)
        try:
            yield self
        finally:
            signal.signal(signal.SIGINT, previous)


def _status(report: dict) -> int:
    if report["failed"] or report["unfinished"]:
        return NONE_SUCCEEDED if report["completed"] == 0 else SOME_FAILED
    return 0 if report["completed"] or not report["requests"] else NONE_SUCCEEDED


def run(args) -> int:
    out = sys.stderr if args.json else sys.stdout
    interrupt = _Interrupt()
    with interrupt.installed():
        return _run(args, out, interrupt)


def _run(args, out, interrupt: _Interrupt) -> int:
    from tqdm import tqdm

    from chute.infer import (
        InferServer,
        format_report,
        format_trials,
        load_config,
        run_bulk,
        run_poisson,
        search,
        summarize,
    )
    from chute.readers import open_dataset

    config = load_config(args.config, allow_outside=args.allow_outside or None)
    if args.dataset is None and args.files is None:
        raise FormatError("chute infer-bench: give DATASET (requests are its sample ids), "
                          "--files LIST (requests are video files), or both")
    config.dataset = None if args.dataset is None else str(args.dataset)
    if args.files is not None:
        root = (args.root or args.files.parent).resolve()
        names = read_file_list(args.files, root)
        inputs: list = [names[k % len(names)] for k in range(args.requests)]
        _give_root(config, root)
    else:
        n = len(open_dataset(args.dataset))
        inputs = [k % n for k in range(args.requests)]
    if args.decode is not None:
        _give_decode(config, args.decode)
    if args.clips is not None:
        inputs = [{"video": item, "clips": args.clips} for item in inputs]
    result = {}
    if args.search:
        probe = inputs[:args.search_requests or min(args.requests, 30)]
        print(f"chute infer-bench: searching (p95 <= {args.slo_ms:g} ms, budget "
              f"{args.budget_s:g} s, {len(probe)} requests per measurement)", file=out)
        found = search(config, probe, slo_ms=args.slo_ms, budget_s=args.budget_s,
                       waits=args.search_waits, seed=args.seed,
                       log=lambda line: print(line, file=sys.stderr), stop=interrupt)
        table = format_trials(found.trials)
        print(table, file=out)
        if interrupt():
            print("interrupted during the search (the table holds what it measured)",
                  file=sys.stderr)
            return INTERRUPTED
        picked = {s.name: {"replicas": s.replicas, "max_batch": s.max_batch,
                           "max_wait_ms": s.max_wait_ms} for s in found.best.stages}
        print(f"picked ({found.best_rate:.2f} req/s sustained, {found.seconds:.0f} s of "
              f"search): {json.dumps(picked)}", file=out)
        config = found.best
        result["search"] = {"slo_ms": args.slo_ms, "sustained_rate": found.best_rate,
                            "picked": picked, "seconds": found.seconds, "table": table}
    if args.save_config:
        _save(config, args.save_config)
    with InferServer(config) as server:
        warm = sum(s.replicas * s.max_batch for s in config.stages)
        # first calls pay for lazy setup
        run_bulk(server, inputs[:warm], timeout=300, stop=interrupt)
        if interrupt():
            print("interrupted while warming up (nothing measured yet)", file=sys.stderr)
            return INTERRUPTED
        with tqdm(total=len(inputs), unit="req", file=sys.stderr, disable=args.no_progress,
                  desc="infer-bench") as bar:
            if args.rate is None:
                measured = run_bulk(server, inputs, progress=bar, stop=interrupt)
            else:
                measured = run_poisson(server, inputs, args.rate, seed=args.seed, progress=bar,
                                       stop=interrupt)
        report = summarize(measured, server)
        events = list(server.events)
    if measured.stopped:
        print("interrupted: the report covers the requests offered so far", file=out)
    print(format_report(report), file=out)
    for event in events:
        print(f"event: {event}", file=out)
    if args.json:
        print_json({**report, **result, "events": events, "exit_status": _exit(report, measured)})
    return _exit(report, measured)


def _exit(report: dict, measured) -> int:
    return INTERRUPTED if measured.stopped else _status(report)

"""The body of a replica process: build the stage once, then run the batches its parent sends
over a pipe until told to stop or the parent goes away (docs/design.md, "Inference
pipelines")."""

from __future__ import annotations

import os
import signal
import time
import traceback
from dataclasses import dataclass

__all__ = ["Failure", "replica_main", "run_batch", "startup_summary"]


@dataclass(frozen=True)
class Failure:
    """One request failed in a stage: `message` says how (the exception's type and text)."""

    message: str


def _failure(exc: BaseException) -> Failure:
    return Failure(f"{type(exc).__name__}: {exc}")


def startup_summary(exc: BaseException) -> str:
    """One line on why a stage could not be built: the exception, and for an error outside
    chute the file and line that raised it (the full traceback goes along separately)."""
    from chute.errors import ChuteError

    text = " ".join(str(exc).split())
    if isinstance(exc, ChuteError):
        return text
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" (at {os.path.basename(frames[-1].filename)}:{frames[-1].lineno})" if frames else ""
    return f"{type(exc).__name__}: {text}{where}"


def _items(out, n: int) -> list:
    import torch

    if isinstance(out, torch.Tensor):
        items = list(out.unbind(0)) if out.dim() else []
    else:
        items = list(out)
    if len(items) != n:
        raise ValueError(f"the stage returned {len(items)} outputs for {n} inputs")
    return items


def run_batch(fn, payloads: list) -> list:
    """Outputs of `fn` on `payloads`, one per input; a Failure for an input that failed.

    When the whole call raises, each input is run alone, so only the requests that fail by
    themselves are failed.
    """
    try:
        items = _items(fn(payloads), len(payloads))
    except Exception as exc:
        if len(payloads) == 1:
            return [_failure(exc)]
        return [run_batch(fn, [p])[0] for p in payloads]
    return [_failure(x) if isinstance(x, BaseException) else x for x in items]


def _incoming(payload, unpack):
    """A payload with its CUDA handles opened, or the Failure of a handle that does not open."""
    try:
        return unpack(payload)
    except Exception as exc:  # noqa: BLE001  (e.g. its producer died: only this request fails)
        return Failure(f"its CUDA input cannot be opened ({type(exc).__name__}: {exc})")


def _outgoing(outputs: list) -> list:
    """Outputs as they leave the replica for a stage on a GPU: CUDA tensors as IPC handles."""
    from chute.infer._cuda_ipc import pack

    out = []
    for x in outputs:
        try:
            out.append(x if isinstance(x, Failure) else pack(x))
        except Exception as exc:  # noqa: BLE001  (e.g. a CUDA error: that request fails)
            out.append(_failure(exc))
    return out


def _on_host(fn):
    """`fn` with its whole batch's outputs copied to the CPU in one go (for a CPU stage or the
    client; the pipe then moves CPU tensors through shared memory), not one request at a
    time."""
    from chute.infer._cuda_ipc import to_host

    return lambda payloads: to_host(fn(payloads))


def replica_main(conn, spec, options, base, device, dataset, threads,
                 send_cuda: bool = False) -> None:
    """Entry point of a replica process (spawned).

    Args:
        conn: this end of the pipe to the parent.
        spec, options, base: the stage's fn, factory options and config folder.
        device: this replica's device.
        dataset: the config's dataset path.
        threads: torch intra-op threads, or None for torch's default.
        send_cuda: the next stage runs on a GPU: CUDA outputs go to it by CUDA IPC.
    """
    # Ctrl-C reaches the whole process group; the parent stops replicas itself, in order. The
    # parent started this process with SIGINT blocked (a Ctrl-C during its start-up stays
    # pending instead of killing it half-started): ignore it first, then unblock, and a
    # pending one is discarded.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    try:
        import torch
        import torch.multiprocessing  # noqa: F401  (registers the shared-memory reductions)

        from chute.infer._build import build_stage
        from chute.infer._cuda_ipc import unpack

        if threads is not None:
            torch.set_num_threads(threads)
        fn = build_stage(spec, options, base=base, device=device, dataset=dataset)
        if not send_cuda:
            fn = _on_host(fn)
    except BaseException as exc:
        conn.send(("error", startup_summary(exc), traceback.format_exc()))
        return
    conn.send(("ready", os.getpid()))
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return  # the parent is gone
        if message[0] == "stop":
            return
        payloads = [_incoming(p, unpack) for p in message[1]]
        live = [k for k, p in enumerate(payloads) if not isinstance(p, Failure)]
        started = time.monotonic()
        results = run_batch(fn, [payloads[k] for k in live]) if live else []
        finished = time.monotonic()
        outputs = list(payloads)
        for k, result in zip(live, results, strict=True):
            outputs[k] = result
        if send_cuda:
            outputs = _outgoing(outputs)
        del payloads, results, message
        if send_cuda and torch.cuda.is_initialized():
            torch.cuda.ipc_collect()  # frees what earlier consumers have let go of
        try:
            conn.send(("done", outputs, started, finished))
        except (BrokenPipeError, OSError):
            return
        except Exception as exc:  # an output that cannot be pickled fails its batch, not us
            conn.send(("done", [Failure(f"its output cannot be sent to the next stage "
                                        f"({type(exc).__name__}: {exc})")] * len(outputs),
                       started, finished))

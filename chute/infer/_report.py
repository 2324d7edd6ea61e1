"""A run's numbers: throughput, latency percentiles, and per stage the replicas, batch sizes,
busy fraction and queue waits."""

from __future__ import annotations

import numpy as np

__all__ = ["summarize", "format_report"]


def _percentiles(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p95": None, "p99": None}
    p50, p95, p99 = np.percentile(np.asarray(values), [50, 95, 99]).tolist()
    return {"p50": p50, "p95": p95, "p99": p99}


def summarize(run, server) -> dict:
    """The report of one client run on `server`.

    Args:
        run: a RunResult (from run_poisson or run_bulk).
        server: the InferServer it ran on.

    Returns:
        {"throughput" (successful requests/s over the run), "offered_rate", "requests",
        "completed", "dropped", "failed", "latency_ms" {p50, p95, p99}, "stages" {name:
        {replicas, batch_size (max_batch), mean_batch, busy (fraction of replica time in
        calls), queue_wait_ms {mean, p95}, service_ms {mean, p95} (duration of one call),
        calls, restarts}}, "errors" (a few failure messages), "stopped" (the client stopped
        early, e.g. on Ctrl-C: a partial report)}.
    """
    done = [r for r in run.requests if r.finished]
    ok = [r for r in done if r.error is None]
    window = max(run.end - run.start, 1e-9)
    stages = {}
    for stage in server.stages:
        times = [r.stages[stage.name] for r in done if stage.name in r.stages]
        waits = [t.queue_wait * 1000 for t in times if np.isfinite(t.queue_wait)]
        sizes = [t.batch_size for t in times if t.batch_size]
        replicas = stage.config.replicas
        calls = [s * 1000 for s in stage.service_seconds(run.start, run.end)]
        stages[stage.name] = {
            "replicas": replicas,
            "batch_size": stage.config.max_batch,
            "max_wait_ms": stage.config.max_wait_ms,
            "mean_batch": float(np.mean(sizes)) if sizes else None,
            "busy": stage.busy_seconds(run.start, run.end) / (window * replicas),
            "queue_wait_ms": {"mean": float(np.mean(waits)) if waits else None,
                              "p95": float(np.percentile(waits, 95)) if waits else None},
            "service_ms": {"mean": float(np.mean(calls)) if calls else None,
                           "p95": float(np.percentile(calls, 95)) if calls else None},
            "calls": len(calls),
            "restarts": stage.restarts,
        }
    errors = sorted({r.error for r in done if r.error is not None})
    return {
        "throughput": len(ok) / window,
        "offered_rate": run.rate,
        "requests": run.offered,
        "completed": len(ok),
        "dropped": run.dropped,
        "failed": len(done) - len(ok),
        "unfinished": len(run.requests) - len(done),
        "seconds": window,
        "latency_ms": _percentiles([r.latency * 1000 for r in ok]),
        "stages": stages,
        "errors": errors[:5],
        "stopped": run.stopped,
    }


def _ms(value) -> str:
    return "-" if value is None else f"{value:.0f}"


def format_report(report: dict) -> str:
    """The report as a few human-readable lines."""
    lat = report["latency_ms"]
    rate = report["offered_rate"]
    lines = [
        f"offered {'bulk' if rate is None else f'{rate:g} req/s'}: {report['requests']} "
        f"requests, {report['completed']} done, {report['dropped']} dropped, "
        f"{report['failed']} failed"
        + (f", {report['unfinished']} unfinished" if report["unfinished"] else "")
        + f" in {report['seconds']:.1f} s",
        f"throughput {report['throughput']:.2f} req/s; latency ms p50 {_ms(lat['p50'])} "
        f"p95 {_ms(lat['p95'])} p99 {_ms(lat['p99'])}",
        "| stage | replicas | max batch | mean batch | busy | queue wait ms (mean/p95) | "
        "service ms per call (mean/p95) | restarts |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, s in report["stages"].items():
        mean = "-" if s["mean_batch"] is None else f"{s['mean_batch']:.1f}"
        lines.append(f"| {name} | {s['replicas']} | {s['batch_size']} | {mean} | "
                     f"{s['busy']:.0%} | {_ms(s['queue_wait_ms']['mean'])}/"
                     f"{_ms(s['queue_wait_ms']['p95'])} | {_ms(s['service_ms']['mean'])}/"
                     f"{_ms(s['service_ms']['p95'])} | {s['restarts']} |")
    lines += [f"error: {e}" for e in report["errors"]]
    return "\n".join(lines)

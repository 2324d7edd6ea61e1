"""Presenting a decision: the JSON object of `chute autotune --json` and the printed table.

The JSON object (also the body of a cached decision) is::

    {
      "choice": "cpu",                      # backend name for ImageOptions(backend=...)
      "backend_options": {"threads": 2, "dct_scaling": true},  # ImageOptions(backend_options=...)
      "reason": "cpu threads=2 dct=on (412 img/s) won by 1.80x over ...",
      "key": "3f1c...",                     # cache key (machine + dataset + parameters)
      "unit": "img",                        # what the rates count: img, clip, ...
      "candidates": [                       # every candidate, cheapest first
        {"name": "cpu threads=1 dct=on",    # display name, unique
         "backend": "cpu",
         "params": {"threads": 1, "dct_scaling": true},
         "available": true,
         "status": "measured",              # measured | failed | not measured | unavailable
         "reason": null,                    # why not measured / unavailable / failed, else null
         "img_per_s": 812.4,                # samples (of "unit") per second; null unless
                                            # measured (the key keeps its first name)
         "cpu_percent": 99.1,               # process CPU time / wall time x 100 (200 = 2 cores)
         "gpu_percent": null,               # NVML utilisation; null without a CUDA device/pynvml
         "fidelity": "exact"}, ...]         # how exactly its pixels follow the resize definition
    }
"""

from __future__ import annotations

from chute.autotune._select import Decision, Trial

__all__ = ["decision_json", "candidate_json", "format_table", "JSON_KEYS", "CANDIDATE_KEYS"]

JSON_KEYS = ("choice", "backend_options", "reason", "key", "unit", "candidates")
CANDIDATE_KEYS = ("name", "backend", "params", "available", "status", "reason",
                  "img_per_s", "cpu_percent", "gpu_percent", "fidelity")


def _round(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(float(value), digits)


def candidate_json(trial: Trial) -> dict:
    c, m = trial.candidate, trial.measurement
    reason = c.reason if trial.status == "unavailable" else (trial.note or None)
    return {
        "name": c.name,
        "backend": c.backend,
        "params": dict(c.params),
        "available": c.available,
        "status": trial.status,
        "reason": reason,
        "img_per_s": _round(m.img_per_s) if m else None,
        "cpu_percent": _round(m.cpu_percent) if m else None,
        "gpu_percent": _round(m.gpu_percent) if m else None,
        # optional in CandidateLike: candidates of other callers may not say
        "fidelity": getattr(c, "fidelity", "") or None,
    }


def decision_json(decision: Decision, key: str) -> dict:
    """A decision as the JSON object `chute autotune --json` prints and the cache stores.

    Args:
        decision: what `select` decided.
        key: the decision key.
    """
    return {
        "choice": decision.choice.backend,
        "backend_options": dict(decision.choice.params),
        "reason": decision.reason,
        "key": key,
        "unit": decision.unit,
        "candidates": [candidate_json(t) for t in decision.trials],
    }


def _cell(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def format_table(result: dict) -> str:
    """The table of a decision_json() object, then the decision line."""
    header = ("candidate", f"{result.get('unit', 'img')}/s", "CPU %", "GPU %", "fidelity", "note")
    rows = []
    for c in result["candidates"]:
        chosen = c["backend"] == result["choice"] and c["params"] == result["backend_options"]
        note = "<- chosen" if chosen else (c["reason"] or "")
        rows.append((c["name"], _cell(c["img_per_s"], ".0f"), _cell(c["cpu_percent"], ".0f"),
                     _cell(c["gpu_percent"], ".0f"), c.get("fidelity") or "-", note))
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(5)]
    lines = []
    for r in [header, *rows]:
        lines.append(
            f"{r[0]:<{widths[0]}}  {r[1]:>{widths[1]}}  {r[2]:>{widths[2]}}  "
            f"{r[3]:>{widths[3]}}  {r[4]:<{widths[4]}}  {r[5]}".rstrip()
        )
    lines.insert(1, "-" * len(lines[0]))
    lines.append("")
    lines.append(f"decision: {result['choice']} {_options(result['backend_options'])}".rstrip())
    lines.append(f"  {result['reason']}")
    return "\n".join(lines)


def _options(options: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in options.items())

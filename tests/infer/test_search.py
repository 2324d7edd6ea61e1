import math
import time

import pytest

from chute.infer import InferConfig, InferRequest, InferServer, StageConfig, _search, run_poisson
from chute.infer._search import Trial, format_trials


def test_the_final_round_picks_the_lowest_p95_that_meets_the_slo(monkeypatch):
    base = InferConfig([StageConfig("s", "m:f")])
    configs = [base.replace("s", replicas=r) for r in (1, 2, 3)]
    trials = [Trial({"s": (r, 1)}, "s", capacity=5.0, sustained=rate)
              for r, rate in ((1, 4.0), (2, 3.5), (3, 3.0))]
    measured = {1: (4.0, 1400.0, 0, 0), 2: (4.0, 900.0, 0, 0), 3: (4.0, 800.0, 1, 0)}
    seen = []

    def probe(config, inputs, rate, seed, stop):
        seen.append((config.stage("s").replicas, rate))
        return measured[config.stage("s").replicas]

    monkeypatch.setattr(_search, "_probe", probe)
    trial, config = _search._final_round(list(zip(trials, configs, strict=True)), [0], 1000.0,
                                         0, lambda line: None, None)
    # all three at the best rate any sustained; replicas=3 drops one, replicas=1 is too slow
    assert seen == [(1, 4.0), (2, 4.0), (3, 4.0)]
    assert config.stage("s").replicas == 2 and trial is trials[1]
    assert "final round 4.00: 900" in format_trials(trials)


def test_when_no_finalist_meets_the_slo_the_lowest_p95_wins(monkeypatch):
    base = InferConfig([StageConfig("s", "m:f")])
    leaders = [(Trial({"s": (r, 1)}, "s", sustained=2.0), base.replace("s", replicas=r))
               for r in (1, 2)]
    monkeypatch.setattr(_search, "_probe", lambda c, i, rate, seed, stop: (
        rate, {1: 1500.0, 2: 1200.0}[c.stage("s").replicas], 0, 0))
    _, config = _search._final_round(leaders, [0], 1000.0, 0, lambda line: None, None)
    assert config.stage("s").replicas == 2


def _request(k: int, latency: float | None, error: str | None = None) -> InferRequest:
    r = InferRequest(k, k, submitted=time.monotonic() - 100.0)
    if latency is not None:
        r.done, r.error = r.submitted + latency, error
    return r


def test_a_probe_is_hopeless_once_its_p95_cannot_meet_the_slo():
    give_up = _search.hopeless(slo_ms=1000.0, n=40)  # p95 of 40 values: sorted index >= 37
    on_time = [_request(k, 0.5) for k in range(30)]
    assert not give_up(on_time + [_request(30, 2.0), _request(31, 3.0)], 0)  # 2 late: fine
    # a third late one, even still in flight (100 s since it was submitted), settles it
    assert give_up(on_time + [_request(30, 2.0), _request(31, 3.0), _request(32, None)], 0)
    assert give_up(on_time, 1)  # a drop
    assert give_up(on_time + [_request(30, 0.1, "stage s: boom")], 0)  # a failure
    trial = Trial({"s": (1, 1)}, "s", probes=[(4.0, math.inf, 0, 0), (3.0, 800.0, 0, 0)])
    assert "4.00: over SLO, stopped; 3.00: 800" in format_trials([trial])


@pytest.mark.slow
def test_the_poisson_client_stops_offering_when_told_to_give_up():
    config = InferConfig([StageConfig("slow", "tests.infer._stages:slow", queue_size=64)])
    with InferServer(config) as server:
        run = run_poisson(server, list(range(40)), rate=50.0, seed=0, timeout=60,
                          give_up=_search.hopeless(slo_ms=100.0, n=40))
    # 0.2 s per request at 50 arrivals/s: three are late within a fraction of the 0.8 s
    assert run.gave_up and 3 <= run.offered < 40
    assert len(run.requests) == run.offered and all(r.ok for r in run.requests)

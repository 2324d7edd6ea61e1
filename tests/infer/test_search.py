from chute.infer import InferConfig, StageConfig, _search
from chute.infer._search import Trial, format_trials


def test_the_final_round_picks_the_lowest_p95_that_meets_the_slo(monkeypatch):
    base = InferConfig([StageConfig("s", "m:f")])
    configs = [base.replace("s", replicas=r) for r in (1, 2, 3)]
    trials = [Trial({"s": (r, 1)}, "s", capacity=5.0, sustained=rate)
              for r, rate in ((1, 4.0), (2, 3.5), (3, 3.0))]
    measured = {1: (4.0, 1400.0, 0, 0), 2: (4.0, 900.0, 0, 0), 3: (4.0, 800.0, 1, 0)}
    seen = []

    def probe(config, inputs, rate, seed):
        seen.append((config.stage("s").replicas, rate))
        return measured[config.stage("s").replicas]

    monkeypatch.setattr(_search, "_probe", probe)
    trial, config = _search._final_round(list(zip(trials, configs, strict=True)), [0], 1000.0,
                                         0, lambda line: None)
    # all three at the best rate any sustained; replicas=3 drops one, replicas=1 is too slow
    assert seen == [(1, 4.0), (2, 4.0), (3, 4.0)]
    assert config.stage("s").replicas == 2 and trial is trials[1]
    assert "final round 4.00: 900" in format_trials(trials)


def test_when_no_finalist_meets_the_slo_the_lowest_p95_wins(monkeypatch):
    base = InferConfig([StageConfig("s", "m:f")])
    leaders = [(Trial({"s": (r, 1)}, "s", sustained=2.0), base.replace("s", replicas=r))
               for r in (1, 2)]
    monkeypatch.setattr(_search, "_probe", lambda c, i, rate, seed: (
        rate, {1: 1500.0, 2: 1200.0}[c.stage("s").replicas], 0, 0))
    _, config = _search._final_round(leaders, [0], 1000.0, 0, lambda line: None)
    assert config.stage("s").replicas == 2

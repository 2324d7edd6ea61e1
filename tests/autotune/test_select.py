import pytest

from chute.autotune import Measurement, Trial, select
from chute.errors import ChuteError
from tests.autotune._fakes import cand


def measured(name, cost, rate):
    m = Measurement(img_per_s=rate, cpu_percent=100.0, gpu_percent=None, images=100,
                    batches=10, seconds=1.0, warmup_seconds=0.5)
    return Trial(cand(name, cost), m)


def test_clear_winner_and_margin():
    d = select([measured("a", 1, 100.0), measured("b", 2, 180.0), measured("c", 3, 50.0)])
    assert d.choice.name == "b"
    assert d.runner_up.name == "a"
    assert d.margin == pytest.approx(1.8)
    assert d.reason.startswith("b (180 img/s) won by 1.80x over a (100 img/s)")


def test_tie_prefers_the_cheaper_candidate_whatever_the_order():
    trials = [measured("dear", 5, 103.0), measured("cheap", 1, 100.0), measured("mid", 3, 60.0)]
    for order in (trials, trials[::-1], [trials[1], trials[0], trials[2]]):
        d = select(order, tie_tolerance=0.05)
        assert d.choice.name == "cheap"
        assert "tied with dear (103 img/s) within 5%" in d.reason
    # outside the tolerance the faster one wins
    assert select(trials, tie_tolerance=0.01).choice.name == "dear"


def test_equal_cost_ties_break_by_name():
    a = Trial(cand("b-second", 1), measured("x", 1, 100.0).measurement)
    b = Trial(cand("a-first", 1), measured("y", 1, 100.0).measurement)
    assert select([a, b]).choice.name == "a-first"


def test_failures_unavailable_and_unmeasured_are_excluded_and_counted():
    trials = [
        Trial(cand("broken", 0), None, "failed: RuntimeError: boom"),
        Trial(cand("gpu", 1, available=False, reason="no CUDA device available")),
        Trial(cand("late", 2), None, "not measured: the budget of 1s was used up"),
        measured("slow", 3, 10.0),
    ]
    d = select(trials)
    assert d.choice.name == "slow"
    assert d.margin is None and d.runner_up is None
    assert "only candidate measured" in d.reason
    assert "1 failed" in d.reason and "1 not measured" in d.reason
    assert "1 unavailable" in d.reason
    assert [t.status for t in d.trials] == ["failed", "unavailable", "not measured", "measured"]


def test_nothing_measured_is_a_clear_error():
    trials = [
        Trial(cand("broken", 0), None, "failed: OSError: libturbojpeg.so.0 missing"),
        Trial(cand("gpu", 1, available=False, reason="no CUDA device available")),
    ]
    with pytest.raises(ChuteError) as err:
        select(trials)
    msg = str(err.value)
    assert "could not measure any candidate" in msg
    assert "broken: failed: OSError: libturbojpeg.so.0 missing" in msg
    assert "gpu: no CUDA device available" in msg

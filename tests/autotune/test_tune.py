import pytest

from chute.autotune import BudgetExhausted, measure, tune
from chute.errors import ChuteError
from tests.autotune._fakes import FakeClock, FakeRunner, cand


def test_warmup_is_excluded_from_the_rate():
    clock = FakeClock()
    runner = FakeRunner(clock, {"a": 500.0}, first_batch_s=30.0)  # a slow "JIT" first batch
    m = measure(runner(cand("a", 0)), window=1.0, deadline=1e9, clock=clock)
    assert m.img_per_s == pytest.approx(500.0)
    assert m.warmup_seconds == pytest.approx(30.0 + 2 * 10 / 500)
    assert m.seconds >= 1.0 and m.batches >= 3 and not m.cut_short
    assert m.gpu_percent is None  # cpu device: nothing sampled
    assert runner.syncs == 2  # after warm-up and at the end of the window


def test_deadline_in_warmup_raises_and_in_window_cuts_short():
    clock = FakeClock()
    runner = FakeRunner(clock, {"a": 10.0})  # 1 s per batch
    with pytest.raises(BudgetExhausted):
        measure(runner(cand("a", 0)), window=5.0, deadline=1.5, clock=clock)
    clock.t = 0.0
    m = measure(runner(cand("a", 0)), window=5.0, deadline=3.5, clock=clock)
    assert m.cut_short and m.batches == 2 and m.img_per_s == pytest.approx(10.0)


def test_tune_measures_all_and_picks_fastest():
    clock = FakeClock()
    runner = FakeRunner(clock, {"a": 100.0, "b": 300.0, "c": 200.0})
    cands = [cand("a", 0), cand("b", 1), cand("c", 2),
             cand("gpu", 3, available=False, reason="no CUDA device available")]
    d = tune(cands, runner, budget=60.0, window=1.0, clock=clock)
    assert d.choice.name == "b"
    assert d.margin == pytest.approx(1.5)
    assert [t.candidate.name for t in d.trials] == ["a", "b", "c", "gpu"]  # listed as given
    assert sorted(runner.opened) == ["a", "b", "c"]  # the unavailable one is never opened
    assert sorted(runner.closed) == ["a", "b", "c"]
    assert clock.t <= 60.0


def test_failure_is_recorded_and_excluded():
    clock = FakeClock()
    runner = FakeRunner(clock, {"a": 100.0, "b": 300.0},
                        fail={"b": RuntimeError("decoder exploded")})
    d = tune([cand("a", 0), cand("b", 1)], runner, budget=60.0, window=1.0, clock=clock)
    assert d.choice.name == "a"
    b = d.trials[1]
    assert b.status == "failed" and b.note == "failed: RuntimeError: decoder exploded"
    assert "b" in runner.closed  # closed even though it failed


def test_budget_exhaustion_decides_among_measured_in_priority_order():
    clock = FakeClock()
    runner = FakeRunner(clock, {"p0": 10.0, "p1": 10.0, "fast": 1000.0})  # 1 s per batch
    cands = [cand("fast", 0, priority=2), cand("p0", 1, priority=0), cand("p1", 2, priority=1)]
    d = tune(cands, runner, budget=5.0, window=1.0, min_window=0.1, clock=clock)
    # p0 (priority 0) takes 2 s warm-up + 3 s window: the whole budget
    assert runner.opened == ["p0"]
    assert d.choice.name == "p0"
    notes = {t.candidate.name: t.note for t in d.trials}
    assert notes["fast"] == notes["p1"] == "not measured: the budget of 5s was used up"
    assert "2 not measured" in d.reason


def test_first_measurement_completes_past_the_budget_then_tuning_stops():
    clock = FakeClock()
    runner = FakeRunner(clock, {"a": 10.0, "b": 10.0}, first_batch_s=100.0)  # a long "JIT"
    d = tune([cand("a", 0), cand("b", 1)], runner, budget=5.0, clock=clock)
    assert runner.opened == ["a"]
    a, b = d.trials
    assert a.measurement.img_per_s == pytest.approx(10.0) and a.measurement.batches == 3
    assert a.note == "over budget: warm-up took 102.0s (JIT compile, first touch)"
    assert b.note == "not measured: the budget of 5s was used up"
    assert d.choice.name == "a"


def test_budget_gone_in_a_later_warmup_is_not_waited_for():
    clock = FakeClock()
    runner = FakeRunner(clock, {"a": 10.0, "b": 10.0})  # 1 s per batch
    d = tune([cand("a", 0), cand("b", 1)], runner, budget=6.5, window=1.0, clock=clock)
    # a: 2 s warm-up + 3 s window; b starts with 1.5 s left and stops after its two warm-up batches
    assert runner.opened == ["a", "b"]
    assert d.trials[1].note == "not measured: budget ran out during warm-up (2.0s)"
    assert d.choice.name == "a"


def test_nothing_measured_is_an_error():
    clock = FakeClock()
    runner = FakeRunner(clock, {}, fail={"a": OSError("no libturbojpeg"), "b": ValueError("x")})
    with pytest.raises(ChuteError, match="a: failed: OSError: no libturbojpeg"):
        tune([cand("a", 0), cand("b", 1)], runner, budget=5.0, clock=clock)


def test_progress_display_goes_to_stderr(capsys):
    clock = FakeClock()
    runner = FakeRunner(clock, {"a": 100.0, "b": 200.0})
    d = tune([cand("a", 0), cand("b", 1)], runner, budget=60.0, window=0.5, clock=clock,
             progress=True)
    captured = capsys.readouterr()
    assert d.choice.name == "b"
    assert "autotune" in captured.err and captured.out == ""

import numpy as np
import pytest

from chute.pipelines import EpochOrder


@pytest.mark.parametrize("n", [1, 2, 3, 5, 17, 64, 1000, 4097, 65537])
def test_is_a_bijection(n):
    ids = EpochOrder(n, seed=3, epoch=1)(np.arange(n))
    assert ids.dtype == np.int64
    assert np.array_equal(np.sort(ids), np.arange(n))


def test_scalar_and_array_agree_and_are_deterministic():
    order = EpochOrder(1000, seed=7, epoch=2)
    full = order(np.arange(1000))
    assert int(order(123)) == full[123]
    assert np.array_equal(EpochOrder(1000, 7, 2)(np.arange(1000)), full)


def test_out_of_range_positions_are_refused():
    with pytest.raises(IndexError):
        EpochOrder(10, 0, 0)(np.array([10]))


def test_epochs_and_seeds_differ():
    n = 10_000
    a = EpochOrder(n, 0, 0)(np.arange(n))
    b = EpochOrder(n, 0, 1)(np.arange(n))
    c = EpochOrder(n, 1, 0)(np.arange(n))
    # two independent random permutations agree on ~1 position; allow a generous margin
    assert (a == b).sum() < 10
    assert (a == c).sum() < 10
    assert not np.array_equal(a, np.arange(n))


def test_shuffle_is_uniform_enough():
    n = 1 << 14 | 123  # odd bit count: exercises the unbalanced split and cycle walking
    pos = np.arange(n)
    ids = EpochOrder(n, seed=11, epoch=0)(pos)
    # position vs id: no linear correlation (|r| ~ 1/sqrt(n) for a random permutation)
    r = np.corrcoef(pos, ids)[0, 1]
    assert abs(r) < 4 / np.sqrt(n)
    # neighbouring positions: their ids' difference is not concentrated (consecutive pair test)
    r_pairs = np.corrcoef(ids[:-1], ids[1:])[0, 1]
    assert abs(r_pairs) < 4 / np.sqrt(n)
    # where id k lands: each tenth of the ids spreads evenly over the ten position bins (chi^2)
    bins = 10
    table = np.zeros((bins, bins))
    np.add.at(table, (pos * bins // n, ids * bins // n), 1)
    expected = n / bins / bins
    chi2 = ((table - expected) ** 2 / expected).sum()
    assert chi2 < 81 + 4 * np.sqrt(2 * 81)  # dof = 81, mean + 4 sigma


def test_sample_position_is_uniform_over_epochs():
    # over many epochs, the position of a fixed sample is uniform over [0, n)
    n, epochs = 16, 4000
    counts = np.zeros((n, n))
    for e in range(epochs):
        counts[np.arange(n), EpochOrder(n, 5, e)(np.arange(n))] += 1
    expected = epochs / n
    chi2 = ((counts - expected) ** 2 / expected).sum()
    dof = (n - 1) * (n - 1)
    assert chi2 < dof + 5 * np.sqrt(2 * dof)

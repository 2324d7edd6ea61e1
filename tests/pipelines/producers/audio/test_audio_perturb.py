"""Speed/volume perturbation: chute/pipelines/producers/audio/_perturb.py, and the audio producer
applying it."""

from __future__ import annotations

import numpy as np
import pytest

from chute.pipelines import BatchRequest, ProducerSpec, create_producer
from chute.pipelines.producers.audio._perturb import AudioPerturbation


def test_choices_are_keyed_by_seed_epoch_and_id():
    source = AudioPerturbation((0.9, 1.0, 1.1), (-6.0, 6.0))
    ids = np.arange(400)
    a, b = source(1, 2, ids), source(1, 2, ids[::-1])
    np.testing.assert_array_equal(a["speed"][::-1], b["speed"])  # per id, not per position
    assert set(a["speed"].tolist()) == {0.9, 1.0, 1.1}
    assert 10 ** (-6 / 20) <= a["gain"].min() and a["gain"].max() <= 10 ** (6 / 20)
    assert not np.array_equal(source(1, 3, ids)["speed"], a["speed"])
    with pytest.raises(ValueError, match="positive"):
        AudioPerturbation((0.0,))


@pytest.mark.parametrize("speeds, volume_db", [((float("nan"), 1.0), (0.0, 0.0)),
                                               ((float("inf"),), (0.0, 0.0)),
                                               ((1.0,), (float("nan"), 0.0)),
                                               ((1.0,), (0.0, float("inf")))])
def test_nan_or_infinite_speeds_and_gains_are_refused(speeds, volume_db):
    # they passed the range checks and delivered NaN (or empty) audio
    with pytest.raises(ValueError, match="finite"):
        AudioPerturbation(speeds, volume_db)


def test_producer_resamples_for_speed_and_scales_for_volume(tmp_path):
    sf = pytest.importorskip("soundfile")
    soxr = pytest.importorskip("soxr")
    from chute.readers import open_dataset
    from tests._audio import convert_recordings

    ds = open_dataset(convert_recordings(tmp_path, names=("b.flac",)))
    producer = create_producer(ProducerSpec("audio", "audio", ds, 2, options={
        "unit": "segment", "speeds": (1.25,), "volume_db": (6.0, 6.0)}))
    ids = np.array([0], np.int64)
    params = {}
    for source in producer.param_sources():
        params.update(source(0, 0, ids))
    request = BatchRequest(0, ids, params)
    shapes = producer.shapes(request)
    out = {"audio": np.zeros(shapes["audio"], np.float32), "audio_lengths": np.zeros(1, int),
           "audio_segment": [None]}
    assert not producer.fill(request, out).any()
    source = sf.read(tmp_path / "b.flac", start=1600, stop=9600, dtype="float32")[0]
    want = soxr.resample(source, 16000 * 1.25, 16000) * np.float32(10 ** (6 / 20))
    assert out["audio_lengths"][0] == len(want) == 6400
    np.testing.assert_allclose(out["audio"][0], want, rtol=1e-6, atol=1e-7)
    assert producer.outputs()["audio"].sample_shape[0] >= shapes["audio"][1]

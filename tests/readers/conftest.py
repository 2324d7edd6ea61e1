import numpy as np
import pytest

from tests._datasets import write_samples

FIELDS = {"image": "bytes", "label": "int64", "height": "int32", "width": "int32", "meta": "json"}


def random_payloads(n: int, seed: int = 0, max_len: int = 300) -> list[bytes]:
    rng = np.random.default_rng(seed)
    # includes empty payloads on purpose
    return [rng.integers(0, 256, rng.integers(0, max_len), dtype=np.uint8).tobytes()
            for _ in range(n)]


def write_dataset(path, payloads, shard_size="1GiB", **kwargs):
    samples = ({"image": payload, "label": i % 7, "height": i + 1, "width": 2 * i + 1,
                "meta": {"key": f"k{i}", "caption": f"sample {i}"}}
               for i, payload in enumerate(payloads))
    return write_samples(path, FIELDS, samples, shard_size, **kwargs)


@pytest.fixture
def payloads():
    return random_payloads(120)


@pytest.fixture
def dataset_dir(tmp_path, payloads):
    """A 120-sample dataset split over several small shards."""
    return write_dataset(tmp_path / "d.chute", payloads, shard_size=3000)

"""Every fenced `python` example of README.md and docs/*.md runs verbatim on generated data
(issue 38, "docs that run verbatim"; docs/testing.md).

A page's examples run in order in one namespace, as a reader types them, in a folder holding
the datasets they name (`train.chute`, `latents.zarr`, `x.zarr`, `speech.chute`,
`videos.chute`, ...), generated here. The names an example leaves to its reader (`model`,
`criterion`, `step`, `jpeg_bytes`, ...) are small stand-ins, listed in `_given`. An example
that needs a GPU, an object store or a cluster says so in a comment (`# needs a GPU`, ...): it
runs where a GPU is present (the GPU-only ones) and is skipped otherwise, by name.

The `chute ...` lines of the shell examples are checked in tests/test_docs_examples.py."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from tests._datasets import write_samples
from tests.test_docs_examples import ROOT, _examples

pytestmark = pytest.mark.slow  # builds videos, audio and zarr stores, and starts Ray and replicas

# "# needs a GPU", "# needs an S3 bucket", "# needs a Ray cluster ...": why an example cannot
# run on this machine; only "a GPU" is something a test machine may have.
_NEEDS = re.compile(r"#.*\bneeds (a GPU|an? [\w -]+)", re.IGNORECASE)


def _pages() -> dict[str, list[tuple[int, str]]]:
    pages: dict[str, list[tuple[int, str]]] = {}
    for file, line, code in _examples():
        pages.setdefault(file, []).append((line, code))
    return pages


PAGES = _pages()


def _write_images(path: Path, n: int, seed: int) -> Path:
    from tests.readers._images import jpeg_bytes

    rng = np.random.default_rng(seed)
    fields = {"image": {"kind": "bytes", "media": "image"}, "height": "int32", "width": "int32",
              "label": "int64", "latent": "ndarray", "meta": "json"}

    def samples():
        for i in range(n):
            h, w = int(rng.integers(24, 41)), int(rng.integers(24, 41))
            yield {"image": jpeg_bytes(w, h, seed=seed * 1000 + i), "height": h, "width": w,
                   "label": i % 10,
                   "latent": rng.standard_normal((4, 8, 8)).astype(np.float16),
                   "meta": {"caption": f"picture {i}"}}

    return write_samples(path, fields, samples(), class_names=[str(k) for k in range(10)])


def _write_zarr(folder: Path) -> None:
    from tests.readers._zarr_stores import latents_values, write_store

    rng = np.random.default_rng(1)
    write_store(folder / "latents.zarr", {
        "latent": rng.standard_normal((64, 4, 8, 8)).astype(np.float16),
        "label": (np.arange(64) % 10).astype(np.int64),
        "text/mask": (rng.random((64, 8)) < 0.5).astype(np.uint8),
        "scale": np.float32(0.18215), "stats/mean": np.float64(0.5)}, chunk=8)
    segments = latents_values(64, 8)
    write_store(folder / "x.zarr", {
        **segments, **{f"latents/{k}" if k == "base_frames" else f"text/{k}": v
                       for k, v in segments.items()}}, chunk=8)


def _write_videos(folder: Path) -> Path:
    from tests._video_media import convert_videos, make_video

    work = folder / "video-src"
    work.mkdir()
    # ordinary sizes (issue 38 item 8): 320x240 and 340x256, 40 frames each (a 16-frame clip
    # at frame_interval=2 needs 31)
    videos = [(f"v{k}.mp4", make_video(40, *((240, 320) if k % 2 else (256, 340)), gop=8))
              for k in range(16)]
    return convert_videos(work, videos, shard_size="1MB").rename(folder / "videos.chute")


def _write_speech(folder: Path) -> Path:
    from tests._audio import convert_recordings

    return convert_recordings(folder / "speech-src").rename(folder / "speech.chute")


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Path:
    """The folder the examples run in, with every dataset they name."""
    folder = tmp_path_factory.mktemp("docs-world")
    _write_images(folder / "train.chute", 256, seed=1)
    for name in ("web.chute", "curated.chute", "imagenet.chute"):
        _write_images(folder / name, 256, seed=len(name))
    write_samples(folder / "latents.chute", {"latent": "ndarray", "label": "int64"},
                  ({"latent": np.full((4, 8, 8), i, np.float16), "label": i % 10}
                   for i in range(256)))
    _write_zarr(folder)
    _write_videos(folder)
    _write_speech(folder)
    (folder / "examples").symlink_to(ROOT / "examples")  # docs/inference.md: base="examples"
    return folder


def _given(resuming: bool) -> dict:
    """What the examples leave to their reader: a model, a loss, a training step, a sample."""
    import torch

    from tests.readers._images import jpeg_bytes

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.head = torch.nn.Linear(3, 10)

        def forward(self, images):
            return self.head(images.float().mean(dim=(2, 3)))

    return {"__name__": "__main__", "model": Model(),
            "criterion": torch.nn.functional.cross_entropy, "epochs": 2,
            "resuming": resuming, "step": lambda batch: None,
            "time_to_save": lambda: True, "jpeg_bytes": jpeg_bytes(64, 48), "h": 48, "w_px": 64,
            "z": np.zeros((4, 8, 8), np.float16), "ids": np.array([0, 3, 5]),
            "path": "speech.chute"}


def _needs(code: str) -> str | None:
    found = _NEEDS.search(code)
    return found.group(1).strip() if found else None


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


@pytest.mark.parametrize("page", sorted(PAGES))
def test_every_example_of_the_page_runs(page, world, monkeypatch, ray_stopped):
    monkeypatch.chdir(world)
    blocks = PAGES[page]
    runs = (False, True) if any("resuming" in code for _, code in blocks) else (False,)
    skipped = []
    for resuming in runs:  # a resume example runs fresh, then from the checkpoint it saved
        namespace = _given(resuming)
        for line, code in blocks:
            need = _needs(code)
            if need is not None and not (need.lower() == "a gpu" and _cuda()):
                skipped.append(f"{page}:{line} (needs {need})")
                continue
            # line numbers of a failure point into the page
            exec(compile("\n" * (line - 1) + code, str(ROOT / page), "exec"), namespace)
    if skipped and len(skipped) == len(blocks) * len(runs):
        pytest.skip("every example " + "; ".join(sorted(set(skipped))))


def test_an_example_that_fails_fails_the_test(world, monkeypatch):
    """The runner can fail: an example naming a dataset that is not there raises."""
    monkeypatch.chdir(world)
    with pytest.raises(Exception, match="missing.chute"):
        exec("from chute import Pipeline\nPipeline('missing.chute', 8)", _given(False))


def test_only_gpu_cluster_and_object_store_examples_are_exempt():
    """Few examples are exempt, each for a reason a test machine cannot supply."""
    exempt = [(page, line, _needs(code)) for page, blocks in PAGES.items()
              for line, code in blocks if _needs(code)]
    assert len(exempt) <= 4, exempt
    for page, line, need in exempt:
        assert re.fullmatch(r"a GPU|an S3 bucket|a Ray cluster[\w ]*", need or ""), \
            (page, line, need)

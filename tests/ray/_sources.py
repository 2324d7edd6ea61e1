"""Inputs of every converter, generated for the Ray engine tests: each builder writes its
source under a folder and returns (job factory, description); the factory builds the same
ConvertJob for both engines."""

from __future__ import annotations

import csv
import io
import json
import tarfile
from pathlib import Path

import numpy as np

from tests._media import encode, jpeg, noise_image, truncated


def image_folder(root: Path) -> Path:
    """3 classes of JPEGs of several sizes, one PNG (transcoded), one truncated JPEG."""
    for c in range(3):
        (root / f"class{c}").mkdir(parents=True)
        for i in range(9):
            data = jpeg(40 + 3 * i, 30 + 5 * c, seed=10 * c + i)
            name = f"{i:02d}.jpg"
            if (c, i) == (1, 4):
                data = truncated(data)
            if (c, i) == (2, 7):
                data, name = encode(noise_image(20, 24, seed=7), "PNG"), "07.png"
            (root / f"class{c}" / name).write_bytes(data)
    return root


def image_csv(root: Path) -> Path:
    folder = image_folder(root / "images")
    rows = [(str(p.relative_to(root)), p.parent.name, f"caption {k}")
            for k, p in enumerate(sorted(folder.rglob("*.*")))]
    path = root / "list.csv"
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["path", "label", "text"])
        w.writerows(rows)
    return path


def tars(root: Path) -> list[Path]:
    """3 WebDataset shards with labels, metadata and captions; one sample's image truncated."""
    root.mkdir(parents=True)
    paths = []
    for t in range(3):
        path = root / f"shard-{t}.tar"
        with tarfile.open(path, "w") as tar:
            for i in range(t * 6, t * 6 + 6):
                image = jpeg(16 + i, 12, seed=i)
                if i == 8:
                    image = truncated(image)
                for name, data in ((f"{i:05d}.jpg", image), (f"{i:05d}.cls", b"%d" % (i % 4)),
                                   (f"{i:05d}.json", json.dumps({"i": i}).encode()),
                                   (f"{i:05d}.txt", f"caption {i}".encode())):
                    info = tarfile.TarInfo(name)
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
        paths.append(path)
    return paths


def videos(root: Path) -> Path:
    """6 short videos of two codecs and containers, and one file that is not a video."""
    from tests._video_media import make_video

    root.mkdir(parents=True)
    rows = []
    for i in range(6):
        codec, container = (("libx264", "mp4"), ("mpeg4", "avi"))[i % 2]
        name = f"v{i}.{container}"
        (root / name).write_bytes(make_video(8 + i, 32, 48, codec=codec, container=container))
        rows.append((name, f"clip {i}"))
    (root / "broken.mp4").write_bytes(b"not a video")
    rows.append(("broken.mp4", "broken"))
    path = root / "videos.csv"
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["path", "text"])
        w.writerows(rows)
    return path


def recordings(root: Path) -> Path:
    from tests._audio import write_recordings

    return write_recordings(root)


def zarr_group(root: Path) -> Path:
    from tests.readers._zarr_stores import latents_values, write_store

    return write_store(root / "latents.zarr", latents_values(23, 5), chunk=4)


def hf_saved(root: Path) -> Path:
    import datasets

    features = datasets.Features({"image": datasets.Image(),
                                  "label": datasets.ClassLabel(names=["cat", "dog"]),
                                  "caption": datasets.Value("string")})
    table = datasets.Dataset.from_dict(
        {"image": [{"bytes": jpeg(20 + i, 16, seed=i), "path": None} for i in range(13)],
         "label": [i % 2 for i in range(13)],
         "caption": [f"picture {i}" for i in range(13)]}, features=features)
    table.save_to_disk(str(root / "saved"))
    return root / "saved"


def rows_of(dataset) -> list[dict]:
    """Every sample as plain values (bytes, numbers, lists), in order."""
    out = []
    for i in range(len(dataset)):
        row = {}
        for name, value in dataset[i].items():
            if isinstance(value, np.ndarray):
                value = value.tobytes() if value.dtype == np.uint8 and value.ndim == 1 \
                    else (value.dtype.str, value.shape, value.tobytes())
            elif isinstance(value, np.generic):
                value = value.item()
            row[name] = value
        out.append(row)
    return out

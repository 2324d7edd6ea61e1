"""Write the FFCV fixtures of tests/convert/convert_ffcv.py with the real FFCV, and what
FFCV's own Reader and Loader return for them (see README.md here for how to run it).

    all_fields.beton.gz  a .beton with every built-in field type (gzipped: FFCV pads every
                         page to 2 MiB of mostly zeros)
    expected.npz         every field of every sample as FFCV reads it back

FFCV is not a dependency of chute (it needs a compiler, OpenCV and libjpeg-turbo): run this in
a separate virtual environment that has `ffcv` installed, never in the test run."""

from __future__ import annotations

import gzip
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
from ffcv.fields import (
    BytesField,
    FloatField,
    IntField,
    JSONField,
    NDArrayField,
    RGBImageField,
    TorchTensorField,
)
from ffcv.fields.basics import FloatDecoder, IntDecoder
from ffcv.fields.bytes import BytesDecoder
from ffcv.fields.decoders import NDArrayDecoder, SimpleRGBImageDecoder
from ffcv.loader import Loader, OrderOption
from ffcv.reader import Reader
from ffcv.writer import DatasetWriter

HERE = Path(__file__).resolve().parent
N = 6
SIDE = (24, 32)  # every `image` is 24x32, so FFCV's SimpleRGBImageDecoder reads them back


def _pixels(rng, height: int, width: int) -> np.ndarray:
    """A smooth picture (JPEG keeps it close) with some noise."""
    y, x = np.mgrid[0:height, 0:width]
    base = np.stack([x * 255 // max(width - 1, 1), y * 255 // max(height - 1, 1),
                     (x + y) * 127 // max(height + width - 2, 1)], axis=-1)
    return np.clip(base + rng.integers(-8, 8, base.shape), 0, 255).astype(np.uint8)


class Samples:
    """The indexable dataset FFCV's DatasetWriter reads (one tuple per sample, in field
    order)."""

    def __init__(self) -> None:
        rng = np.random.default_rng(41)
        self.rows = []
        for i in range(N):
            self.rows.append((
                _pixels(rng, *SIDE),
                _pixels(rng, 8 + 3 * i, 20 - 2 * i),
                i * 7 - 20,
                i / 3 - 1.5,
                rng.standard_normal((2, 3)).astype(np.float32),
                rng.integers(-999, 999, 4).astype(np.int16),
                torch.arange(3, dtype=torch.int32) * (i - 2),
                rng.integers(0, 255, 5 + 4 * i, dtype=np.uint8),
                {"i": i, "tags": ["a", "b", "c"][: i % 3], "text": f"sample {i} ✓"},
            ))

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int):
        return self.rows[i]


FIELDS = {
    # 'proportion' picks JPEG or raw pixels per sample: both modes in one field
    "image": RGBImageField(write_mode="proportion", compress_probability=0.5,
                           jpeg_quality=90),
    "thumb": RGBImageField(write_mode="jpg", jpeg_quality=80),
    "label": IntField(),
    "score": FloatField(),
    "arr_f32": NDArrayField(np.dtype("float32"), (2, 3)),
    "arr_i16": NDArrayField(np.dtype("int16"), (4,)),
    "tensor": TorchTensorField(torch.int32, (3,)),
    "blob": BytesField(),
    "meta": JSONField(),
}


def _ragged(parts: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Variable-length byte strings as one array and their offsets (npz holds no objects)."""
    offsets = np.cumsum([0] + [len(p) for p in parts]).astype(np.int64)
    data = np.concatenate(parts) if parts else np.zeros(0, np.uint8)
    return data.astype(np.uint8), offsets


def expected(path: Path) -> dict[str, np.ndarray]:
    """Every field as FFCV reads it: payloads as its Reader locates them (metadata pointer,
    allocation table size), values through its Loader's decoders."""
    reader = Reader(str(path))
    table = reader.alloc_table
    sizes = dict(zip(table["ptr"].tolist(), table["size"].tolist(), strict=True))
    raw = path.read_bytes()

    def metadata(name: str) -> np.ndarray:  # the Reader's records name fields f0, f1, ...
        return reader.metadata[f"f{reader.field_names.index(name)}"]

    out: dict[str, np.ndarray] = {}
    for name in ("image", "thumb"):
        meta = metadata(name)
        payloads = [np.frombuffer(raw[p:p + sizes[p]], np.uint8) for p in
                    meta["data_ptr"].tolist()]
        out[f"{name}.payload"], out[f"{name}.offsets"] = _ragged(payloads)
        out[f"{name}.mode"] = meta["mode"].astype(np.uint8)
        out[f"{name}.height"] = meta["height"].astype(np.int64)
        out[f"{name}.width"] = meta["width"].astype(np.int64)
    blob_sizes = metadata("blob")["size"].tolist()
    meta_sizes = metadata("meta")["size"].tolist()
    loader = Loader(str(path), batch_size=1, num_workers=1, order=OrderOption.SEQUENTIAL,
                    os_cache=True, drop_last=False,
                    pipelines={"image": [SimpleRGBImageDecoder()], "thumb": None,
                               "label": [IntDecoder()], "score": [FloatDecoder()],
                               "arr_f32": [NDArrayDecoder()], "arr_i16": [NDArrayDecoder()],
                               "tensor": [NDArrayDecoder()], "blob": [BytesDecoder()],
                               "meta": [BytesDecoder()]})
    columns: dict[str, list] = {k: [] for k in ("image.pixels", "label", "score", "arr_f32",
                                                "arr_i16", "tensor", "blob", "meta")}
    for i, batch in enumerate(loader):
        image, label, score, arr_f32, arr_i16, tensor, blob, meta = (
            # copies: the Loader fills the same buffers again for the next batch
            np.array(b.numpy() if hasattr(b, "numpy") else b, copy=True) for b in batch)
        columns["image.pixels"].append(image[0])
        columns["label"].append(label[0, 0])
        columns["score"].append(score[0, 0])
        columns["arr_f32"].append(arr_f32[0])
        columns["arr_i16"].append(arr_i16[0])
        columns["tensor"].append(tensor[0])
        columns["blob"].append(blob[0][:blob_sizes[i]].astype(np.uint8))
        columns["meta"].append(JSONField.unpack(meta[0][:meta_sizes[i]]))
    for key in ("image.pixels", "label", "score", "arr_f32", "arr_i16", "tensor"):
        out[key] = np.stack(columns[key])
    out["blob.payload"], out["blob.offsets"] = _ragged(columns["blob"])
    out["meta.json"] = np.frombuffer(json.dumps(columns["meta"]).encode("utf-8"), np.uint8)
    return out


def main(out: Path = HERE) -> None:
    np.random.seed(1)  # RGBImageField's 'proportion' mode draws from numpy's global state
    with tempfile.TemporaryDirectory() as tmp:
        beton = Path(tmp) / "all_fields.beton"
        DatasetWriter(str(beton), FIELDS, num_workers=1).from_indexed_dataset(Samples())
        values = expected(beton)
        modes = values["image.mode"].tolist()
        if set(modes) != {0, 1}:
            sys.exit(f"the 'image' field holds modes {modes}; change the seed so it holds "
                     "both JPEG (0) and raw (1) samples")
        (out / "all_fields.beton.gz").write_bytes(
            gzip.compress(beton.read_bytes(), compresslevel=9, mtime=0))
    np.savez_compressed(out / "expected.npz", **values)
    print(f"wrote {out / 'all_fields.beton.gz'} and {out / 'expected.npz'} "
          f"(image modes {modes})")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE)

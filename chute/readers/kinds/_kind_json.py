"""Kind `json`: per-sample metadata (captions, keys, segment lists) as UTF-8 JSON records,
stored apart from the payloads so it can be rewritten alone (`chute meta update`)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from chute.errors import FormatError
from chute.readers.format._records import Records, RecordWriter, load_records
from chute.readers.kinds._kind import Encoded, OpenArgs
from chute.readers.kinds._kind_bytes import _RecordColumn

__all__ = ["JSON", "encode_json"]


def encode_json(value) -> bytes:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    try:
        return text.encode()
    except UnicodeEncodeError:
        # A lone surrogate (a file name that is not UTF-8, decoded with surrogateescape) has
        # no UTF-8 form; as a JSON \u escape it is stored and read back exactly.
        return json.dumps(value, ensure_ascii=True, separators=(",", ":")).encode()


class JsonReader:
    sample_shape = None
    dtype = None

    def __init__(self, field: str, records: Records):
        self.field = field
        self.records = records

    def _decode(self, raw: np.ndarray, global_id: int):
        try:
            return json.loads(raw.tobytes())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise FormatError(f"{self.records.where(global_id)} of field {self.field!r} is not "
                              f"valid JSON ({exc}); run `chute verify` and restore the "
                              "file") from None

    def get(self, shard: int, local: int, global_id: int):
        return self._decode(self.records.view(shard, global_id), global_id)

    def read(self, ids: np.ndarray, out=None) -> list:
        views = self.records.views(ids)
        return [self._decode(v, int(i)) for v, i in zip(views, ids, strict=True)]


class _JsonKind:
    name = "json"

    def declare(self, field: str, options: dict) -> dict:
        if options:
            raise ValueError(f"field {field!r}: kind 'json' takes no options {sorted(options)}")
        return {"kind": self.name}

    def infer(self, value) -> dict | None:
        return {"kind": self.name}

    def complete(self, field: str, spec: dict, value) -> dict:
        return spec

    def check(self, field: str, spec: dict) -> str | None:
        return None

    def files(self, stem: str, spec: dict) -> dict[str, str]:
        return {f"{stem}.bin": "metadata", f"{stem}.idx": "index"}

    def encode(self, field: str, spec: dict, value, sample: int) -> Encoded:
        try:
            data = encode_json(value)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"sample {sample} field {field!r}: not JSON-serialisable "
                             f"({exc})") from None
        RecordWriter.check_length(field, sample, len(data))
        return Encoded(data, 0)

    def writer(self, folder: Path, stem: str, spec: dict) -> _RecordColumn:
        return _RecordColumn(RecordWriter(folder, stem))

    def open(self, args: OpenArgs) -> JsonReader:
        return JsonReader(args.field, load_records(args.folders, args.stem, args.counts,
                                                   args.trailing_index_ok, args.files))

    def describe(self, spec: dict) -> str:
        return self.name


JSON = _JsonKind()

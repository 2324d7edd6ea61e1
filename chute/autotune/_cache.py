"""Decision cache: one JSON file per key under the cache directory, written atomically.

Location: $CHUTE_CACHE_DIR, else $XDG_CACHE_HOME/chute, else ~/.cache/chute; decisions live in
its `autotune/` folder. An unreadable or foreign file counts as a miss (with a warning) and is
replaced by the next stored decision.
"""

from __future__ import annotations

import json
import os
import tempfile
import warnings
from pathlib import Path

from chute._cache_dir import cache_dir

__all__ = ["cache_dir", "decision_path", "load_record", "store_record", "RECORD_SCHEMA"]

RECORD_SCHEMA = 1


def decision_path(key: str) -> Path:
    """Where the autotune decision for `key` is stored (under `cache_dir()`).

    Args:
        key: the decision key (machine, dataset and settings digest).
    """
    return cache_dir() / "autotune" / f"{key}.json"


def load_record(key: str) -> dict | None:
    """The stored decision for `key`, or None (missing, unreadable or not for this key)."""
    path = decision_path(key)
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except OSError as exc:
        warnings.warn(f"chute autotune: cannot read cached decision {path} ({exc}); "
                      "measuring again", stacklevel=2)
        return None
    try:
        record = json.loads(text)
        ok = (isinstance(record, dict) and record.get("schema") == RECORD_SCHEMA
              and record.get("key") == key and isinstance(record.get("choice"), str))
    except ValueError:
        ok = False
    if not ok:
        warnings.warn(f"chute autotune: ignoring cached decision {path}: not a valid chute "
                      "decision record (corrupt or from another version); it will be replaced",
                      stacklevel=2)
        return None
    return record


def store_record(record: dict) -> Path:
    """Write `record` (which has a "key") atomically: temp file in the same folder, fsync,
    rename; concurrent writers of the same key leave one whole record."""
    path = decision_path(record["key"])
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump({"schema": RECORD_SCHEMA, **record}, f, indent=2, sort_keys=True)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path

"""Where a write goes: a local folder written under an exclusive lock and published in one
rename (`_dest_lock.py`, `_publish.py`), or an object-storage prefix written under a lease and
switched by its manifest (`_write_lease.py`, `_upload.py`); docs/design.md, "Shard format",
and docs/storage.md, "Writing to s3://"."""

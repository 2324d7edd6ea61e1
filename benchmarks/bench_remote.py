"""Datasets in object storage (issue 23): a chute Pipeline epoch from a local dataset and from
the same dataset in S3, side by side in one run, plus the bytes each epoch downloads.

    .venv/bin/python benchmarks/bench_remote.py [--images N] [--src DIR] [--batch 64]
        [--threads N] [--shard-size 8MiB] [--json FILE]

The S3 server is moto's, started inside this script on loopback (tests/_s3.py; needs
`pip install 'moto[server]'`): the numbers measure chute's remote path (requests, node cache,
read-ahead, eviction), not a network. N JPEGs (the --src images repeated as needed) are
converted once to a local folder and once to s3://, both with --shard-size (small shards, so
the dataset has several and a cache of a quarter of it means something). Configurations, one
epoch each, cpu backend, batch --batch:
  (a) local dataset, eval (resize + center crop 224);
  (b) s3, cold node cache (empty cache folder), eval;
  (c) s3, warm node cache (the folder (b) filled, a new Pipeline), eval;
  (d) s3, cache limit 25% of the dataset's size, train (random resized crop 224),
      order=ShardWindows(shards=2), starting from an empty cache;
  (e) litdata (a peer, when importable: run this script with the virtualenv
      benchmarks/peer_streaming_env.sh makes): the same JPEGs written with litdata.optimize()
      in 8 MB chunks to a local folder, uploaded to the same server, read with
      StreamingDataset + StreamingDataLoader (--threads forked workers; its obstore client
      options get allow_http for the http:// loopback endpoint), PIL decode + resize 256 +
      center crop 224 + normalise (torchvision's eval transform, written out here): a cold
      epoch, a warm one (same cache folder), and a shuffled one (order="shuffle") from an empty
      cache with max_cache_size 25% of the dataset. It runs in a spawned process of its own
      (litdata_epochs says why). A peer that is not importable or fails is a row saying
      "not run" and why.
  (f) MosaicML streaming (a peer, when importable: run this script with the virtualenv
      benchmarks/peer_streaming_env.sh makes): the same JPEGs written with MDSWriter in 8 MB
      shards, uploaded, read with StreamingDataset + StreamingDataLoader (--threads workers),
      the same PIL eval transform as (e); a cold epoch, then a warm one (same cache folder),
      then a shuffled one (py1e) from an empty cache limited to 25% of the dataset.
Bytes downloaded are the sizes of the objects chute fetched (Remote.download and
Remote.get_bytes, wrapped in this script: open plus the epoch) or, for litdata, the files
its downloader published into its cache plus its range reads (both wrapped), for MosaicML
streaming the files its downloader fetched (Stream._download_file, wrapped). Every
configuration runs after one untimed warm-up epoch of the local dataset in each mode (kernels
compiled, page cache filled). Ratios are the warm s3 rate (c) over each row's rate.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import multiprocessing
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import torch
from _datasets import jpeg_files

from chute import ImageOptions, Pipeline, ShardWindows
from chute.convert import ConvertOptions, convert_imagefolder
from chute.readers import open_dataset
from chute.readers.storage._object_store import Remote

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SRC = ROOT.parent / "shared/data/imagenet-sample/images"
BUCKET = "bench"


class Downloads:
    """Counts the bytes of every object chute downloads (wraps Remote's two read paths)."""

    def __init__(self) -> None:
        self.bytes = 0
        self._lock = threading.Lock()
        download, get_bytes = Remote.download, Remote.get_bytes

        def counted_download(remote, name, dest, *args, **kwargs):
            download(remote, name, dest, *args, **kwargs)
            with self._lock:
                self.bytes += Path(dest).stat().st_size

        def counted_get_bytes(remote, name):
            data = get_bytes(remote, name)
            with self._lock:
                self.bytes += len(data)
            return data

        Remote.download = counted_download  # type: ignore[method-assign]
        Remote.get_bytes = counted_get_bytes  # type: ignore[method-assign]

    def take(self) -> int:
        with self._lock:
            value, self.bytes = self.bytes, 0
        return value


def image_folder(src: Path, count: int, dest: Path) -> Path:
    """`count` JPEGs in the flat folder `dest`: the files of `src`, repeated as needed."""
    files = jpeg_files(src)
    dest.mkdir(parents=True)
    for i in range(count):
        file = files[i % len(files)]
        target = dest / f"{i:06d}_{file.name}"
        try:
            os.link(file, target)
        except OSError:  # another file system: copy
            shutil.copyfile(file, target)
    return dest


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())


def chute_epoch(dataset_path: str, batch: int, threads: int, *, augment: str,
                cache_dir: Path | None = None, cache_limit: int | None = None,
                order="sequential") -> tuple[int, float]:
    """(samples, seconds) of one epoch, open included."""
    image = ImageOptions(size=224, backend="cpu", dtype="float32",
                         backend_options={"threads": threads})
    t0 = time.perf_counter()
    if cache_dir is not None:
        dataset = open_dataset(dataset_path, cache_dir=cache_dir, cache_limit=cache_limit)
    else:
        dataset = open_dataset(dataset_path)
    pipe = Pipeline(dataset, batch, fields={"image": image}, augment=augment, device="cpu",
                    order=order, drop_last=False, rank=0, world_size=1)
    try:
        samples = sum(len(b["index"]) for b in pipe)
    finally:
        pipe.close()
        dataset.close()
    return samples, time.perf_counter() - t0


# -- litdata (a peer) ----------------------------------------------------------------------
def _lit_sample(path: str) -> dict:
    return {"image": Path(path).read_bytes()}


class LitTransform:
    """torchvision's eval transform on PIL (resize 256 bilinear, center crop 224, normalise),
    a class so that litdata's worker processes can pickle it."""

    mean = np.array([0.485, 0.456, 0.406], np.float32).reshape(3, 1, 1)
    std = np.array([0.229, 0.224, 0.225], np.float32).reshape(3, 1, 1)

    def __call__(self, sample: dict) -> torch.Tensor:
        from PIL import Image

        with Image.open(io.BytesIO(sample["image"])) as im:
            im = im.convert("RGB")
            width, height = im.size
            scale = 256 / min(width, height)
            im = im.resize((max(256, round(width * scale)), max(256, round(height * scale))),
                           Image.BILINEAR)
            left, top = (im.width - 224) // 2, (im.height - 224) // 2
            im = im.crop((left, top, left + 224, top + 224))
            chw = np.asarray(im, np.float32).transpose(2, 0, 1) / 255.0
        return torch.from_numpy((chw - self.mean) / self.std)


def litdata_epochs(folder: Path, tmp: Path, endpoint: str, batch: int, threads: int,
                   limit: int) -> list[dict]:
    """litdata's epochs (_litdata_epochs) run in a process of its own, started by spawn.
    Why: chute's object store client (obstore, whose runtime does not survive a fork) already
    ran in this process, and litdata's loader forks its workers, which then use obstore;
    litdata's guard against that only knows about its own obstore use, so in workers forked
    from here every chunk download hangs and the epoch ends in ChunkWaitTimeoutError (after
    120 s). A fresh process is what a litdata user has."""
    from concurrent.futures import ProcessPoolExecutor

    # not a multiprocessing.Pool: its processes are daemons, which may not start loader workers
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
        return pool.submit(_litdata_epochs, folder, tmp, endpoint, batch, threads,
                           limit).result()


def _litdata_epochs(folder: Path, tmp: Path, endpoint: str, batch: int, threads: int,
                    limit: int) -> list[dict]:
    """Rows {"name", "samples", "seconds", "fetched"} (or {"name", "error"}) of litdata: the
    JPEGs written with litdata.optimize() in 8 MB chunks, uploaded, read with StreamingDataset
    + StreamingDataLoader (`threads` forked workers, its default on Linux), the PIL eval
    transform: a cold epoch, a warm one (same cache folder); then a shuffled one (its
    order="shuffle": chunks shuffled, then samples within them) from an empty cache with
    max_cache_size=`limit` bytes, reading a copy in chunks of a fifth of the limit (as
    streaming's row does): with 8 MB chunks its cache holds three, fewer than its 2 workers
    x (chunk in use + one read ahead), and the epoch stalls until ChunkWaitTimeoutError."""
    import boto3
    import litdata
    from litdata.streaming import downloader

    client = boto3.client("s3", endpoint_url=endpoint)
    files = sorted(str(p) for p in folder.iterdir())
    for prefix, chunk in (("litdata", 8_000_000), ("litdata-small", limit // 5)):
        local = tmp / f"{prefix}-local"
        litdata.optimize(fn=_lit_sample, inputs=files, output_dir=str(local), chunk_bytes=chunk,
                         num_workers=1, verbose=False)
        upload_folder(client, local, prefix)
    # litdata's obstore client options lack allow_http, which the loopback http:// endpoint
    # needs (real S3 is https); added here, in place, before its workers start
    downloader._OBSTORE_CLIENT_OPTIONS["allow_http"] = True
    # it warns that a max_cache_size under 25GB may thrash: the 25% row measures exactly that
    logging.getLogger("litdata.streaming.dataset").setLevel(logging.ERROR)
    fetched = _count_litdata_downloads()
    out: list[dict] = []
    for name, prefix, cache, options in (
            ("cold cache", "litdata", tmp / "litdata-cache", {}),
            ("warm cache", "litdata", tmp / "litdata-cache", {}),
            (f"limit 25% ({limit / 2**20:.0f} MiB), {limit // 5 / 2**20:.1f} MiB chunks, "
             "shuffle", "litdata-small", tmp / "litdata-small",
             {"shuffle": True, "max_cache_size": limit})):
        start = fetched()
        t0 = time.perf_counter()
        try:
            dataset = litdata.StreamingDataset(f"s3://{BUCKET}/{prefix}", cache_dir=str(cache),
                                               transform=LitTransform(),
                                               storage_options={"endpoint_url": endpoint},
                                               **options)
            loader = litdata.StreamingDataLoader(dataset, batch_size=batch,
                                                 num_workers=threads,
                                                 multiprocessing_context="fork")
            samples = sum(len(b) for b in loader)
        except Exception as exc:  # noqa: BLE001 - this row fails, the others still run
            out.append({"name": name, "error": one_line(exc)})
            continue
        seconds = time.perf_counter() - t0
        out.append({"name": name, "samples": samples, "seconds": seconds,
                    "fetched": fetched() - start})
        del loader, dataset
    return out


def _count_litdata_downloads():
    """A function giving the bytes litdata downloaded so far: each whole file as it is
    published into its cache (Downloader._publish_file, which its sync and async paths both
    call) and each range read (S3Downloader.download_bytes), counted into shared memory so
    that the loader's forked workers count too."""
    from litdata.streaming.downloader import Downloader, S3Downloader

    count = multiprocessing.Value("q", 0)
    publish, read_range = Downloader._publish_file, S3Downloader.download_bytes

    def counted_publish(self, tmp_path, local_filepath):
        size = os.path.getsize(tmp_path)
        publish(self, tmp_path, local_filepath)
        with count.get_lock():
            count.value += size

    def counted_range(self, remote, offset, length, local):
        data = read_range(self, remote, offset, length, local)
        with count.get_lock():
            count.value += len(data)
        return data

    Downloader._publish_file = counted_publish  # type: ignore[method-assign]
    S3Downloader.download_bytes = counted_range  # type: ignore[method-assign]
    return lambda: count.value


# -- MosaicML streaming (a peer) -----------------------------------------------------------
def streaming_epochs(folder: Path, tmp: Path, endpoint: str, batch: int, threads: int,
                     limit: int, window: int) -> list[dict]:
    """Rows {"name", "samples", "seconds", "fetched"} (bytes) of a cold then a warm epoch of
    MosaicML streaming, then a shuffled one from an empty cache limited to `limit` bytes (its py1e
    shuffle in blocks of `window` samples, the samples of chute's ShardWindows(2)): the JPEGs
    written with MDSWriter in 8 MB shards, uploaded, read with StreamingDataset +
    StreamingDataLoader (--threads workers), the same PIL eval transform as litdata's row.
    Bytes fetched: the files its downloader fetched (counted by wrapping it)."""
    import boto3
    from streaming import MDSWriter, StreamingDataLoader, StreamingDataset
    from streaming.base.util import clean_stale_shared_memory

    client = boto3.client("s3", endpoint_url=endpoint)
    # streaming refuses a cache_limit under 4 shards: the limited run reads a copy in shards
    # of a fifth of the limit
    for prefix, shard in (("mds", 8_000_000), ("mds-small", limit // 5)):
        local = tmp / f"{prefix}-local"
        with MDSWriter(out=str(local), columns={"image": "bytes"}, size_limit=shard) as writer:
            for path in sorted(folder.iterdir()):
                writer.write({"image": path.read_bytes()})
        upload_folder(client, local, prefix)
    os.environ["S3_ENDPOINT_URL"] = endpoint  # where streaming's boto3 client goes

    class Images(StreamingDataset):
        transform = LitTransform()

        def __getitem__(self, index):
            return self.transform(super().__getitem__(index))

    out = []
    for name, prefix, cache, options in (
            ("cold cache", "mds", tmp / "mds-cache", {"shuffle": False}),
            ("warm cache", "mds", tmp / "mds-cache", {"shuffle": False}),
            (f"limit 25% ({limit / 2**20:.0f} MiB), {limit // 5 / 2**20:.1f} MiB shards, "
             "py1e", "mds-small", tmp / "mds-small",
             {"shuffle": True, "cache_limit": limit, "shuffle_algo": "py1e",
              "shuffle_block_size": window})):
        clean_stale_shared_memory()
        fetched = _count_streaming_downloads()
        t0 = time.perf_counter()
        dataset = Images(remote=f"s3://{BUCKET}/{prefix}", local=str(cache), batch_size=batch,
                         **options)
        loader = StreamingDataLoader(dataset, batch_size=batch, num_workers=threads)
        samples = sum(len(b) for b in loader)
        seconds = time.perf_counter() - t0
        out.append({"name": name, "samples": samples, "seconds": seconds, "fetched": fetched()})
        del loader, dataset
    return out


def _count_streaming_downloads():
    """A function giving the bytes of the files streaming downloaded since this call: its
    Stream._download_file wrapped, counting into shared memory, so that the loader's worker
    processes (forked after this) count too."""
    from streaming.base.stream import Stream

    original = getattr(Stream._download_file, "__wrapped__", Stream._download_file)
    count = multiprocessing.Value("q", 0)

    def counted(self, from_basename, to_basename=None):
        local = original(self, from_basename, to_basename)
        with count.get_lock():
            count.value += os.path.getsize(local)
        return local

    counted.__wrapped__ = original  # type: ignore[attr-defined]
    Stream._download_file = counted  # type: ignore[method-assign]
    return lambda: count.value


def peer_rows(module: str, peer: str, rows: list, add, epochs) -> None:
    """The rows of one peer: `epochs()` yields {"name", "samples", "seconds", "fetched"} (or
    {"name", "error"}); a peer that does not import or fails is a row saying "not run" and why.

    Args:
        module: the peer's package, imported to see whether it is installed.
        peer: its row label, with {} for the epoch's name.
        rows: the table's rows ("not run" rows are appended here).
        add: adds a measured row (label, samples, seconds, bytes fetched).
        epochs: runs the peer's epochs.
    """
    try:
        __import__(module)
    except Exception as exc:  # noqa: BLE001 - any import failure: the row says why
        rows.append({"configuration": peer.format("cold cache"), "not_run":
                     f"{module} not importable ({type(exc).__name__}: {str(exc)[:120]}); see "
                     "docs/benchmarks.md for its environment"})
        return
    try:
        for row in epochs():
            if "error" in row:
                rows.append({"configuration": peer.format(row["name"]), "not_run": row["error"]})
            else:
                add(peer.format(row["name"]), row["samples"], row["seconds"], row["fetched"])
    except Exception as exc:  # noqa: BLE001 - a peer's failure is reported, not hidden
        rows.append({"configuration": peer.format("cold cache"), "not_run": one_line(exc)})


def one_line(exc: BaseException) -> str:
    """`exc` as a row's "not run" reason: its type and the first line of its message."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:200] if text else ''}"


def upload_folder(client, local: Path, prefix: str) -> None:
    """Every file under `local` uploaded to BUCKET/`prefix`/, at the same relative path."""
    for path in sorted(local.rglob("*")):
        if path.is_file():
            client.upload_file(str(path), BUCKET, f"{prefix}/{path.relative_to(local)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, default=2000, help="JPEGs in the dataset")
    parser.add_argument("--src", type=Path, default=DEFAULT_SRC, help="where the JPEGs come from")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--shard-size", default="8MiB")
    parser.add_argument("--json", type=Path, help="also write the rows to this file")
    args = parser.parse_args()
    if not args.src.is_dir():
        sys.exit(f"{args.src}: no such folder (see ../shared/data/README.md); pass --src")
    try:
        from moto.server import ThreadedMotoServer  # noqa: F401
    except ImportError:
        sys.exit("the loopback S3 server needs moto: pip install 'moto[server]'")
    sys.path.insert(0, str(ROOT))
    from tests._s3 import S3Server

    torch.set_num_threads(1)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's per-request log lines
    server = S3Server()
    server.create_bucket(BUCKET)
    for var in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3"):
        os.environ.pop(var, None)
    os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing",
                      AWS_REGION="us-east-1", AWS_DEFAULT_REGION="us-east-1",
                      AWS_ENDPOINT_URL=server.endpoint,
                      CHUTE_CACHE_WAIT_SECONDS="60")  # a cache that cannot fit fails soon
    counter = Downloads()
    rows: list[dict] = []
    try:
        with tempfile.TemporaryDirectory(prefix="chute-bench-remote-") as name:
            tmp = Path(name)
            os.environ["AWS_CONFIG_FILE"] = str(tmp / "no-aws-config")
            os.environ["AWS_SHARED_CREDENTIALS_FILE"] = str(tmp / "no-aws-credentials")
            folder = image_folder(args.src, args.images, tmp / "images")
            options = ConvertOptions(shard_size=args.shard_size, progress=False)
            local = tmp / "local.chute"
            url = f"s3://{BUCKET}/chute"
            convert_imagefolder(folder, local, options)
            convert_imagefolder(folder, url, options)
            size = folder_bytes(local)
            opened = open_dataset(local)
            shards = len(opened.shard_starts) - 1
            opened.close()
            counter.take()

            def add(name: str, samples: int, seconds: float, downloaded: int | None) -> None:
                rows.append({"configuration": name, "samples": samples, "seconds": seconds,
                             "samples_per_s": samples / seconds, "bytes_downloaded": downloaded})

            for augment in ("eval", "train"):  # warm-up, untimed: kernels compiled, files read
                chute_epoch(str(local), args.batch, args.threads, augment=augment)
            n, s = chute_epoch(str(local), args.batch, args.threads, augment="eval")
            add("(a) chute, local dataset, eval", n, s, None)
            cache = tmp / "cache"
            n, s = chute_epoch(url, args.batch, args.threads, augment="eval", cache_dir=cache)
            add("(b) chute, s3, cold cache, eval", n, s, counter.take())
            n, s = chute_epoch(url, args.batch, args.threads, augment="eval", cache_dir=cache)
            add("(c) chute, s3, warm cache, eval", n, s, counter.take())
            limit = size // 4
            largest = max(p.stat().st_size for p in local.rglob("*.bin"))
            if limit < 2 * largest:
                sys.exit(f"a quarter of the dataset ({limit} bytes) holds fewer than two shards "
                         f"({largest} bytes each): pass more --images or a smaller --shard-size")
            n, s = chute_epoch(url, args.batch, args.threads, augment="train",
                               cache_dir=tmp / "small-cache", cache_limit=limit,
                               order=ShardWindows(shards=2))
            add(f"(d) chute, s3, cache limit 25% ({limit / 2**20:.0f} MiB), train, "
                "ShardWindows(2)", n, s, counter.take())
            peer_rows("litdata", "(e) litdata, s3, {}, PIL eval", rows, add,
                      lambda: litdata_epochs(folder, tmp, server.endpoint, args.batch,
                                             args.threads, limit))
            peer_rows("streaming", "(f) MosaicML streaming, s3, {}, PIL eval", rows, add,
                      lambda: streaming_epochs(folder, tmp, server.endpoint, args.batch,
                                               args.threads, limit,
                                               window=2 * args.images // shards))
    finally:
        server.stop()
    warm = next(r["samples_per_s"] for r in rows if r["configuration"].startswith("(c)"))
    print(f"{args.images} JPEGs from {args.src}, {size / 2**20:.1f} MiB in {shards} shards of "
          f"<= {args.shard_size}; batch {args.batch}, {args.threads} threads, cpu backend, 224 px "
          "float32; moto S3 on loopback; one epoch each")
    print(f"{'configuration':<66} {'samples/s':>9} {'MiB fetched':>11} {'(c) / this':>10}")
    for row in rows:
        if "not_run" in row:
            print(f"{row['configuration']:<66} not run: {row['not_run']}")
            continue
        got = row["bytes_downloaded"]
        fetched = "-" if got is None else f"{got / 2**20:.1f}"
        print(f"{row['configuration']:<66} {row['samples_per_s']:9.1f} {fetched:>11} "
              f"{warm / row['samples_per_s']:10.2f}")
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()

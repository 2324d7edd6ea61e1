"""One rank of the audio DDP test: segments in duration batches, rank/world from gloo."""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.distributed as dist

from chute.pipelines import AudioOptions, MaxDuration, Pipeline


def run(rank: int, world_size: int, dataset: str, workdir: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{workdir}/rendezvous", rank=rank,
                            world_size=world_size)
    try:
        pipe = Pipeline(dataset, batching=MaxDuration(2.0, max_samples=4),
                        fields={"audio": AudioOptions(unit="segment", sample_rate=8000)})
        ids, frames = [], []
        for batch in pipe:
            ids.extend(batch["index"].tolist())
            frames.append(int(batch["audio_lengths"].sum()))
            dist.all_reduce(torch.ones(1))  # unequal batch counts would hang or fail here
        report = {"world_size": pipe.world_size, "batches": len(pipe), "ids": ids,
                  "frames": frames}
        Path(workdir, f"rank{rank}.json").write_text(json.dumps(report))
        pipe.close()
    finally:
        dist.destroy_process_group()


def run_eval(rank: int, world_size: int, dataset: str, workdir: str, seconds: float) -> None:
    """An eval pass (augment="eval": no shuffle of the tail away) with MaxDuration(seconds):
    the segments this rank got, and its batch count."""
    dist.init_process_group("gloo", init_method=f"file://{workdir}/rendezvous", rank=rank,
                            world_size=world_size)
    try:
        pipe = Pipeline(dataset, batching=MaxDuration(seconds, max_samples=4), augment="eval",
                        fields={"audio": AudioOptions(unit="segment", sample_rate=8000)})
        ids, segments = [], []
        for batch in pipe:
            ids.extend(batch["index"].tolist())
            segments.extend([s["key"], s["index"]] for s in batch["audio_segment"])
        report = {"batches": len(pipe), "ids": ids, "segments": segments}
        Path(workdir, f"rank{rank}.json").write_text(json.dumps(report))
        pipe.close()
    finally:
        dist.destroy_process_group()

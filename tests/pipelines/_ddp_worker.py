"""One rank of the DDP test: iterate an epoch with rank/world size taken from torch.distributed."""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.distributed as dist

from chute.pipelines import ImageOptions, Pipeline


def run(rank: int, world_size: int, dataset: str, workdir: str, augment: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{workdir}/rendezvous", rank=rank,
                            world_size=world_size)
    try:
        image = ImageOptions(size=16, backend="cpu", backend_options={"threads": 1})
        pipe = Pipeline(dataset, 4, fields={"image": image, "label": None}, augment=augment,
                        device="cpu")
        ids = []
        for batch in pipe:
            ids.extend(batch["index"].tolist())
            # a collective per batch: unequal batch counts would hang or fail here
            dist.all_reduce(torch.ones(1))
        report = {"rank": pipe.rank, "world_size": pipe.world_size, "batches": len(pipe),
                  "ids": ids}
        Path(workdir, f"rank{rank}.json").write_text(json.dumps(report))
        pipe.close()
    finally:
        dist.destroy_process_group()

"""One rank of the zarr DDP test: an epoch of a zarr group with a lookup, ids and values saved."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch.distributed as dist

from chute.pipelines import Lookup, Pipeline
from chute.readers import open_dataset


def run(rank: int, world_size: int, store: str, workdir: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{workdir}/rendezvous", rank=rank,
                            world_size=world_size)
    try:
        with Pipeline(open_dataset(store, sample_array="base_frames"), 8,
                      fields={"base_frames": None, "clip_emb": Lookup("segment_to_video")},
                      device="cpu", augment="eval") as pipe:
            # a batch's tensors are reused two batches later: copy them out
            batches = [{k: v.clone() for k, v in b.items()} for b in pipe]
            np.savez(Path(workdir, f"rank{rank}.npz"),
                     ids=np.concatenate([b["index"].numpy() for b in batches]),
                     frames=np.concatenate([b["base_frames"].numpy() for b in batches]),
                     emb=np.concatenate([b["clip_emb"].numpy() for b in batches]))
    finally:
        dist.destroy_process_group()

"""One rank of the elastic bucket resume test: run `steps` steps of a bucketed epoch (all of
it when None) from an optional saved state, in lockstep with the other ranks; save the ids,
each step's clip shape and the state."""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.distributed as dist

from chute.pipelines import Buckets, Pipeline, VideoOptions

CONFIG = {"16x16": {2: (1.0, 1)}, "32x32": {4: (1.0, 1)}}


def run(rank: int, world_size: int, dataset: str, workdir: str, phase: str,
        steps: int | None, state_file: str | None) -> None:
    dist.init_process_group("gloo", init_method=f"file://{workdir}/rendezvous-{phase}",
                            rank=rank, world_size=world_size)
    try:
        with Pipeline(dataset, None, batching=Buckets(CONFIG), device="cpu", seed=11,
                      fields={"video": VideoOptions(frame_interval=2, threads=1)}) as pipe:
            if state_file is not None:
                pipe.load_state_dict(json.loads(Path(state_file).read_text()))
            ids, shapes = [], []
            for k, batch in enumerate(pipe):
                shape = torch.tensor(batch["video"].shape[2:])
                every = [torch.zeros_like(shape) for _ in range(world_size)]
                dist.all_gather(every, shape)  # a collective per step: lockstep, same bucket
                shapes.append([s.tolist() for s in every])
                ids.extend(batch["index"].tolist())
                if steps is not None and k + 1 == steps:
                    break
            report = {"ids": ids, "shapes": shapes, "state": pipe.state_dict(),
                      "world_size": pipe.world_size}
        Path(workdir, f"{phase}-rank{rank}.json").write_text(json.dumps(report))
    finally:
        dist.destroy_process_group()

"""Train a small CNN with DDP on a chute dataset, checkpointing and resuming the Pipeline state.

    torchrun --nproc_per_node=2 examples/train_ddp.py DATASET --steps 20 --checkpoint ckpt.pt
    torchrun --nproc_per_node=2 examples/train_ddp.py DATASET --steps 40 --checkpoint ckpt.pt \
        --resume

The checkpoint holds the model, the optimiser, the step and `pipe.state_dict()`; resuming
continues with exactly the batches an uninterrupted run would have seen next (also with another
number of processes). Runs on CPU (gloo) or GPUs (nccl).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch
import torch.distributed as dist
from torch import nn

from chute import ImageOptions, Pipeline


def tiny_cnn(classes: int) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, classes),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset")
    parser.add_argument("--steps", type=int, default=20, help="stop after this many steps")
    parser.add_argument("--batch-size", type=int, default=8, help="per process")
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--classes", type=int, default=1000)
    parser.add_argument("--checkpoint", default="checkpoint.pt")
    parser.add_argument("--save-every", type=int, default=5)
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--trace", help="rank 0 appends one JSON line per step here")
    args = parser.parse_args()

    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank = dist.get_rank()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else "cpu"
    torch.manual_seed(0)  # same initial weights on every rank
    model = nn.parallel.DistributedDataParallel(tiny_cnn(args.classes).to(device))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    # rank and world size come from the process group
    fields = {"image": ImageOptions(size=args.image_size, dtype="float32"), "label": None}
    pipe = Pipeline(args.dataset, args.batch_size, fields=fields, augment="train",
                    device=device)
    step = 0
    if args.resume:
        ckpt = torch.load(args.checkpoint, map_location=device, weights_only=False)
        model.module.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        pipe.load_state_dict(ckpt["pipeline"])
        step = ckpt["step"]
    loss_fn = nn.CrossEntropyLoss()
    epoch = pipe.epoch
    while step < args.steps:
        pipe.set_epoch(epoch)  # after load_state_dict, the loaded epoch continues where it stopped
        for batch in pipe:
            loss = loss_fn(model(batch["image"]), batch["label"] % args.classes)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            if rank == 0 and args.trace:
                with open(args.trace, "a") as f:
                    f.write(json.dumps({"step": step, "epoch": epoch, "loss": loss.item(),
                                        "ids": batch["index"].tolist()}) + "\n")
            if step % args.save_every == 0 and rank == 0:
                # state after this step: the batches delivered so far are consumed
                torch.save({"model": model.module.state_dict(), "step": step,
                            "optimizer": optimizer.state_dict(),
                            "pipeline": pipe.state_dict()}, args.checkpoint)
            if step >= args.steps:
                break
        epoch += 1
    if rank == 0:
        print(f"trained {step} steps; pipeline state {pipe.state_dict()}; stats {pipe.stats}")
    pipe.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    # Leave without finalizing the interpreter: a DDP model keeps its gloo group (and its worker
    # threads) alive past destroy_process_group, and a worker still releasing the last
    # backward's work then aborts the exiting process (docs/design.md, "DDP exit").
    # Everything is written and closed by now.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)

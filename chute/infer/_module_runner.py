"""A torch.nn.Module as a stage: stack the batch's inputs, run forward on the replica's device
without autograd, hand back the outputs with a leading batch dimension (on that device: the
replica sends them on by CUDA IPC or copies them to the CPU)."""

from __future__ import annotations

import torch

__all__ = ["ModuleRunner"]


class ModuleRunner:
    """Runs `module` on batches of same-shaped tensors.

    Args:
        module: the model (put in eval mode and moved to `device`).
        device: "cpu" or "cuda:N".
    """

    def __init__(self, module: torch.nn.Module, device: str = "cpu"):
        self.device = torch.device(device)
        self.module = module.to(self.device).eval()

    def __call__(self, inputs: list) -> torch.Tensor:
        x = torch.stack([torch.as_tensor(t) for t in inputs]).to(self.device, non_blocking=True)
        with torch.no_grad():
            return self.module(x)

"""A small (2+1)D convolutional video classifier for `chute infer` benchmarks: no download, random
weights from a fixed seed, clips of [3, 16, 112, 112] in [-1, 1] (what `VideoClipLoader` gives).

Each (2+1)D block factors a 3-D convolution into a spatial (1 x k x k) one and a temporal
(k x 1 x 1) one with a nonlinearity between them, as in R(2+1)D.

    from video_classifier import build
    model = build(seed=0)                     # the same weights on every call
    logits = model(torch.zeros(2, 3, 16, 112, 112))   # [2, 400]
    logits = model(torch.zeros(2, 10, 3, 8, 112, 112))   # 10 clips per video, averaged: [2, 400]
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["VideoClassifier", "build"]


def _block(cin: int, cout: int, mid: int, stride: tuple[int, int, int]) -> nn.Sequential:
    st, ss = stride[0], stride[1]
    return nn.Sequential(
        nn.Conv3d(cin, mid, (1, 3, 3), stride=(1, ss, ss), padding=(0, 1, 1), bias=False),
        nn.BatchNorm3d(mid), nn.ReLU(inplace=True),
        nn.Conv3d(mid, cout, (3, 1, 1), stride=(st, 1, 1), padding=(1, 0, 0), bias=False),
        nn.BatchNorm3d(cout), nn.ReLU(inplace=True))


class VideoClassifier(nn.Module):
    """A stem and four (2+1)D blocks (channels 32, 64, 128, 256), global pooling, a linear head.

    Args:
        num_classes: outputs per clip.
    """

    def __init__(self, num_classes: int = 400):
        super().__init__()
        self.features = nn.Sequential(
            _block(3, 32, 24, (1, 2, 2)),     # 16x56x56
            _block(32, 64, 48, (2, 2, 2)),    # 8x28x28
            _block(64, 128, 96, (2, 2, 2)),   # 4x14x14
            _block(128, 256, 192, (2, 2, 2)),  # 2x7x7
        )
        self.head = nn.Linear(256, num_classes)

    def forward(self, clips: torch.Tensor) -> torch.Tensor:
        if clips.dim() == 6:  # [B, N, 3, T, H, W]: N clips per video, their logits averaged
            b, n = clips.shape[:2]
            return self.forward(clips.flatten(0, 1)).view(b, n, -1).mean(dim=1)
        x = self.features(clips)
        return self.head(x.mean(dim=(2, 3, 4)))


def build(seed: int = 0, num_classes: int = 400, device: str = "cpu") -> VideoClassifier:
    """The reference model with weights drawn from `seed`, in eval mode.

    Args:
        seed: seed of the random weights (the same seed gives the same model).
        num_classes: outputs per clip.
        device: where to put it.
    """
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        model = VideoClassifier(num_classes)
    finally:
        torch.random.set_rng_state(generator_state)
    return model.to(device).eval()

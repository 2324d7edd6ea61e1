"""Per-batch augmentation on the output device with `Pipeline(transform=...)`.

    python examples/batch_transform.py DATASET [--device cuda]

The transform gets each batch dict after decoding, cropping, normalising and the dtype cast,
on the Pipeline's device, and returns the batch to deliver. Here it is brightness jitter and
mixup in plain torch; torchvision.transforms.v2 or kornia work the same way, e.g.

    jitter = torchvision.transforms.v2.ColorJitter(0.4, 0.4, 0.4)
    Pipeline(..., fields={"image": ImageOptions(dtype="float32"), "label": None},
             transform=lambda b: {**b, "image": jitter(b["image"])})

(for a ColorJitter on [0, 1] pixels, use ImageOptions(dtype="uint8") and convert inside the
transform).
"""

from __future__ import annotations

import argparse

import torch

from chute import ImageOptions, Pipeline


class JitterAndMixup:
    """Brightness jitter per sample, then mixup of the batch with its reverse; adds
    "mix_weight" (the weight of the sample's own label) to the batch."""

    def __init__(self, brightness: float = 0.2, alpha: float = 0.2, seed: int = 0):
        self.brightness, self.alpha = brightness, alpha
        self.generator = torch.Generator().manual_seed(seed)

    def __call__(self, batch: dict) -> dict:
        image = batch["image"]
        n = image.shape[0]
        shift = (torch.rand(n, generator=self.generator) * 2 - 1) * self.brightness
        image = image + shift.to(image.device, image.dtype).view(n, 1, 1, 1)
        lam = torch.distributions.Beta(self.alpha, self.alpha).sample((n,)).clamp(0, 1)
        lam = lam.to(image.device, image.dtype).view(n, 1, 1, 1)
        image = lam * image + (1 - lam) * image.flip(0)
        return {**batch, "image": image, "mix_weight": lam.view(n)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch-size", type=int, default=16)
    args = parser.parse_args()
    fields = {"image": ImageOptions(size=64, dtype="float32"), "label": None}
    with Pipeline(args.dataset, args.batch_size, fields=fields, device=args.device,
                  transform=JitterAndMixup()) as pipe:
        batch = next(iter(pipe))
        print({k: tuple(v.shape) for k, v in batch.items() if torch.is_tensor(v)})


if __name__ == "__main__":
    main()

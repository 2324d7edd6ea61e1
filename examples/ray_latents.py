"""Precompute latents on Ray, write them as a chute dataset, train from them with a Pipeline.

    python examples/ray_latents.py IMAGES.chute LATENTS.chute [--size 64] [--ray-address auto]

IMAGES.chute is an image dataset (`chute convert imagefolder ...`); LATENTS.chute gets one
sample per image: "latent" (float16 [4, size/8, size/8]) and "label". The encoder here is a
small fixed convolution standing in for a VAE; on a GPU cluster, pass
`num_gpus=1, concurrency=N` to `map_batches` and load the real encoder in `Encoder.__init__`.
chute.ray reads the images one block per shard and writes the latents in the images' order
(docs/ray.md).
"""

from __future__ import annotations

import argparse
import io

import numpy as np
import torch


class Encoder:
    """JPEG bytes -> latents: decode, resize to `size` square, a fixed strided convolution.
    A class, so Ray builds it once per worker (where a real encoder loads its weights)."""

    def __init__(self, size: int = 64):
        self.size = size
        generator = torch.Generator().manual_seed(0)
        self.net = torch.nn.Sequential(
            torch.nn.Conv2d(3, 16, 4, stride=4), torch.nn.GELU(),
            torch.nn.Conv2d(16, 4, 2, stride=2)).eval()
        for parameter in self.net.parameters():
            parameter.data = torch.randn(parameter.shape, generator=generator) * 0.1

    def pixels(self, data: bytes) -> np.ndarray:
        from PIL import Image

        with Image.open(io.BytesIO(data)) as image:
            image = image.convert("RGB").resize((self.size, self.size), Image.BILINEAR)
            return np.asarray(image, np.float32).transpose(2, 0, 1) / 127.5 - 1

    @torch.no_grad()
    def __call__(self, batch: dict) -> dict:
        images = torch.from_numpy(np.stack([self.pixels(d) for d in batch["image"]]))
        latents = self.net(images).to(torch.float16).numpy()
        return {"latent": latents, "label": np.asarray(batch["label"], np.int64)}


def precompute(images: str, latents: str, *, size: int = 64, overwrite: bool = False):
    """Write the latents of every image of `images` as the chute dataset `latents`."""
    import chute.ray

    source = chute.ray.read_dataset(images, fields=["image", "label"])
    encoded = source.map_batches(Encoder, fn_constructor_kwargs={"size": size},
                                 batch_size=32, concurrency=1)
    return chute.ray.write_dataset(encoded, latents, shard_size="64MiB", overwrite=overwrite)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("images")
    parser.add_argument("latents")
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--ray-address", default=None)
    parser.add_argument("--overwrite", action="store_true")
    args = parser.parse_args()
    if args.ray_address:
        import ray

        ray.init(address=args.ray_address)
    written = precompute(args.images, args.latents, size=args.size, overwrite=args.overwrite)
    print(f"wrote {len(written)} latents to {args.latents}")

    from chute import ArrayOptions, Pipeline

    pipe = Pipeline(args.latents, 16, fields={"latent": ArrayOptions(dtype="float32"),
                                              "label": None})
    for batch in pipe:
        print("first batch:", tuple(batch["latent"].shape), batch["label"][:4].tolist())
        break
    pipe.close()


if __name__ == "__main__":
    main()

"""Train a small CNN with PyTorch Lightning on a chute dataset.

    python examples/train_lightning.py DATASET --epochs 3
    python examples/train_lightning.py DATASET --epochs 3 --loader dataloader

The LightningDataModule returns the chute Pipeline itself (`--loader pipeline`) or the same
Pipeline as a `torch.utils.data.DataLoader` (`--loader dataloader`, `pipe.as_dataloader()`,
for code that insists on one). Either way every epoch has `len(pipe)` batches, Lightning's
`set_epoch` calls reach the Pipeline, and the DataModule's `state_dict` puts the Pipeline's
position in Lightning checkpoints. Runs on CPU or one GPU; for several GPUs, launch with
torchrun and the Pipeline partitions the data by rank.
"""

from __future__ import annotations

import argparse

import pytorch_lightning as pl
import torch
from torch import nn

from chute import ImageOptions, Pipeline


class ChuteData(pl.LightningDataModule):
    def __init__(self, dataset: str, batch_size: int, image_size: int, loader: str):
        super().__init__()
        self.dataset, self.batch_size, self.image_size = dataset, batch_size, image_size
        self.loader = loader
        self.pipe: Pipeline | None = None

    def setup(self, stage: str) -> None:
        if self.pipe is None:  # rank and world size come from the process group, if any
            image = ImageOptions(size=self.image_size, dtype="float32")
            self.pipe = Pipeline(self.dataset, self.batch_size,
                                 fields={"image": image, "label": None}, augment="train",
                                 device="cpu")

    def train_dataloader(self):
        return self.pipe if self.loader == "pipeline" else self.pipe.as_dataloader()

    def state_dict(self) -> dict:
        return {} if self.pipe is None else {"pipeline": self.pipe.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        if "pipeline" in state:
            self.setup("fit")
            self.pipe.load_state_dict(state["pipeline"])

    def teardown(self, stage: str) -> None:
        if self.pipe is not None:
            self.pipe.close()
            self.pipe = None


class TinyCNN(pl.LightningModule):
    def __init__(self, classes: int):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, classes))
        self.classes = classes
        self.batches_per_epoch: list[int] = []

    def on_train_epoch_start(self) -> None:
        self.batches_per_epoch.append(0)

    def training_step(self, batch, batch_idx):
        self.batches_per_epoch[-1] += 1
        logits = self.net(batch["image"])
        return nn.functional.cross_entropy(logits, batch["label"] % self.classes)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def train(dataset: str, epochs: int = 3, batch_size: int = 8, image_size: int = 32,
          loader: str = "pipeline", classes: int = 10) -> list[int]:
    """Fit for `epochs` epochs; returns the number of batches each epoch trained on."""
    torch.manual_seed(0)
    data = ChuteData(dataset, batch_size, image_size, loader)
    model = TinyCNN(classes)
    trainer = pl.Trainer(max_epochs=epochs, accelerator="cpu", devices=1, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False)
    trainer.fit(model, datamodule=data)
    return model.batches_per_epoch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--loader", choices=("pipeline", "dataloader"), default="pipeline")
    args = parser.parse_args()
    counts = train(args.dataset, args.epochs, args.batch_size, args.image_size, args.loader)
    print(f"batches per epoch: {counts}")


if __name__ == "__main__":
    main()

"""Default normalisation constants, shared by every backend (the lowest layer imports them)."""

__all__ = ["IMAGENET_MEAN", "IMAGENET_STD"]

# Per-channel RGB mean and std of ImageNet, in [0, 1] units: out = (pixel / 255 - mean) / std.
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

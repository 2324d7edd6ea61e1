"""Default normalisation constants, shared by every backend (the lowest layer imports them)."""

__all__ = ["IMAGENET_MEAN", "IMAGENET_STD", "scaled_mean_std"]

# Per-channel RGB mean and std of ImageNet, in [0, 1] units: out = (pixel / 255 - mean) / std.
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def scaled_mean_std(mean, std):
    """(255*mean, 255*std) as float32 [3] each, the constants every backend normalises with:
    out = (v - 255*mean) / (255*std). Products in float64, then rounded once to float32, so the
    CPU and GPU paths use the very same constants. None means the ImageNet defaults."""
    import numpy as np

    mean = IMAGENET_MEAN if mean is None else mean
    std = IMAGENET_STD if std is None else std
    mean255 = (255.0 * np.asarray(mean, dtype=np.float64).reshape(-1)).astype(np.float32)
    std255 = (255.0 * np.asarray(std, dtype=np.float64).reshape(-1)).astype(np.float32)
    if mean255.shape != (3,) or std255.shape != (3,) or not np.all(std255 > 0):
        raise ValueError(f"mean and std must be 3 values each with std > 0, got {mean}, {std}")
    return mean255, std255

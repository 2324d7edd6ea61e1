import sys

import torch

from tests.infer.conftest import EXAMPLES


def test_the_reference_model_classifies_16x112x112_clips_with_seeded_weights():
    sys.path.insert(0, str(EXAMPLES))
    try:
        from video_classifier import build
    finally:
        sys.path.remove(str(EXAMPLES))
    clips = torch.rand(2, 3, 16, 112, 112, generator=torch.Generator().manual_seed(0)) * 2 - 1
    a, b, c = build(seed=0), build(seed=0), build(seed=1)
    with torch.no_grad():
        out = a(clips)
        assert out.shape == (2, 400) and torch.isfinite(out).all()
        torch.testing.assert_close(b(clips), out)
        assert not torch.allclose(c(clips), out)
        # eval mode: a clip's logits do not depend on the rest of its batch
        torch.testing.assert_close(a(clips[1:]), out[1:], rtol=1e-4, atol=1e-4)
    assert not a.training


def test_the_reference_model_averages_the_logits_of_several_clips_per_video():
    sys.path.insert(0, str(EXAMPLES))
    try:
        from video_classifier import build
    finally:
        sys.path.remove(str(EXAMPLES))
    clips = torch.rand(2, 3, 3, 8, 32, 32, generator=torch.Generator().manual_seed(1)) * 2 - 1
    model = build(seed=0)
    with torch.no_grad():
        out = model(clips)  # [videos, clips, 3, T, H, W]
        assert out.shape == (2, 400)
        for v in range(2):
            torch.testing.assert_close(out[v], model(clips[v]).mean(dim=0), rtol=1e-4,
                                       atol=1e-5)

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

import pytest

from chute.readers import jpeg_is_complete
from chute.readers._images import UnreadableImage, prepare_image

from ._images import jpeg_bytes, png_bytes


def test_jpeg_stored_unchanged_with_header_size():
    raw = jpeg_bytes(37, 23)
    prepared = prepare_image(raw)
    assert prepared.data is raw and prepared.action == "stored"
    assert (prepared.height, prepared.width) == (23, 37)


def test_png_transcoded_to_jpeg():
    prepared = prepare_image(png_bytes(21, 17))
    assert prepared.action == "transcoded" and prepared.data[:3] == b"\xff\xd8\xff"
    assert (prepared.height, prepared.width) == (17, 21) and jpeg_is_complete(prepared.data)


def test_max_side_downscales():
    prepared = prepare_image(jpeg_bytes(200, 100), max_side=50, quality=80)
    assert prepared.action == "resized" and (prepared.height, prepared.width) == (25, 50)
    small = prepare_image(jpeg_bytes(40, 20), max_side=50)
    assert small.action == "stored"


@pytest.mark.parametrize("cut", [2, 200, 0.5, -2, -1])
def test_truncated_jpeg_rejected(cut):
    raw = jpeg_bytes(64, 48, seed=5)
    end = int(len(raw) * cut) if isinstance(cut, float) else cut
    assert not jpeg_is_complete(raw[:end])
    with pytest.raises(UnreadableImage):
        prepare_image(raw[:end])


def test_eoi_inside_exif_thumbnail_does_not_count():
    """A JPEG whose only EOI sits in an APP1 segment (like an EXIF thumbnail) is truncated."""
    raw = jpeg_bytes(64, 48, seed=6)
    thumb = jpeg_bytes(8, 8, seed=7)
    app1 = b"\xff\xe1" + (len(thumb) + 2).to_bytes(2, "big") + thumb
    with_thumb = raw[:2] + app1 + raw[2:]
    assert jpeg_is_complete(with_thumb)
    assert not jpeg_is_complete(with_thumb[: len(with_thumb) // 2])


def test_foreign_bytes_rejected():
    with pytest.raises(UnreadableImage):
        prepare_image(b"GIF89a but not really" * 5)

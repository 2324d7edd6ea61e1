import pytest

from chute.convert import jpeg_is_complete
from chute.convert._images import UnreadableImage, prepare_image
from tests.readers._images import jpeg_bytes, lossless_jpeg_bytes, png_bytes


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


@pytest.mark.parametrize(("raw", "reason"), [
    (b"", "empty file (0 bytes)"),
    (b"plain text, not an image\n", "not an image format Pillow can read (the file starts with "
                                    "b'plain text, '); check the file or remove it"),
])
def test_unreadable_file_reason_says_what_is_wrong(raw, reason):
    """The reason (skipped.tsv, --strict) says what is wrong, without Pillow's object repr."""
    with pytest.raises(UnreadableImage) as caught:
        prepare_image(raw)
    assert str(caught.value) == reason


def test_12_bit_jpeg_reason_names_the_precision():
    raw = bytearray(jpeg_bytes(16, 8))
    sof = raw.index(b"\xff\xc0")
    raw[sof + 4] = 12  # the frame header's sample precision
    with pytest.raises(UnreadableImage, match=r"^12-bit JPEG .* re-encode it as an 8-bit JPEG"):
        prepare_image(bytes(raw))


def test_mpo_stored_unchanged_and_decodes_as_its_first_picture():
    """Many cameras write MPO (a JPEG followed by more pictures): it is a JPEG, stored as is,
    and the CPU decoder reads the picture Pillow shows."""
    import io

    import numpy as np
    from PIL import Image

    from chute.fallbacks import decode_batch
    from tests._media import noise_image

    first, second = noise_image(24, 40, 1), noise_image(24, 40, 2)
    out = io.BytesIO()
    Image.fromarray(first).save(out, "MPO", save_all=True,
                                append_images=[Image.fromarray(second)], quality=90)
    raw = out.getvalue()
    prepared = prepare_image(raw)
    assert prepared.action == "stored" and prepared.data is raw
    assert (prepared.height, prepared.width) == (24, 40)
    pixels = np.zeros((1, 24, 40, 3), np.uint8)
    status = decode_batch(np.frombuffer(raw, np.uint8), [0, len(raw)], [[0.0, 0.0, 24.0, 40.0]],
                          [False], pixels, layout="NHWC", dct_scaling=False)
    assert status[0] == 0
    assert np.array_equal(pixels[0], np.asarray(Image.open(io.BytesIO(raw)).convert("RGB")))


def test_lossless_jpeg_transcoded():
    """A lossless JPEG Pillow decodes (but libjpeg-turbo's DCT decoder does not) is transcoded
    like any other format, not refused."""
    import io

    import numpy as np
    from PIL import Image

    gradient = np.add.outer(np.arange(20) * 6, np.arange(30) * 4).astype(np.uint8)
    prepared = prepare_image(lossless_jpeg_bytes(gradient))
    assert prepared.action == "transcoded" and (prepared.height, prepared.width) == (20, 30)
    decoded = np.asarray(Image.open(io.BytesIO(prepared.data)).convert("L"), np.int16)
    assert np.abs(decoded - gradient).max() <= 3


def test_max_side_downscales_16_bit_png_and_lossless_jpeg():
    """--max-side reads what a plain convert reads: a 16-bit grey PNG (Pillow resizes no such
    mode) and a lossless JPEG (which has no DCT for a scaled draft) are downscaled, not refused."""
    import io

    import numpy as np
    from PIL import Image

    # 6x smaller: Pillow's thumbnail first reduces (or drafts a JPEG) by 2x or more
    grey16 = np.add.outer(np.arange(120), np.arange(180)).astype(np.uint16) * 200
    png16 = io.BytesIO()
    Image.fromarray(grey16).save(png16, "PNG")
    gradient = np.add.outer(np.arange(120), np.arange(180) // 2).astype(np.uint8)
    for raw in (png16.getvalue(), lossless_jpeg_bytes(gradient)):
        plain = Image.open(io.BytesIO(prepare_image(raw).data)).convert("RGB")
        prepared = prepare_image(raw, max_side=30)
        assert prepared.action == "resized" and (prepared.height, prepared.width) == (20, 30)
        small = np.asarray(Image.open(io.BytesIO(prepared.data)).convert("RGB"), np.int16)
        expected = np.asarray(plain.resize((30, 20), Image.Resampling.LANCZOS), np.int16)
        assert np.abs(small - expected).mean() <= 1.5


def test_a_16_bit_grey_png_is_transcoded_scaled_to_8_bits_not_clipped_white():
    """Pillow's convert("RGB") clips 16-bit grey (PNG, TIFF: depth maps, scans) at 255: such
    an image was stored as an all-white JPEG."""
    import io

    import numpy as np
    from PIL import Image

    grey16 = (np.add.outer(np.arange(40), np.arange(60)) * 600).astype(np.uint16)
    png16 = io.BytesIO()
    Image.fromarray(grey16).save(png16, "PNG")
    prepared = prepare_image(png16.getvalue())
    assert prepared.action == "transcoded"
    stored = np.asarray(Image.open(io.BytesIO(prepared.data)).convert("L"), np.int16)
    assert np.abs(stored - (grey16 >> 8)).max() <= 3

"""Small test images made at test time: good JPEGs, a PNG, truncated and foreign files."""

from __future__ import annotations

from pathlib import Path

from tests._media import encode, noise_image


def jpeg_bytes(width: int, height: int, seed: int = 0, quality: int = 90) -> bytes:
    """A noise JPEG of width x height (the shared test media generator)."""
    return encode(noise_image(height, width, seed), quality=quality)


def png_bytes(width: int, height: int, seed: int = 0) -> bytes:
    """A noise RGBA PNG of width x height."""
    return encode(noise_image(height, width, seed, channels=4), "PNG")


def make_imagefolder(root: Path, *, bad: bool = True) -> dict[str, dict]:
    """root/<class>/<file>; returns {relative path: {"label", "bytes", "size", "ok", "kind"}}.
    With `bad`, adds a JPEG cut in half, a JPEG missing only its EOI marker and a foreign file."""
    files = {}

    def put(rel: str, data: bytes, label: int, size, ok: bool, kind: str):
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        files[rel] = {"label": label, "bytes": data, "size": size, "ok": ok, "kind": kind}

    for k in range(4):
        put(f"cat/c{k}.jpg", jpeg_bytes(40 + 8 * k, 30 + k, seed=k), 0, (30 + k, 40 + 8 * k),
            True, "stored")
    for k in range(3):
        put(f"dog/sub/d{k}.JPEG", jpeg_bytes(33, 50 + k, seed=10 + k), 1, (50 + k, 33), True,
            "stored")
    put("dog/p.png", png_bytes(21, 17), 1, (17, 21), True, "transcoded")
    (root / "dog" / "notes.txt").write_text("not an image, ignored by extension")
    if bad:
        whole = jpeg_bytes(64, 48, seed=99)
        put("cat/half.jpg", whole[: len(whole) // 2], 0, None, False, "bad")
        put("dog/no_eoi.jpg", whole[:-2], 1, None, False, "bad")
        put("dog/foreign.jpg", b"this is not a JPEG at all" * 10, 1, None, False, "bad")
    return files


def converted_imagefolder(tmp_path: Path, shard_size: str = "3KB") -> Path:
    """The good images of `make_imagefolder`, converted with the CLI into several shards."""
    from chute.cli import main

    src = tmp_path / "src"
    make_imagefolder(src, bad=False)
    dst = tmp_path / "out.chute"
    assert main(["convert", "imagefolder", str(src), str(dst), "--shard-size", shard_size,
                 "--workers", "1", "--no-progress"]) == 0
    return dst


def lossless_jpeg_bytes(pixels) -> bytes:
    """A lossless (SOF3) 8-bit grayscale JPEG of `pixels` (uint8 [H, W]): predictor 1 (left),
    one Huffman table giving each difference category 0-8 a 4-bit code (ITU T.81, annex H)."""
    import numpy as np

    pixels = np.asarray(pixels, dtype=np.int32)
    height, width = pixels.shape
    bits: list[int] = []
    for y in range(height):
        for x in range(width):
            predicted = (pixels[y, x - 1] if x else pixels[y - 1, 0] if y else 128)
            diff = int(pixels[y, x] - predicted)
            category = abs(diff).bit_length()
            extra = diff if diff >= 0 else diff + (1 << category) - 1
            bits += [(category >> k) & 1 for k in range(3, -1, -1)]
            bits += [(extra >> k) & 1 for k in range(category - 1, -1, -1)]
    bits += [1] * (-len(bits) % 8)
    scan = bytearray()
    for k in range(0, len(bits), 8):
        byte = int("".join(map(str, bits[k:k + 8])), 2)
        scan += bytes([byte, 0]) if byte == 0xFF else bytes([byte])

    def segment(marker: int, body: bytes) -> bytes:
        return bytes([0xFF, marker]) + (len(body) + 2).to_bytes(2, "big") + body

    counts = bytes([0, 0, 0, 9] + [0] * 12)
    return (b"\xff\xd8" + segment(0xC4, b"\x00" + counts + bytes(range(9)))
            + segment(0xC3, bytes([8]) + height.to_bytes(2, "big") + width.to_bytes(2, "big")
                      + b"\x01\x01\x11\x00")
            + segment(0xDA, b"\x01\x01\x00\x01\x00\x00") + bytes(scan) + b"\xff\xd9")

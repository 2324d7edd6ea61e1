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

"""The zarr compressors chute reads directly (`readers/zarr/_zarr_chunks.py`), by name, for
whoever writes stores: `chute convert` tests and `benchmarks/make_latents.py`."""

from __future__ import annotations

__all__ = ["CODECS", "compressors"]

CODECS = ("zstd", "blosc", "none")


def compressors(codec: str, zarr_format: int) -> list | None:
    """zarr's `compressors=` for `codec` ("zstd", "blosc" with zstd inside, or "none") in a
    v2 or v3 array, level 3.

    Args:
        codec: one of CODECS.
        zarr_format: 2 or 3.
    """
    if codec not in CODECS:
        raise ValueError(f"codec must be one of {CODECS}, got {codec!r}")
    if codec == "none":
        return None
    if zarr_format == 2:
        import numcodecs

        return [numcodecs.Zstd(level=3) if codec == "zstd" else
                numcodecs.Blosc(cname="zstd", clevel=3, shuffle=numcodecs.Blosc.SHUFFLE)]
    from zarr.codecs import BloscCodec, ZstdCodec

    return [ZstdCodec(level=3) if codec == "zstd" else BloscCodec(cname="zstd", clevel=3)]

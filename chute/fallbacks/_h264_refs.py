"""Which H.264 packets no other frame depends on, read from their NAL unit headers without
decoding (docs/design.md, "Video clips").

A picture whose slices all have nal_ref_idc == 0 is never used for inter prediction, carries no
reference marking (dec_ref_pic_marking is absent when nal_ref_idc == 0) and takes no frame_num of
its own, so the pictures after it decode the same whether it was decoded or not. Such a packet
may be dropped before the decoder when its frame is not wanted. Anything else in the packet that
could carry state forward (parameter sets, end of sequence, data partitions, SEI messages other
than timing, filler and user data) makes it not disposable. Codecs other than H.264 have no
test here: every packet is decoded.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["disposable_test"]

_SLICE = 1  # coded slice of a non-IDR picture
_SEI = 6
# NAL unit types that may sit beside a disposable slice: SEI (checked further), access unit
# delimiter, filler data.
_HARMLESS = {_SLICE, _SEI, 9, 12}
# SEI payload types that describe only their own picture: buffering period, picture timing,
# filler payload, registered and unregistered user data (captions, encoder strings).
_PER_PICTURE_SEI = {0, 1, 3, 4, 5}


def disposable_test(codec: str, extradata: bytes | None) -> Callable[[bytes], bool] | None:
    """A test `packet bytes -> True when no other frame depends on it`, or None when the codec
    gives no such test (decode every packet).

    Args:
        codec: FFmpeg's decoder name of the stream ("h264", "hevc", ...).
        extradata: the stream's codec extradata: an avcC record (length-prefixed NAL units in
            packets) or absent / Annex B parameter sets (start codes in packets).
    """
    if codec != "h264":
        return None
    if extradata and extradata[0] == 1:
        if len(extradata) < 5:
            return None
        length_size = (extradata[4] & 3) + 1
        return lambda packet: _disposable(_length_prefixed(bytes(packet), length_size))
    return lambda packet: _disposable(_annex_b(bytes(packet)))


def _length_prefixed(data: bytes, length_size: int) -> list[bytes] | None:
    units, pos = [], 0
    while pos < len(data):
        size = int.from_bytes(data[pos:pos + length_size], "big")
        pos += length_size
        if size == 0 or pos + size > len(data):
            return None  # malformed: let the decoder see it
        units.append(data[pos:pos + size])
        pos += size
    return units


def _annex_b(data: bytes) -> list[bytes] | None:
    starts = []
    pos = data.find(b"\x00\x00\x01")
    while pos >= 0:
        starts.append(pos + 3)
        pos = data.find(b"\x00\x00\x01", pos + 3)
    units = []
    for k, begin in enumerate(starts):
        end = starts[k + 1] - 3 if k + 1 < len(starts) else len(data)
        unit = data[begin:end].rstrip(b"\x00")  # trailing zeros belong to the next start code
        if unit:
            units.append(unit)
    return units or None


def _disposable(units: list[bytes] | None) -> bool:
    if not units:
        return False
    has_slice = False
    for unit in units:
        header = unit[0]
        kind = header & 0x1F
        if header & 0x80 or header & 0x60 or kind not in _HARMLESS:
            return False  # forbidden bit, a reference picture, or state-carrying unit
        if kind == _SEI and not _per_picture_sei(unit[1:]):
            return False
        has_slice |= kind == _SLICE
    return has_slice


def _per_picture_sei(payload: bytes) -> bool:
    """Whether every message of an SEI NAL unit's payload is one of _PER_PICTURE_SEI."""
    rbsp = payload.replace(b"\x00\x00\x03", b"\x00\x00")  # drop emulation prevention bytes
    pos = 0
    while pos < len(rbsp) and rbsp[pos:] != b"\x80":  # rbsp_trailing_bits end the unit
        values = []
        for _ in range(2):  # payload type, then payload size: 0xFF bytes add 255 each
            value = 0
            while pos < len(rbsp) and rbsp[pos] == 0xFF:
                value += 255
                pos += 1
            if pos >= len(rbsp):
                return False
            value += rbsp[pos]
            pos += 1
            values.append(value)
        kind, size = values
        if kind not in _PER_PICTURE_SEI:
            return False
        pos += size
    return pos <= len(rbsp)

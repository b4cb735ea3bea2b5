"""getProgramAccounts / programSubscribe filters: memcmp (base58, base64 or a byte list) and dataSize."""

from __future__ import annotations

import binascii
from collections.abc import Callable

from .codec import b58decode, b64decode
from .errors import invalid_params

MAX_FILTERS = 4
MAX_MEMCMP_BYTES = 128

AccountFilter = Callable[[bytes], bool]


def _memcmp(spec: object) -> AccountFilter:
    if not isinstance(spec, dict):
        raise invalid_params("memcmp must be an object {offset, bytes, encoding?}")
    offset = spec.get("offset")
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise invalid_params(f"memcmp.offset must be a non-negative integer, got {offset!r}")
    value, encoding = spec.get("bytes"), spec.get("encoding", "base58")
    try:
        if encoding == "bytes" or isinstance(value, list):
            if not isinstance(value, list) or not all(
                isinstance(b, int) and 0 <= b < 256 for b in value
            ):
                raise ValueError("bytes must be a list of integers 0..255")
            expected = bytes(value)
        elif not isinstance(value, str):
            raise ValueError("bytes must be an encoded string")
        elif encoding == "base58":
            expected = b58decode(value)
        elif encoding == "base64":
            expected = b64decode(value)
        else:
            raise ValueError(f"unknown encoding {encoding!r} (base58, base64 or bytes)")
    except (ValueError, binascii.Error) as exc:
        raise invalid_params(f"memcmp: {exc}") from None
    if len(expected) > MAX_MEMCMP_BYTES:
        raise invalid_params(
            f"memcmp: at most {MAX_MEMCMP_BYTES} bytes to compare, got {len(expected)}"
        )
    end = offset + len(expected)
    return lambda data: data[offset:end] == expected


def _data_size(size: object) -> AccountFilter:
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise invalid_params(f"dataSize must be a non-negative integer, got {size!r}")
    return lambda data: len(data) == size


def parse_filters(filters: object) -> list[AccountFilter]:
    if filters is None:
        return []
    if not isinstance(filters, list):
        raise invalid_params("filters must be an array")
    if len(filters) > MAX_FILTERS:
        raise invalid_params(f"too many filters provided; max {MAX_FILTERS}")
    out = []
    for spec in filters:
        if isinstance(spec, dict) and "memcmp" in spec:
            out.append(_memcmp(spec["memcmp"]))
        elif isinstance(spec, dict) and "dataSize" in spec:
            out.append(_data_size(spec["dataSize"]))
        else:
            raise invalid_params(f"unknown filter {spec!r}; expected memcmp or dataSize")
    return out


def matches(filters: list[AccountFilter], data: bytes) -> bool:
    return all(f(data) for f in filters)

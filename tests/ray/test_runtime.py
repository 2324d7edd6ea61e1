"""Connecting to Ray (chute/ray/_runtime.py) without a cluster: an address that is not one is
refused in one line (issue 38 item 12: "invalid literal for int()" leaked)."""

from __future__ import annotations

import pytest

from chute.errors import ChuteError
from chute.ray._runtime import _check_reachable


@pytest.mark.parametrize("address", ["bogus", "ray://head", "head:port"])
def test_an_address_without_a_port_is_one_line_naming_the_forms(address):
    with pytest.raises(ChuteError) as exc:
        _check_reachable(address)
    message = str(exc.value)
    assert message.startswith(f"--ray-address {address}: not an address of a Ray cluster")
    assert "HOST:PORT" in message and "int()" not in message

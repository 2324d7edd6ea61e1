"""Storage URLs that chute does not handle (issue 38 item 5): the message lists what chute
does read and write (local folders, file:// and s3://), never that it reads only `file`."""

from __future__ import annotations

import pytest

from chute.errors import FormatError
from chute.readers.storage._storage import local_path


@pytest.mark.parametrize("writing, said", [(False, "is not supported (chute reads"),
                                           (True, "cannot write to storage scheme 's4'")])
def test_an_unknown_scheme_names_every_one_chute_handles(writing, said):
    with pytest.raises(FormatError) as info:
        local_path("s4://bucket/ds", writing=writing)
    message = str(info.value)
    assert message.startswith("s4://bucket/ds: ") and said in message and "\n" not in message
    assert "s3://" in message and "file://" in message and "local folders" in message
    assert "['file']" not in message and "writes datasets to local folders)" not in message

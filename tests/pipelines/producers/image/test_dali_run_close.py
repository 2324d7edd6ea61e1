"""Closing a run (e.g. after an early break) waits for the producer's side stream before the
readers and slots go: the last kernel or copy may still be writing into a slot."""

from __future__ import annotations

from chute.pipelines._run import Run as _Run


def make_run(log, stream):
    run = object.__new__(_Run)  # only what close() touches; a real run needs a GPU here
    run.stream, run.read_ahead = stream, None

    class Prefetcher:
        def close(self):
            log.append("prefetcher closed")

    class Reader:
        def close(self):
            log.append("reader closed")

    run.prefetcher, run.readers = Prefetcher(), [Reader()]
    return run


def test_close_synchronises_the_side_stream_before_releasing():
    log = []

    class Stream:
        def synchronize(self):
            log.append("stream synchronised")

    make_run(log, Stream()).close()
    assert log == ["prefetcher closed", "stream synchronised", "reader closed"]


def test_close_without_a_stream_on_the_cpu():
    log = []
    make_run(log, None).close()
    assert log == ["prefetcher closed", "reader closed"]

"""A real S3-compatible server on loopback for the object storage tests: moto's standalone
HTTP server (its threaded WSGI server, on 127.0.0.1), reached by chute's real client over
HTTP; and a small TCP proxy in front of it that can refuse, cut, delay, throttle or freeze
connections, lose the reply to a chosen request after the server acted on it, or flip a byte
of a chosen reply's body (damage in flight).
Stopping and starting the server keeps its objects (moto keeps them in this process)."""

from __future__ import annotations

import contextlib
import os
import re
import socket
import stat
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["S3Server", "FaultProxy", "cache_peak"]


@contextlib.contextmanager
def cache_peak(cache: Path) -> Iterator[list[int]]:
    """The most bytes of files in `cache` at once while the block runs (sampled every 5 ms),
    in the one-item list yielded, final when the block ends."""
    peak = [0]
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            sizes = {}  # by inode: a file being renamed may be listed under both names
            # os.walk skips a folder removed while it is walked (rglob raises, which ended
            # this watcher with the peak still 0)
            for root, _dirs, names in os.walk(cache):
                for name in names:
                    try:
                        info = os.lstat(os.path.join(root, name))
                    except FileNotFoundError:  # evicted or renamed since listed
                        continue
                    if stat.S_ISREG(info.st_mode):
                        sizes[info.st_ino] = info.st_size
            peak[0] = max(peak[0], sum(sizes.values()))
            time.sleep(0.005)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        yield peak
    finally:
        stop.set()
        watcher.join()


class S3Server:
    """moto's S3 server on a fixed loopback port; `stop()`/`start()` for outages."""

    def __init__(self) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        # moto's ThreadedMotoServer binds in its own thread and waits for it without a
        # timeout, so a failed bind hung the suite: the server is bound here instead
        from moto.server import DomainDispatcherApplication, create_backend_app
        from werkzeug.serving import make_server

        app = DomainDispatcherApplication(create_backend_app)
        deadline = time.monotonic() + 10
        while True:  # the port may linger in TIME_WAIT for a moment after a stop
            try:
                self._server = make_server("127.0.0.1", self.port, app, threaded=True)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True,
                                        name="moto-s3")
        self._thread.start()
        self._wait_up()

    def _wait_up(self) -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(
                    ("127.0.0.1", self.port), timeout=0.5):
                return
            time.sleep(0.05)
        raise RuntimeError("moto server did not start")

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join()
            self._server = None

    def create_bucket(self, name: str) -> None:
        request = urllib.request.Request(f"{self.endpoint}/{name}", method="PUT")
        urllib.request.urlopen(request, timeout=10).read()


@dataclass
class FaultProxy:
    """A TCP proxy on loopback in front of `target_port`.

    `down` refuses new connections and cuts open ones; `delay` (seconds) holds every chunk
    forwarded; `cut_after` bytes from the server close the connection mid-response once;
    `frozen` accepts connections but forwards nothing either way (a server that stops
    answering: SIGSTOP, a dead link); `rate` (bytes per second) throttles the server's bytes,
    a slow but steady link; `status` (e.g. 503) answers every request with it, unforwarded.
    `lose_reply` lets a chosen request reach the server and loses its reply (a reset, or a
    500 in its place); `lost` counts the replies lost. `failing` (a compiled pattern) answers
    500 to every request whose path matches, unforwarded. `corrupt_reply` flips the first
    body byte of the reply to chosen requests; `flipped` counts the bytes flipped.
    """

    target_port: int
    down: bool = False
    delay: float = 0.0
    cut_after: int | None = None
    frozen: bool = False
    rate: float | None = None
    status: int | None = None
    connections: int = 0
    forwarded: int = 0  # bytes sent on from the server
    lost: int = 0  # replies lost by `lose_reply`
    flipped: int = 0  # reply bytes flipped by `corrupt_reply`
    _open: list = field(default_factory=list)
    failing: re.Pattern | None = None
    _rule: list | None = None  # [method, pattern, requests left to let pass, how, then_fail]
    _flip: list | None = None  # [method, pattern, replies left to flip]

    def __post_init__(self) -> None:
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port = self._listener.getsockname()[1]
        self._stopped = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def lose_reply(self, method: str, pattern: str, nth: int = 1, how: str = "drop",
                   then_fail: bool = False) -> None:
        """Forward the `nth` request from now with `method` and a path matching `pattern`
        (re.search) to the server, then lose its reply: `how` "drop" closes the connection
        as the reply begins (the server acted on it; the client sees a reset), "500" answers
        500 Internal Server Error in its place. Once; `then_fail`: every later request with
        such a path is answered 500 (`failing`) until that is set to None."""
        assert how in ("drop", "500")
        self._rule = [method, re.compile(pattern), nth, how, then_fail]

    def corrupt_reply(self, method: str, pattern: str, times: int = 1) -> None:
        """Flip the first body byte of the replies to the next `times` requests with `method`
        and a path matching `pattern` (re.search): their bytes are damaged on the way, the
        object in the server is not."""
        self._flip = [method, re.compile(pattern), times]

    def _spoil(self, method: str, path: str) -> bool:
        rule = self._flip
        if rule is None or method != rule[0] or not rule[1].search(path):
            return False
        rule[2] -= 1
        if rule[2] <= 0:
            self._flip = None
        return True

    def _doom(self, method: str, path: str) -> str | None:
        rule = self._rule
        if rule is None or method != rule[0] or not rule[1].search(path):
            return None
        rule[2] -= 1
        if rule[2] > 0:
            return None
        self._rule = None
        if rule[4]:
            self.failing = rule[1]
        return rule[3]

    def set_down(self, down: bool) -> None:
        self.down = down
        if down:
            for sock in list(self._open):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                    sock.close()
            self._open.clear()

    def _accept(self) -> None:
        while not self._stopped:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self.down:
                client.close()
                continue
            self.connections += 1
            if self.frozen:  # accepted, never answered
                self._open.append(client)
                continue
            if self.status is not None:
                threading.Thread(target=self._answer, args=(client, self.status),
                                 daemon=True).start()
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
            except OSError:
                client.close()
                continue
            self._open += [client, upstream]
            conn = _Connection()
            threading.Thread(target=self._pipe, args=(client, upstream, False, conn),
                             daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, True, conn),
                             daemon=True).start()

    def _pipe(self, src, dst, from_server: bool, conn: _Connection) -> None:
        sent = 0
        try:
            while True:
                data = src.recv(65536 if self.rate is None or not from_server else 4096)
                if not data:
                    break
                if not from_server:  # a request's head is seen before it is sent on
                    for method, path in conn.feed(data):
                        failing = self.failing
                        if failing is not None and failing.search(path):
                            src.sendall(_ERROR)
                            raise OSError("failed")
                        conn.doomed = conn.doomed or self._doom(method, path)
                        if self._spoil(method, path):
                            conn.flip = "head"
                elif conn.doomed is not None:  # its reply begins: the server acted on it
                    if conn.doomed == "500":
                        dst.sendall(_ERROR)
                    self.lost += 1
                    raise OSError("reply lost")
                while self.frozen and not self._stopped:  # held, as by a stopped server
                    time.sleep(0.05)
                if self.delay:
                    time.sleep(self.delay)
                if self.rate is not None and from_server:
                    time.sleep(len(data) / self.rate)
                if from_server and self.cut_after is not None and \
                        sent + len(data) > self.cut_after:
                    limit, self.cut_after = self.cut_after, None  # once
                    dst.sendall(data[:max(limit - sent, 1)])
                    raise OSError("cut")
                if from_server and conn.flip is not None:
                    spoiled = conn.spoil(data)
                    self.flipped += int(spoiled != data)
                    data = spoiled
                dst.sendall(data)
                sent += len(data)
                if from_server:
                    self.forwarded += len(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                with contextlib.suppress(OSError):
                    sock.close()

    @staticmethod
    def _answer(client, status: int) -> None:
        with contextlib.suppress(OSError), client:
            client.settimeout(5)
            client.recv(65536)  # the request's head (its body, if any, is not waited for)
            client.sendall(f"HTTP/1.1 {status} Error\r\nContent-Length: 0\r\n"
                           "Connection: close\r\n\r\n".encode())

    def close(self) -> None:
        self._stopped = True
        self.set_down(True)
        with contextlib.suppress(OSError):
            self._listener.close()


_ERROR = b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


class _Connection:
    """The requests a client sends on one connection, read from its bytes (request heads,
    bodies of a Content-Length; a chunked body ends the reading), and whether the reply to
    the one in flight is to be lost. Clients of S3 wait for each reply before sending the
    next request, so the next bytes from the server are that reply."""

    def __init__(self) -> None:
        self.doomed: str | None = None
        self.flip: str | None = None  # "head": the reply's head is passing, "body": flip next
        self._reply = b""  # the last bytes of the reply's head seen (its end may be split)
        self._head = b""
        self._body = 0
        self._blind = False

    def spoil(self, data: bytes) -> bytes:
        """`data` from the server with the first byte of the reply's body flipped (once)."""
        if self.flip == "head":
            joined = self._reply + data
            end = joined.find(b"\r\n\r\n")
            if end < 0:
                self._reply = joined[-3:]
                return data
            start = end + 4 - len(self._reply)  # where the body starts in `data`
            self.flip, self._reply = "body", b""
            return data[:start] + self.spoil(data[start:])
        if self.flip == "body" and data:
            self.flip = None
            return bytes([data[0] ^ 0xFF]) + data[1:]
        return data

    def feed(self, data: bytes) -> list[tuple[str, str]]:
        """(method, path) of each request whose head ends in `data`."""
        heads = []
        while data and not self._blind:
            if self._body:
                skip = min(self._body, len(data))
                self._body -= skip
                data = data[skip:]
                continue
            self._head += data
            end = self._head.find(b"\r\n\r\n")
            if end < 0:
                break
            lines = self._head[:end].decode("latin-1").split("\r\n")
            data, self._head = self._head[end + 4:], b""
            headers = {k.strip().lower(): v.strip()
                       for k, _, v in (line.partition(":") for line in lines[1:])}
            self._blind = "chunked" in headers.get("transfer-encoding", "").lower()
            self._body = int(headers.get("content-length") or 0)
            method, path = (lines[0].split(" ") + ["", ""])[:2]
            heads.append((method, path))
        return heads

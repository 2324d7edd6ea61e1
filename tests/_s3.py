"""A real S3-compatible server on loopback for the object storage tests: moto's standalone
HTTP server (its threaded WSGI server, on 127.0.0.1), reached by chute's real client over
HTTP; and a small TCP proxy in front of it that can refuse, cut, delay, throttle or freeze
connections.
Stopping and starting the server keeps its objects (moto keeps them in this process)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
import urllib.request
from dataclasses import dataclass, field

__all__ = ["S3Server", "FaultProxy"]


class S3Server:
    """moto's S3 server on a fixed loopback port; `stop()`/`start()` for outages."""

    def __init__(self) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self._server = None
        self.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        from moto.server import ThreadedMotoServer

        deadline = time.monotonic() + 10
        while True:  # the port may linger in TIME_WAIT for a moment after a stop
            try:
                self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port,
                                                  verbose=False)
                self._server.start()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
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
            self._server.stop()
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
    _open: list = field(default_factory=list)

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
            threading.Thread(target=self._pipe, args=(client, upstream, False),
                             daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, True),
                             daemon=True).start()

    def _pipe(self, src, dst, from_server: bool) -> None:
        sent = 0
        try:
            while True:
                data = src.recv(65536 if self.rate is None or not from_server else 4096)
                if not data:
                    break
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

"""Object storage emulators on loopback for the storage contract test
(tests/readers/storage/test_scheme_contract.py): Azurite (Microsoft's Azure Storage emulator,
the npm package `azurite`), installed on first use into a cache folder and started as a
process. Each class gives the environment variables that point chute's client at it and
makes a fresh bucket or container."""

from __future__ import annotations

import base64
import contextlib
import email.utils
import hashlib
import hmac
import http.client
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

__all__ = ["Azurite", "EmulatorMissing", "free_port"]

# Azurite's account and key are public constants of the emulator (its documentation)
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = ("Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/"
               "KBHBeksoGMGw==")
_AZURITE_PACKAGE = "azurite@3"


class EmulatorMissing(RuntimeError):
    """The emulator could not be installed or started here (the test skips, saying why)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def emulator_cache() -> Path:
    """Where emulators are installed: $CHUTE_EMULATORS, else ~/.cache/chute-emulators."""
    return Path(os.environ.get("CHUTE_EMULATORS") or Path.home() / ".cache" / "chute-emulators")


def _wait_port(port: int, proc: subprocess.Popen, log: Path, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise EmulatorMissing(f"the emulator exited with {proc.returncode}: "
                                  f"{log.read_text(errors='replace')[-500:]}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return
        time.sleep(0.1)
    raise EmulatorMissing(f"the emulator did not listen on port {port} within {seconds:.0f} s")


class Azurite:
    """Azurite's blob service on a free loopback port, its data in `folder`."""

    def __init__(self, folder: Path) -> None:
        binary = self.install()
        self.port = free_port()
        folder.mkdir(parents=True, exist_ok=True)
        self._log = folder / "azurite.log"
        with open(self._log, "wb") as log:
            self._proc = subprocess.Popen(
                [str(binary), "--blobHost", "127.0.0.1", "--blobPort", str(self.port),
                 "--location", str(folder / "data"), "--skipApiVersionCheck",
                 "--disableTelemetry", "--silent"],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            _wait_port(self.port, self._proc, self._log)
        except BaseException:
            self.stop()
            raise

    @staticmethod
    def install() -> Path:
        """The azurite-blob launcher, installed with npm into the emulator cache when absent."""
        prefix = emulator_cache() / "azurite"
        binary = prefix / "node_modules" / ".bin" / "azurite-blob"
        if binary.exists():
            return binary
        npm = shutil.which("npm")
        if npm is None or shutil.which("node") is None:
            raise EmulatorMissing("Azurite needs Node.js and npm (apt-get install nodejs npm)")
        prefix.mkdir(parents=True, exist_ok=True)
        run = subprocess.run([npm, "install", "--no-audit", "--no-fund", "--prefix", str(prefix),
                              _AZURITE_PACKAGE], capture_output=True, text=True, timeout=600)
        if run.returncode != 0 or not binary.exists():
            raise EmulatorMissing(f"npm install {_AZURITE_PACKAGE} failed: "
                                  f"{(run.stderr or run.stdout).strip()[-300:]}")
        return binary

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}/{AZURITE_ACCOUNT}"

    def environment(self) -> dict[str, str]:
        """The standard Azure variables that point a client at this emulator."""
        return {"AZURE_STORAGE_ACCOUNT_NAME": AZURITE_ACCOUNT,
                "AZURE_STORAGE_ACCOUNT_KEY": AZURITE_KEY,
                "AZURE_STORAGE_ENDPOINT": self.endpoint}

    def create_container(self, name: str) -> None:
        """Create container `name` with a Shared Key signed request (Azure's REST API)."""
        date = email.utils.formatdate(usegmt=True)
        version = "2021-08-06"
        # verb, then 11 standard headers left empty, then the x-ms- headers and the resource
        to_sign = ("PUT\n" + "\n" * 11 + f"x-ms-date:{date}\nx-ms-version:{version}\n"
                   f"/{AZURITE_ACCOUNT}/{AZURITE_ACCOUNT}/{name}\nrestype:container")
        key = base64.b64decode(AZURITE_KEY)
        signature = base64.b64encode(hmac.new(key, to_sign.encode(), hashlib.sha256).digest())
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            connection.request("PUT", f"/{AZURITE_ACCOUNT}/{name}?restype=container", body=b"",
                               headers={"x-ms-date": date, "x-ms-version": version,
                                        "Authorization": f"SharedKey {AZURITE_ACCOUNT}:"
                                                         f"{signature.decode()}"})
            reply = connection.getresponse()
            body = reply.read()
        finally:
            connection.close()
        if reply.status != 201:
            raise RuntimeError(f"Azurite refused to create container {name}: {reply.status} "
                               f"{body[:200]!r}")

    def stop(self) -> None:
        if self._proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._proc.pid, signal.SIGTERM)
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self._proc.pid, signal.SIGKILL)
                self._proc.wait()

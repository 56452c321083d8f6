"""The real service for the tests: the release binary (and the chaos proxy) on
free ports with a temporary database, killed and removed even when a test fails.

The binaries come from ``IDEM_BIN_DIR`` (``scripts/test_clients.sh``
sets it), else the repository's ``target/release``.
"""

from __future__ import annotations

import hashlib
import json
import os
import queue
import re
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Callable

import httpx

REPO = Path(__file__).resolve().parents[3]
BIN_DIR = Path(os.environ.get("IDEM_BIN_DIR", REPO / "target" / "release"))
MATRIX = json.loads((REPO / "clients" / "retry-matrix.json").read_text())
VECTORS = json.loads((REPO / "clients" / "key-vectors.json").read_text())

#: A loaded 2-core box may take a while to start a process.
STARTUP_DEADLINE = 60.0


def eventually(what: str, check: Callable[[], Any], within: float = 30.0) -> Any:
    """Poll ``check`` until it returns something truthy, or fail naming ``what``."""
    deadline = time.monotonic() + within
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


class Process:
    """A child that prints one start-up line naming its address."""

    def __init__(self, argv: list[str], log: Path, marker: str) -> None:
        self.log = log
        self._log_file = log.open("ab")
        self.proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=self._log_file, stdin=subprocess.DEVNULL
        )
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=_read_lines, args=(self.proc, lines), daemon=True).start()
        try:
            line = lines.get(timeout=STARTUP_DEADLINE)
        except queue.Empty:
            line = ""
        if not line:  # no line in time, or the process ended first
            self.kill()
            raise AssertionError(f"{argv[0]} printed no start-up line: {self.stderr()}")
        match = re.search(marker + r" on http://([0-9.]+:\d+)", line)
        if not match:
            self.kill()
            raise AssertionError(f"unexpected start-up line {line!r}: {self.stderr()}")
        self.addr = match.group(1)

    def stderr(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)
        self._log_file.close()


def _read_lines(proc: subprocess.Popen[bytes], lines: "queue.Queue[str]") -> None:
    assert proc.stdout is not None
    for raw in proc.stdout:
        lines.put(raw.decode(errors="replace"))
    lines.put("")  # end of output: the process has exited


class Service:
    """The release binary on a free port (or ``port``) with its own database."""

    def __init__(self, folder: Path, *flags: str) -> None:
        self.folder = folder
        self.db = folder / "calls.db"
        self.flags = list(flags)
        self.token: str | None = None
        self.children: list[Process] = []
        self.server = self._start(0)

    def _start(self, port: int) -> Process:
        argv = [str(BIN_DIR / "idempotent-tool"), "--port", str(port), "--db", str(self.db),
                "--access-log", "off", *self.flags]
        server = Process(argv, self.folder / "server.log", "idempotent-tool listening")
        self.children.append(server)
        return server

    @property
    def base_url(self) -> str:
        return f"http://{self.server.addr}"

    def kill_and_restart(self) -> None:
        """SIGKILL the server, then start it again on the same port and database."""
        port = int(self.server.addr.rsplit(":", 1)[1])
        self.server.kill()
        self.server = self._start(port)

    def proxy(self, mode: str, *flags: str) -> str:
        """A chaos proxy in front of the server; its base URL."""
        argv = [str(BIN_DIR / "chaos_proxy"), "--listen", "127.0.0.1:0", "--upstream",
                self.server.addr, "--mode", mode, *flags]
        proxy = Process(argv, self.folder / "proxy.log", "chaos_proxy listening")
        self.children.append(proxy)
        return f"http://{proxy.addr}"

    def http(self) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        return httpx.Client(base_url=self.base_url, headers=headers, timeout=30)

    def post(self, key: str, tool: str, args: dict[str, Any], wait: float = 0) -> httpx.Response:
        with self.http() as http:
            return http.post(f"/v1/tool-calls?wait={wait}", headers={"Idempotency-Key": key},
                             json={"tool": tool, "args": args})

    def calls_of(self, tool: str) -> list[dict[str, Any]]:
        with self.http() as http:
            body = http.get("/v1/tool-calls", params={"tool": tool, "limit": 500}).json()
        assert body["next"] is None, "one page holds every call of a test"
        return body["calls"]

    def effects(self) -> int:
        with self.http() as http:
            return int(http.get("/stats").json()["effects"])

    def queued(self) -> float:
        with self.http() as http:
            text = http.get("/metrics").text
        match = re.search(r"^idempotent_tool_queued_calls (\S+)$", text, re.M)
        return float(match.group(1)) if match else 0.0

    def stop(self) -> None:
        for child in self.children:
            child.kill()

    def logs(self) -> str:
        return "\n".join(f"--- {c.log.name}\n{c.stderr()}" for c in self.children)


def auth_file(folder: Path, tenant: str, token: str) -> Path:
    """An ``--auth-file`` with one admin tenant (the file holds only the token's SHA-256)."""
    digest = hashlib.sha256(token.encode()).hexdigest()
    path = folder / "auth.json"
    path.write_text(json.dumps({"tenants": {tenant: {"token_sha256": digest, "admin": True}}}))
    return path

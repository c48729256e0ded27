"""Fixtures that run a real `witcert serve` process on a free port.

scripts/test.sh sets WITCERT_BIN (the built executable) and WITCERT_MODEL (the default
GGUF). Each server gets its own config file in a temp dir, so tests can rewrite it and send
SIGHUP. Servers are killed at the end of their scope; their log is kept for assertions.
"""
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = os.environ.get("WITCERT_BIN", str(ROOT / "build" / "server" / "witcert"))
MODEL = os.environ.get("WITCERT_MODEL", str(ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"))
# Extra `witcert serve` flags for every server, e.g. WITCERT_SERVE_ARGS="--device cuda" to run
# the suite against the GPU backend.
SERVE_ARGS = os.environ.get("WITCERT_SERVE_ARGS", "").split()

# Small pool and short timeouts keep the suite fast on 2 cores.
BASE_CONFIG = {
    "http": {"read_timeout_s": 3, "write_timeout_s": 5, "max_body_bytes": 1048576},
    "kv": {"memory_mb": 32},
    "metrics": {"cert_labels": "layer"},
}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, tmp_path, config=None, args=(), env=None):
        if not Path(BIN).exists():
            pytest.fail(f"witcert binary not found at {BIN} (set WITCERT_BIN)")
        if not Path(MODEL).exists():
            pytest.fail(f"model not found at {MODEL} (set WITCERT_MODEL)")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.config_path = Path(tmp_path) / f"witcert-{self.port}.jsonc"
        self.write_config(config if config is not None else BASE_CONFIG)
        self.log_path = Path(tmp_path) / f"witcert-{self.port}.log"
        self._log = open(self.log_path, "wb")
        full_env = dict(os.environ)
        full_env.pop("WITCERT_API_KEY", None)
        full_env.update(env or {})
        self.proc = subprocess.Popen(
            [BIN, "serve", "--model", MODEL, "--port", str(self.port),
             "--config", str(self.config_path), "--threads", "2", *SERVE_ARGS, *args],
            stdout=self._log, stderr=subprocess.STDOUT, env=full_env)
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"witcert serve exited early:\n{self.log()}")
            try:
                if self.get("/health")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"witcert serve did not become healthy:\n{self.log()}")

    def write_config(self, config):
        text = config if isinstance(config, str) else "// test config\n" + json.dumps(config)
        self.config_path.write_text(text)

    def log(self):
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def request(self, method, path, body=None, headers=None, timeout=60):
        data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json", **(headers or {})})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def get(self, path):
        return self.request("GET", path)

    def post(self, path, body, headers=None):
        return self.request("POST", path, body, headers)

    def metrics(self):
        status, body = self.get("/metrics")
        assert status == 200
        return body.decode()

    def metric(self, name, labels=None):
        """Value of one sample, or None."""
        want = name if not labels else name + "{" + ",".join(
            f'{k}="{v}"' for k, v in labels.items()) + "}"
        for line in self.metrics().splitlines():
            if line.startswith(want + " "):
                return float(line.split()[-1])
        return None

    def sighup(self):
        self.proc.send_signal(signal.SIGHUP)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("srv"))
    yield s
    s.stop()


@pytest.fixture
def make_server(tmp_path):
    started = []

    def make(**kwargs):
        s = Server(tmp_path, **kwargs)
        started.append(s)
        return s

    yield make
    for s in started:
        s.stop()

"""The /metrics exposition checked by promtool and scraped by a real Prometheus server."""
import json
import os
import shutil
import subprocess
import time
import urllib.parse
import urllib.request

import pytest

from conftest import free_port

IN_CI = os.environ.get("CI", "").lower() == "true"


def need(binary):
    path = shutil.which(binary)
    if path is None:
        if IN_CI:
            pytest.fail(f"{binary} is required under CI=true (Debian package prometheus)")
        pytest.skip(f"{binary} not installed")
    return path


def warm(server):
    status, _ = server.post("/v1/chat/completions",
                            {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3})
    assert status == 200


def test_promtool_check_metrics(server):
    promtool = need("promtool")
    warm(server)
    text = server.metrics()
    for name in ("witcert_num_requests_running", "witcert_num_requests_waiting",
                 "witcert_prompt_tokens_total", "witcert_generation_tokens_total",
                 "witcert_time_to_first_token_seconds_bucket",
                 "witcert_inter_token_latency_seconds_bucket",
                 "witcert_e2e_request_latency_seconds_bucket", "witcert_kv_cache_usage_ratio",
                 "witcert_num_preemptions_total", "witcert_request_finished_total",
                 "witcert_http_requests_total", "witcert_cert_tv_bound_bucket",
                 "witcert_cert_cells_certified_total", "witcert_cert_cells_uncertified_total",
                 "witcert_cert_pageins_total", "witcert_cert_audit_violations_total",
                 "witcert_backing_store_bytes", "witcert_backing_store_evictions_total",
                 "witcert_config_reload_total"):
        assert f"\n{name}" in text, name
    # The test config asks for per-layer labels: no head label anywhere.
    assert 'witcert_cert_cells_total{layer="0"}' in text
    assert "head=" not in text
    r = subprocess.run([promtool, "check", "metrics"], input=text.encode(), capture_output=True,
                       timeout=60)
    assert r.returncode == 0, r.stdout.decode() + r.stderr.decode()


def test_prometheus_scrapes_witcert(server, tmp_path):
    prometheus = need("prometheus")
    warm(server)
    port = free_port()
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n  - job_name: witcert\n    static_configs:\n"
        f"      - targets: ['127.0.0.1:{server.port}']\n")
    log = open(tmp_path / "prometheus.log", "wb")
    proc = subprocess.Popen([prometheus, f"--config.file={cfg}",
                             f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                             f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        query = urllib.parse.urlencode({"query": "witcert_generation_tokens_total"})
        deadline = time.time() + 60
        result = []
        while time.time() < deadline and not result:
            time.sleep(1)
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/query?{query}",
                                            timeout=5) as r:
                    result = json.loads(r.read())["data"]["result"]
            except OSError:
                pass
        assert result, (tmp_path / "prometheus.log").read_text(errors="replace")[-3000:]
        assert float(result[0]["value"][1]) > 0
        with urllib.request.urlopen(
                f"http://127.0.0.1:{port}/api/v1/query?" +
                urllib.parse.urlencode({"query": 'up{job="witcert"}'}), timeout=5) as r:
            assert json.loads(r.read())["data"]["result"][0]["value"][1] == "1"
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        log.close()

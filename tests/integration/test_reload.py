"""Live config: SIGHUP and POST /admin/reload apply a valid file and reject an invalid one."""
import json
import subprocess
import time

from conftest import BASE_CONFIG, BIN, MODEL


def config_with(tv):
    c = json.loads(json.dumps(BASE_CONFIG))
    c["gate"] = {"tv_threshold": tv}
    return c


def admin(server):
    status, body = server.get("/admin/config")
    assert status == 200
    return json.loads(body)


def wait_for(pred, timeout=10):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return True
        time.sleep(0.1)
    return False


def test_sighup_reload(make_server):
    s = make_server(config=config_with(0.05))
    assert admin(s)["gate"]["tv_threshold"] == 0.05
    s.write_config(config_with(0.02))
    s.sighup()
    assert wait_for(lambda: admin(s)["gate"]["tv_threshold"] == 0.02), s.log()
    assert s.metric("witcert_config_reload_total", {"result": "ok"}) == 1
    # New requests run under the reloaded policy.
    status, body = s.post("/v1/chat/completions",
                          {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
    assert status == 200 and json.loads(body)["witcert"]["tv_threshold"] == 0.02

    # An invalid file is rejected, logged with the key, counted; the old config stays.
    s.write_config('{"gate": {"tv_threshold": "tight"}}')
    s.sighup()
    assert wait_for(lambda: s.metric("witcert_config_reload_total", {"result": "error"}) == 1)
    assert admin(s)["gate"]["tv_threshold"] == 0.02
    assert "gate.tv_threshold" in s.log()
    assert s.get("/health")[0] == 200


def test_admin_reload_endpoint(make_server):
    s = make_server(config=config_with(0.05))
    s.write_config('{"gate": {"tv_treshold": 0.01}}')  # typo: unknown key
    status, body = s.post("/admin/reload", {})
    assert status == 400
    assert "gate.tv_treshold" in json.loads(body)["error"]["message"]
    assert admin(s)["gate"]["tv_threshold"] == 0.05
    s.write_config(config_with(0.03))
    status, body = s.post("/admin/reload", {})
    assert status == 200, body
    assert json.loads(body)["gate"]["tv_threshold"] == 0.03
    assert s.metric("witcert_config_reload_total", {"result": "error"}) == 1
    assert s.metric("witcert_config_reload_total", {"result": "ok"}) == 1


def test_invalid_config_at_startup(tmp_path):
    cfg = tmp_path / "bad.jsonc"
    cfg.write_text('{"http": {"port": "eighty"}}')
    r = subprocess.run([BIN, "serve", "--model", MODEL, "--config", str(cfg)],
                       capture_output=True, timeout=60)
    assert r.returncode != 0
    assert b"http.port" in r.stderr
    cfg.write_text('{"scheduler": {"max_runing": 4}}')
    r = subprocess.run([BIN, "serve", "--model", MODEL, "--config", str(cfg)],
                       capture_output=True, timeout=60)
    assert r.returncode != 0
    assert b"scheduler.max_runing" in r.stderr and b"unknown key" in r.stderr


def test_reload_switches_the_tier_b_form(make_server):
    s = make_server(config=config_with(0.05))
    assert admin(s)["gate"]["tier_b_form"] == "per-token"
    for form in ("scale-only", "split-max"):
        c = config_with(0.05)
        c["gate"]["tier_b_form"] = form
        s.write_config(c)
        status, body = s.post("/admin/reload", {})
        assert status == 200, body
        assert admin(s)["gate"]["tier_b_form"] == form
        status, body = s.post("/v1/chat/completions",
                              {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
        assert status == 200 and json.loads(body)["witcert"]["tier_b_form"] == form
    # A request may tighten the form, never loosen it: under split-max it can ask for scale-only;
    # under scale-only its split-max is ignored.
    status, body = s.post("/v1/chat/completions",
                          {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2,
                           "witcert": {"tier_b_form": "scale-only"}})
    assert status == 200 and json.loads(body)["witcert"]["tier_b_form"] == "scale-only"
    c = config_with(0.05)
    c["gate"]["tier_b_form"] = "scale-only"
    s.write_config(c)
    assert s.post("/admin/reload", {})[0] == 200
    status, body = s.post("/v1/chat/completions",
                          {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2,
                           "witcert": {"tier_b_form": "split-max"}})
    assert status == 200 and json.loads(body)["witcert"]["tier_b_form"] == "scale-only"
    status, body = s.post("/v1/chat/completions",
                          {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2,
                           "witcert": {"tier_b_form": "loose"}})
    assert status == 400 and json.loads(body)["error"]["param"] == "witcert.tier_b_form"

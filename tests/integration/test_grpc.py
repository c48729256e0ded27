"""gRPC API over a real port: witcert.v1.Inference (streaming Generate with certificate
events, unary Chat), grpc.health.v1 and server reflection, against a real `witcert serve`."""
import os
import socket
import subprocess
import sys
import tempfile
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def stubs():
    """Python stubs generated from proto/ by grpcio-tools, into a temporary folder."""
    from grpc_tools import protoc
    out = tempfile.mkdtemp(prefix="witcert-proto-")
    proto_dir = os.path.join(ROOT, "proto")
    rc = protoc.main(["protoc", f"-I{proto_dir}", f"--python_out={out}", f"--grpc_python_out={out}",
                      os.path.join(proto_dir, "witcert/v1/inference.proto")])
    assert rc == 0
    sys.path.insert(0, out)
    from witcert.v1 import inference_pb2, inference_pb2_grpc  # noqa: E402
    return inference_pb2, inference_pb2_grpc


@pytest.fixture(scope="module")
def grpc_server():
    binary = os.environ.get("WITCERT_BIN", os.path.join(ROOT, "build/server/witcert"))
    model = os.environ.get("WITCERT_MODEL", os.path.join(ROOT, "models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    http_port, grpc_port = _free_port(), _free_port()
    proc = subprocess.Popen([binary, "serve", "--model", model, "--port", str(http_port),
                             "--grpc-port", str(grpc_port), "--ctx-size", "1024",
                             "--kv-scheme", "int8-rtn", "--gate", "observe"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    channel = grpc.insecure_channel(f"127.0.0.1:{grpc_port}")
    try:
        grpc.channel_ready_future(channel).result(timeout=60)
    except grpc.FutureTimeoutError:
        proc.kill()
        pytest.fail("gRPC server did not come up: " + proc.stdout.read())
    yield channel
    channel.close()
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()


def test_health_reports_serving(grpc_server):
    stub = health_pb2_grpc.HealthStub(grpc_server)
    reply = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=10)
    assert reply.status == health_pb2.HealthCheckResponse.SERVING


def test_reflection_lists_the_inference_service(grpc_server):
    stub = reflection_pb2_grpc.ServerReflectionStub(grpc_server)
    responses = stub.ServerReflectionInfo(
        iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=10)
    names = {s.name for r in responses for s in r.list_services_response.service}
    assert "witcert.v1.Inference" in names


def test_generate_streams_tokens_and_certificate_cells(grpc_server, stubs):
    pb, pb_grpc = stubs
    stub = pb_grpc.InferenceStub(grpc_server)
    request = pb.GenerateRequest(
        chat=pb.ChatMessages(messages=[pb.ChatMessage(role="user", content="Name a color.")]),
        sampling=pb.SamplingOptions(temperature=0.0, max_tokens=8),
        emit_certificates=True)
    tokens, cert_events, finish = [], [], None
    for response in stub.Generate(request, timeout=120):
        kind = response.WhichOneof("event")
        if kind == "token":
            tokens.append(response.token)
        elif kind == "certificates":
            cert_events.append(response.certificates)
        else:
            finish = response.finish
    assert finish is not None and finish.finish_reason in ("stop", "length")
    assert 1 <= len(tokens) <= 8
    assert finish.usage.completion_tokens == len(tokens)
    # Every decode step after the first token reads the stored (int8) KV: one cell per
    # (layer, head) = 30 × 9 for SmolLM2.
    assert len(cert_events) == len(tokens) - 1
    steps = set()
    for event in cert_events:
        assert len(event.cells) == 30 * 9
        assert {(c.layer, c.head) for c in event.cells} == {(l, h) for l in range(30) for h in range(9)}
        for c in event.cells:
            assert 0.0 <= c.tv_bound_after <= c.tv_bound_before <= 1.0
            assert c.tier == pb.CERTIFICATE_TIER_A
        steps |= {c.step for c in event.cells}
    assert len(steps) == len(cert_events)
    risk = finish.risk
    assert risk.k_scheme == "int8-rtn" and risk.gate_mode == "observe"
    assert risk.tier_b_form == "per-token"
    assert risk.cells == 30 * 9 * len(cert_events)
    assert 0.0 <= risk.coverage <= 1.0
    worst = max(c.tv_bound_before for e in cert_events for c in e.cells)
    assert abs(risk.max_tv_before - worst) <= 1e-6 * max(1.0, worst)


def test_chat_unary_answers_whole(grpc_server, stubs):
    pb, pb_grpc = stubs
    stub = pb_grpc.InferenceStub(grpc_server)
    reply = stub.Chat(pb.ChatRequest(messages=[pb.ChatMessage(role="user", content="Say hi.")],
                                     sampling=pb.SamplingOptions(temperature=0.0, max_tokens=6)),
                      timeout=120)
    assert reply.text
    assert reply.finish.usage.completion_tokens >= 1


def test_sampling_extras(grpc_server, stubs):
    """The HTTP API's sampling extras over gRPC: JSON mode, stop_token_ids, logit_bias (an id
    outside the vocabulary is INVALID_ARGUMENT)."""
    import json
    pb, pb_grpc = stubs
    stub = pb_grpc.InferenceStub(grpc_server)
    ask = [pb.ChatMessage(role="user", content="Give me a JSON object describing a cat with keys name and age.")]
    reply = stub.Chat(pb.ChatRequest(messages=ask, sampling=pb.SamplingOptions(
        temperature=0.0, max_tokens=80, json_object=True)), timeout=120)
    assert reply.finish.finish_reason == "stop"
    assert isinstance(json.loads(reply.text), dict)
    events = list(stub.Generate(pb.GenerateRequest(prompt="The capital of France is", sampling=pb.SamplingOptions(
        temperature=0.0, max_tokens=6)), timeout=60))
    first = next(e.token.token_id for e in events if e.HasField("token"))
    stopped = list(stub.Generate(pb.GenerateRequest(prompt="The capital of France is", sampling=pb.SamplingOptions(
        temperature=0.0, max_tokens=6, stop_token_ids=[first])), timeout=60))
    finish = [e.finish for e in stopped if e.HasField("finish")][0]
    assert finish.finish_reason == "stop" and finish.usage.completion_tokens == 1
    banned = list(stub.Generate(pb.GenerateRequest(prompt="The capital of France is", sampling=pb.SamplingOptions(
        temperature=0.0, max_tokens=2, logit_bias={first: -100.0})), timeout=60))
    assert next(e.token.token_id for e in banned if e.HasField("token")) != first
    with pytest.raises(grpc.RpcError) as bad:
        list(stub.Generate(pb.GenerateRequest(prompt="hi", sampling=pb.SamplingOptions(
            max_tokens=2, logit_bias={10 ** 8: 1.0})), timeout=30))
    assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_gate_override_shows_in_the_risk_report(grpc_server, stubs):
    """The risk report names the policy the request ran under: the server's (observe, per-token)
    tightened by the request's override. A looser Tier B form is ignored; an unknown one, or a
    threshold outside the HTTP API's ranges, is INVALID_ARGUMENT."""
    pb, pb_grpc = stubs
    stub = pb_grpc.InferenceStub(grpc_server)
    reply = stub.Chat(pb.ChatRequest(messages=[pb.ChatMessage(role="user", content="hi")],
                                     sampling=pb.SamplingOptions(temperature=0.0, max_tokens=2),
                                     gate=pb.GateOverride(mode="repair", tier_b_form="split-max")), timeout=60)
    assert reply.finish.risk.gate_mode == "repair"
    assert reply.finish.risk.tier_b_form == "per-token"
    with pytest.raises(grpc.RpcError) as bad:
        stub.Chat(pb.ChatRequest(messages=[pb.ChatMessage(role="user", content="hi")],
                                 sampling=pb.SamplingOptions(max_tokens=2),
                                 gate=pb.GateOverride(tier_b_form="loose")), timeout=60)
    assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    # The HTTP front end's ranges: a zero threshold or a NaN δ is an error, not a silent switch.
    for gate in (pb.GateOverride(tv_threshold=0.0), pb.GateOverride(delta=float("nan")),
                 pb.GateOverride(v_threshold=-1.0)):
        with pytest.raises(grpc.RpcError) as out_of_range:
            stub.Chat(pb.ChatRequest(messages=[pb.ChatMessage(role="user", content="hi")],
                                     sampling=pb.SamplingOptions(max_tokens=2), gate=gate), timeout=60)
        assert out_of_range.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "gate." in out_of_range.value.details()


def test_status_codes_map_from_the_engine(grpc_server, stubs):
    pb, pb_grpc = stubs
    stub = pb_grpc.InferenceStub(grpc_server)
    with pytest.raises(grpc.RpcError) as bad:
        list(stub.Generate(pb.GenerateRequest(sampling=pb.SamplingOptions(max_tokens=4)), timeout=30))
    assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.RpcError) as bad_temp:
        list(stub.Generate(pb.GenerateRequest(prompt="hi", sampling=pb.SamplingOptions(
            temperature=-1.0, max_tokens=4)), timeout=30))
    assert bad_temp.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    # Roles as the HTTP API takes them: "developer" reads as "system", others are refused.
    with pytest.raises(grpc.RpcError) as bad_role:
        stub.Chat(pb.ChatRequest(messages=[pb.ChatMessage(role="tool", content="hi")],
                                 sampling=pb.SamplingOptions(max_tokens=2)), timeout=60)
    assert bad_role.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "messages[0].role" in bad_role.value.details()
    with pytest.raises(grpc.RpcError) as bad_chat_role:
        list(stub.Generate(pb.GenerateRequest(chat=pb.ChatMessages(messages=[pb.ChatMessage(role="bot", content="x")]),
                                              sampling=pb.SamplingOptions(max_tokens=2)), timeout=30))
    assert bad_chat_role.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    reply = stub.Chat(pb.ChatRequest(messages=[pb.ChatMessage(role="developer", content="Be brief."),
                                               pb.ChatMessage(role="user", content="hi")],
                                     sampling=pb.SamplingOptions(max_tokens=2)), timeout=60)
    assert reply.finish.usage.completion_tokens >= 1
    # The engine's caps on a request's lists hold over gRPC too (the HTTP API's 400s).
    for sampling in (pb.SamplingOptions(max_tokens=4, stop=["a"] * 5),
                     pb.SamplingOptions(max_tokens=4, logit_bias={i: 1.0 for i in range(1025)})):
        with pytest.raises(grpc.RpcError) as too_many:
            list(stub.Generate(pb.GenerateRequest(prompt="hi", sampling=sampling), timeout=30))
        assert too_many.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.RpcError) as too_long:
        list(stub.Generate(pb.GenerateRequest(tokens=pb.TokenIds(ids=[28] * 2000),
                                              sampling=pb.SamplingOptions(max_tokens=4)), timeout=30))
    assert too_long.value.code() == grpc.StatusCode.OUT_OF_RANGE
    # Still serving.
    reply = stub.Chat(pb.ChatRequest(messages=[pb.ChatMessage(role="user", content="ok?")],
                                     sampling=pb.SamplingOptions(max_tokens=2)), timeout=60)
    assert reply.finish.usage.completion_tokens >= 1

"""The official `openai` Python client against a real `witcert serve`."""
import json

import openai
import pytest

from conftest import SERVE_ARGS

# The GPU backend reads a prefix-cache hit's prefix as stored (metered); the CPU attends it exact.
ON_GPU = any(a in ("cuda", "--device=cuda") for a in SERVE_ARGS)


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def model(client):
    models = client.models.list().data
    assert len(models) == 1
    return models[0].id


MSG = [{"role": "user", "content": "Name a color."}]


def requests_tokenize(server, text):
    status, body = server.post("/tokenize", {"prompt": text})
    assert status == 200
    return json.loads(body)["tokens"]


def test_chat(client, model):
    r = client.chat.completions.create(model=model, messages=MSG, max_tokens=8, temperature=0)
    assert r.id.startswith("chatcmpl-")
    assert r.object == "chat.completion"
    choice = r.choices[0]
    assert choice.message.role == "assistant"
    assert isinstance(choice.message.content, str) and choice.message.content
    assert choice.finish_reason in ("stop", "length")
    assert 1 <= r.usage.completion_tokens <= 8
    assert r.usage.prompt_tokens > 0
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    report = r.model_extra["witcert"]
    for key in ("scheme", "gate", "delta_spent", "tv_bound", "coverage", "pageins",
                "uncertified_cells", "uncertified_heads"):
        assert key in report
    assert report["tier_b_form"] in ("per-token", "scale-only", "split-max")
    assert report["cells"] > 0
    assert report["tv_bound"]["max_before"] >= report["tv_bound"]["mean_before"] >= 0


def test_chat_stream_with_usage(client, model):
    whole = client.chat.completions.create(model=model, messages=MSG, max_tokens=6, temperature=0)
    stream = client.chat.completions.create(model=model, messages=MSG, max_tokens=6,
                                            temperature=0, stream=True,
                                            stream_options={"include_usage": True})
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == [whole.choices[0].finish_reason]
    # Greedy decoding: streamed and whole responses agree.
    assert text == whole.choices[0].message.content
    last = chunks[-1]
    assert last.choices == []
    assert last.usage.completion_tokens == whole.usage.completion_tokens
    assert "witcert" in last.model_extra
    assert len({c.id for c in chunks}) == 1


def test_n_choices(client, model):
    """n choices: n requests on one prompt, indexed, each with its own report; seeded ones are
    reproducible and differ from each other; greedy ones equal the single greedy answer."""
    r = client.chat.completions.create(model=model, messages=MSG, max_tokens=6, n=3,
                                       temperature=1.0, seed=7)
    assert [c.index for c in r.choices] == [0, 1, 2]
    reports = [c.model_extra["witcert"] for c in r.choices]
    assert r.model_extra["witcert"]["cells"] == sum(rep["cells"] for rep in reports) > 0
    assert r.model_extra["witcert"]["tv_bound"]["max_before"] == max(
        rep["tv_bound"]["max_before"] for rep in reports)
    assert 3 <= r.usage.completion_tokens <= 18
    again = client.chat.completions.create(model=model, messages=MSG, max_tokens=6, n=3,
                                           temperature=1.0, seed=7)
    assert [c.message.content for c in again.choices] == [c.message.content for c in r.choices]
    assert len({c.message.content for c in r.choices}) > 1  # seed + i: the choices differ

    one = client.completions.create(model=model, prompt="The capital of France is", max_tokens=5,
                                    temperature=0)
    two = client.completions.create(model=model, prompt="The capital of France is", max_tokens=5,
                                    temperature=0, n=2)
    assert [c.text for c in two.choices] == [one.choices[0].text] * 2
    assert two.usage.prompt_tokens == one.usage.prompt_tokens
    assert two.usage.completion_tokens == 2 * one.usage.completion_tokens


def test_n_choices_stream(client, model):
    whole = client.chat.completions.create(model=model, messages=MSG, max_tokens=6, n=2,
                                           temperature=0)
    stream = client.chat.completions.create(model=model, messages=MSG, max_tokens=6, n=2,
                                            temperature=0, stream=True,
                                            stream_options={"include_usage": True})
    texts, finishes, roles = {0: "", 1: ""}, {0: [], 1: []}, {0: 0, 1: 0}
    chunks = list(stream)
    for c in chunks:
        for ch in c.choices:
            texts[ch.index] += ch.delta.content or ""
            roles[ch.index] += ch.delta.role == "assistant"
            if ch.finish_reason:
                finishes[ch.index].append(ch.finish_reason)
                assert "witcert" in c.model_extra
    assert roles == {0: 1, 1: 1}
    assert [len(finishes[0]), len(finishes[1])] == [1, 1]
    assert [texts[0], texts[1]] == [c.message.content for c in whole.choices]
    assert chunks[-1].choices == []
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens


def test_logit_bias(client, model, server):
    """logit_bias +100 forces a token, -100 bans one; an id outside the vocabulary is a 400."""
    plain = client.completions.create(model=model, prompt="The capital of France is", max_tokens=4,
                                      temperature=0, logprobs=0)
    first = plain.choices[0].logprobs.tokens[0]
    ids = requests_tokenize(server, first)
    assert len(ids) == 1
    banned = client.completions.create(model=model, prompt="The capital of France is", max_tokens=4,
                                       temperature=0, logprobs=0, logit_bias={str(ids[0]): -100})
    assert banned.choices[0].logprobs.tokens[0] != first
    forced_id = requests_tokenize(server, " blue")
    assert len(forced_id) == 1
    forced = client.completions.create(model=model, prompt="The capital of France is", max_tokens=3,
                                       temperature=0, logit_bias={str(forced_id[0]): 100})
    assert forced.choices[0].text == " blue" * 3
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=model, prompt="x", max_tokens=2, logit_bias={"99999999": 1})
    assert e.value.body["param"] == "logit_bias"


def test_vllm_sampling_extras(client, model, server):
    """stop_token_ids end generation at that token; min_tokens keeps them (and EOS) from being
    sampled before the floor; repetition_penalty changes a greedy continuation that repeats."""
    prompt = "The capital of France is"
    plain = client.completions.create(model=model, prompt=prompt, max_tokens=6, temperature=0,
                                      logprobs=0)
    ids = requests_tokenize(server, plain.choices[0].logprobs.tokens[0])
    assert len(ids) == 1
    first = ids[0]
    stopped = client.completions.create(model=model, prompt=prompt, max_tokens=6, temperature=0,
                                        extra_body={"stop_token_ids": [first]})
    assert stopped.choices[0].finish_reason == "stop"
    assert stopped.usage.completion_tokens == 1
    floored = client.completions.create(model=model, prompt=prompt, max_tokens=6, temperature=0,
                                        logprobs=0,
                                        extra_body={"stop_token_ids": [first], "min_tokens": 2})
    assert floored.choices[0].logprobs.tokens[0] != plain.choices[0].logprobs.tokens[0]
    assert floored.usage.completion_tokens >= 2

    loop = "one two one two one two one two"
    greedy = client.completions.create(model=model, prompt=loop, max_tokens=8, temperature=0)
    penalized = client.completions.create(model=model, prompt=loop, max_tokens=8, temperature=0,
                                          extra_body={"repetition_penalty": 1.8})
    assert greedy.choices[0].text != penalized.choices[0].text
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=model, prompt=prompt, max_tokens=2,
                                  extra_body={"stop_token_ids": [10 ** 8]})
    assert e.value.body["param"] == "stop_token_ids"


def test_batch_prompts(client, model):
    """A list of prompts: n choices per prompt, prompt-major, each what that prompt alone gives;
    usage counts every prompt once."""
    prompts = ["The capital of France is", "One plus one is"]
    alone = [client.completions.create(model=model, prompt=q, max_tokens=4, temperature=0)
             for q in prompts]
    both = client.completions.create(model=model, prompt=prompts, max_tokens=4, temperature=0, n=2)
    assert [c.index for c in both.choices] == [0, 1, 2, 3]
    assert [c.text for c in both.choices] == [alone[0].choices[0].text] * 2 + [alone[1].choices[0].text] * 2
    assert both.usage.prompt_tokens == sum(a.usage.prompt_tokens for a in alone)
    assert both.usage.completion_tokens == 2 * sum(a.usage.completion_tokens for a in alone)


def test_echo(client, model):
    """echo: the prompt's text before the completion, whole and streamed."""
    prompt = "The capital of France is"
    plain = client.completions.create(model=model, prompt=prompt, max_tokens=4, temperature=0)
    echoed = client.completions.create(model=model, prompt=prompt, max_tokens=4, temperature=0,
                                       echo=True)
    assert echoed.choices[0].text == prompt + plain.choices[0].text
    assert echoed.usage.completion_tokens == plain.usage.completion_tokens
    streamed = "".join(c.choices[0].text for c in client.completions.create(
        model=model, prompt=prompt, max_tokens=4, temperature=0, echo=True, stream=True) if c.choices)
    assert streamed == echoed.choices[0].text
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=model, prompt=prompt, max_tokens=2, echo=True, logprobs=1)
    assert e.value.body["param"] == "echo"


def test_json_mode(client, model):
    """response_format json_object: the reply is one JSON object and nothing else (the same
    prompt unconstrained wraps it in prose and fences), whole and streamed."""
    ask = [{"role": "user", "content": "Give me a JSON object describing a cat with keys name and age."}]
    free = client.chat.completions.create(model=model, messages=ask, max_tokens=80, temperature=0)
    with pytest.raises(json.JSONDecodeError):
        json.loads(free.choices[0].message.content)  # the check below means something
    r = client.chat.completions.create(model=model, messages=ask, max_tokens=80, temperature=0,
                                       response_format={"type": "json_object"})
    assert r.choices[0].finish_reason == "stop"
    assert isinstance(json.loads(r.choices[0].message.content), dict)
    streamed = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(
        model=model, messages=ask, max_tokens=80, temperature=0, stream=True,
        response_format={"type": "json_object"}) if c.choices)
    assert streamed == r.choices[0].message.content
    with_lp = client.chat.completions.create(model=model, messages=ask, max_tokens=80, temperature=0,
                                             logprobs=True, top_logprobs=20,
                                             response_format={"type": "json_object"})
    assert with_lp.choices[0].message.content == r.choices[0].message.content
    for t in with_lp.choices[0].logprobs.content:  # masked tokens are no alternatives: all finite
        assert all(alt.logprob > -1e30 for alt in t.top_logprobs) and 1 <= len(t.top_logprobs) <= 20
    sampled = client.chat.completions.create(model=model, messages=ask, max_tokens=120,
                                             temperature=1.0, seed=5, n=3,
                                             response_format={"type": "json_object"})
    for c in sampled.choices:  # sampling too stays inside JSON: stopped replies parse
        if c.finish_reason == "stop":
            assert isinstance(json.loads(c.message.content), dict)
        else:
            assert c.message.content.lstrip().startswith("{")
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=model, messages=ask, max_tokens=8,
                                       response_format={"type": "json_schema",
                                                        "json_schema": {"name": "x", "schema": {}}})
    assert e.value.body["param"] == "response_format"


def test_guided_choice(client, model):
    """vLLM's guided_choice: the reply is exactly one of the choices, sampled or greedy."""
    ask = [{"role": "user", "content": "Is the sky green? Answer yes or no."}]
    choices = ["Yes, it is.", "No, it is not.", "Maybe"]
    r = client.chat.completions.create(model=model, messages=ask, max_tokens=16, temperature=1.0, seed=3,
                                       n=4, extra_body={"guided_choice": choices})
    for c in r.choices:
        assert c.message.content in choices and c.finish_reason == "stop"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=model, messages=ask, max_tokens=4,
                                       response_format={"type": "json_object"},
                                       extra_body={"guided_choice": choices})
    assert e.value.body["param"] == "guided_choice"


def test_models_report_the_context_in_force(make_server):
    """/v1/models' max_model_len is the context requests get: --ctx-size when set."""
    srv = make_server(args=["--ctx-size", "1000"])
    c = openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0, timeout=60)
    assert c.models.list().data[0].model_extra["max_model_len"] == 1000
    status, body = srv.post("/tokenize", {"prompt": "hi"})
    assert status == 200 and json.loads(body)["max_model_len"] == 1000
    with pytest.raises(openai.BadRequestError):
        c.completions.create(model=c.models.list().data[0].id, prompt=[1] * 1000, max_tokens=2)


def test_n_choices_prefill_the_prompt_once(client, model, server):
    """With n choices the prompt is computed once: the other choices find its blocks in the
    prefix cache (witcert_prefix_cache_hits_total grows by their full blocks)."""
    prompt = " ".join(f"item{i}" for i in range(120))  # a fresh prompt: nothing cached yet
    n_tokens = len(requests_tokenize(server, prompt))
    before = server.metric("witcert_prefix_cache_hits_total") or 0.0
    r = client.completions.create(model=model, prompt=prompt, max_tokens=3, temperature=0, n=3)
    assert len(r.choices) == 3
    hits = server.metric("witcert_prefix_cache_hits_total") - before
    full_blocks = (n_tokens - 1) // 16 * 16  # the block holding the last token is recomputed
    assert hits >= 2 * full_blocks > 0


def test_continue_final_message(client, model, server):
    """continue_final_message: the model continues the caller's start of its reply; the prompt is
    the conversation without a generation prompt, less the reply's end marker (<|im_end|>\n)."""
    convo = [{"role": "user", "content": "Name a color."}, {"role": "assistant", "content": "My favorite color is"}]
    r = client.chat.completions.create(model=model, messages=convo, max_tokens=6, temperature=0,
                                       extra_body={"continue_final_message": True,
                                                   "add_generation_prompt": False})
    assert r.choices[0].message.content
    status, body = server.post("/tokenize", {"messages": convo, "add_generation_prompt": False})
    closed = json.loads(body)["count"]
    status, body = server.post("/tokenize", {"messages": convo, "continue_final_message": True})
    assert status == 200 and json.loads(body)["count"] == closed - 2 == r.usage.prompt_tokens
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=model, messages=MSG, max_tokens=2,
                                       extra_body={"continue_final_message": True})
    assert e.value.body["param"] == "continue_final_message"


def test_completions_text_and_tokens(client, model, server):
    r = client.completions.create(model=model, prompt="The capital of France is", max_tokens=5,
                                  temperature=0)
    assert r.id.startswith("cmpl-")
    assert r.object == "text_completion"
    assert r.choices[0].text
    status, body = server.post("/tokenize", {"prompt": "The capital of France is"})
    assert status == 200
    import json
    tokens = json.loads(body)["tokens"]
    r2 = client.completions.create(model=model, prompt=tokens, max_tokens=5, temperature=0)
    assert r2.choices[0].text == r.choices[0].text
    assert r2.usage.prompt_tokens == len(tokens)


def test_completions_stream(client, model):
    chunks = list(client.completions.create(model=model, prompt="One, two, three,",
                                            max_tokens=4, temperature=0, stream=True))
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")
    assert "".join(c.choices[0].text for c in chunks)


def test_stop(client, model):
    base = client.completions.create(model=model, prompt="Count: 1, 2, 3, 4,", max_tokens=12,
                                     temperature=0).choices[0].text
    assert len(base) > 4
    stop = base[len(base) // 2:len(base) // 2 + 2]
    cut = base.index(stop)
    r = client.completions.create(model=model, prompt="Count: 1, 2, 3, 4,", max_tokens=12,
                                  temperature=0, stop=[stop])
    assert r.choices[0].finish_reason == "stop"
    assert r.choices[0].text == base[:cut]


def test_seed_reproducible(client, model):
    kw = dict(model=model, messages=[{"role": "user", "content": "Tell me a story."}],
              max_tokens=12, temperature=1.0, top_p=0.95, seed=1234)
    a = client.chat.completions.create(**kw).choices[0].message.content
    b = client.chat.completions.create(**kw).choices[0].message.content
    assert a == b


def test_prefix_cache_hit_serves_the_same_tokens(client, model, server):
    """A prompt that starts with an earlier request's prompt reuses its cached KV blocks. On the
    CPU backend it gets exactly the tokens and logprobs a cold cache gives (the prefix is
    attended exact); on the GPU the hit reads the stored prefix, metered like a later prompt
    chunk: its prompt rows add certificate cells and its logprobs move by the store's rounding."""
    system = {"role": "system", "content": "You are a careful assistant who answers in full "
                                            "sentences and never skips a step of reasoning."}
    kw = dict(model=model, max_tokens=10, temperature=0, logprobs=True)
    hits0 = server.metric("witcert_prefix_cache_hits_total")
    first = client.chat.completions.create(
        messages=[system, {"role": "user", "content": "What is a lighthouse for?"}], **kw)
    hits1 = server.metric("witcert_prefix_cache_hits_total")
    again = client.chat.completions.create(
        messages=[system, {"role": "user", "content": "What is a lighthouse for?"}], **kw)
    hits2 = server.metric("witcert_prefix_cache_hits_total")
    assert hits2 - hits1 >= 16  # at least one 16-token block attached
    assert again.choices[0].message.content == first.choices[0].message.content
    lp = lambda r: [(t.token, t.logprob) for t in r.choices[0].logprobs.content]
    cells = lambda r: r.model_extra["witcert"]["cells"]
    if not ON_GPU:
        assert lp(again) == lp(first)
        assert cells(again) == cells(first)  # the exact prefix adds no cell
    else:
        assert cells(again) > cells(first)  # the hit's prompt rows read the store, metered
        assert [t for t, _ in lp(again)] == [t for t, _ in lp(first)]
        for (_, a), (_, b) in zip(lp(again), lp(first)):
            assert abs(a - b) <= 0.05
    assert hits0 is not None and hits1 >= hits0
    assert server.metric("witcert_prefix_cache_queries_total") >= hits2


def test_max_completion_tokens_and_sampling_params(client, model):
    r = client.chat.completions.create(model=model, messages=MSG, max_completion_tokens=3,
                                       temperature=0.5, top_p=0.9, seed=7,
                                       presence_penalty=0.5, frequency_penalty=0.5,
                                       extra_body={"top_k": 20, "min_p": 0.05})
    assert r.usage.completion_tokens <= 3


def test_chat_logprobs(client, model):
    r = client.chat.completions.create(model=model, messages=MSG, max_tokens=4, temperature=0,
                                       logprobs=True, top_logprobs=2)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens
    for t in content:
        assert t.logprob <= 0
        assert len(t.top_logprobs) == 2
        # Greedy: the chosen token is the most likely one.
        assert t.logprob >= t.top_logprobs[0].logprob - 1e-5
        assert bytes(t.bytes).decode("utf-8", "replace") == t.token or t.bytes


def test_completion_logprobs(client, model):
    r = client.completions.create(model=model, prompt="Hello", max_tokens=3, temperature=0,
                                  logprobs=2)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == r.usage.completion_tokens
    assert all(len(t) <= 2 for t in lp.top_logprobs)


def test_gate_tightening_in_request(client, model):
    tight = client.chat.completions.create(model=model, messages=MSG, max_tokens=2,
                                           extra_body={"witcert": {"tv_threshold": 0.001}})
    assert tight.model_extra["witcert"]["tv_threshold"] == pytest.approx(0.001)
    loose = client.chat.completions.create(model=model, messages=MSG, max_tokens=2,
                                           extra_body={"witcert": {"tv_threshold": 0.9}})
    # Looser than the config's 0.05: ignored.
    assert loose.model_extra["witcert"]["tv_threshold"] == pytest.approx(0.05)


def test_repair_mode_in_request_pages_exact_blocks_in(client, model, server):
    """A request may switch its own gate to repair: with a threshold no cell meets, the gate pages
    exact blocks in (on --device cuda: the GPU gate), the bounds after it drop, and the server's
    promotion counter moves."""
    before = server.metric("witcert_kv_promotions_total")
    r = client.chat.completions.create(model=model, messages=MSG, max_tokens=6, temperature=0,
                                       extra_body={"witcert": {"gate": "repair",
                                                               "tv_threshold": 1e-9}})
    report = r.model_extra["witcert"]
    assert report["gate"] == "repair"
    assert report["pageins"] > 0
    assert report["tv_bound"]["mean_after"] < report["tv_bound"]["mean_before"]
    assert report["tv_bound"]["max_after"] <= report["tv_bound"]["max_before"]
    assert server.metric("witcert_kv_promotions_total") >= before + report["pageins"]


def test_errors_then_still_serving(client, model):
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="no-such-model", messages=MSG, max_tokens=2)
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=model, messages=MSG, max_tokens=2, temperature=5)
    assert e.value.body["param"] == "temperature"
    for n in (0, 17):
        with pytest.raises(openai.BadRequestError) as e:
            client.chat.completions.create(model=model, messages=MSG, max_tokens=2, n=n)
        assert e.value.body["param"] == "n"
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=model, messages=MSG, max_tokens=-1)
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=model, prompt=["a", ""], max_tokens=2)
    r = client.chat.completions.create(model=model, messages=MSG, max_tokens=2)
    assert r.choices[0].message.content is not None


def test_context_length_exceeded(client, model):
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=model, prompt=[1] * 9000, max_tokens=2)
    assert e.value.body["code"] == "context_length_exceeded"

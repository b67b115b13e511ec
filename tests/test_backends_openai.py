"""The OpenAI-compatible backend against real servers on 127.0.0.1: `transformers serve` on the embedded
model, a scripted HTTP server for the retry paths, and a port nobody listens on."""

import json
import time
from dataclasses import replace

import pytest
from local_server import LocalServer, chat_reply
from openai.types.chat import ChatCompletion

from reasoning_study.backends.openai import (
    ApiOptions,
    OpenAIBackend,
    api_options,
    chat_body,
    completion_from_response,
    run_sync,
)
from reasoning_study.backends.presets import ModelPreset, ignored_parameters, load_backend
from reasoning_study.backends.request import Request, SamplingParams, chat
from reasoning_study.backends.server import free_port, serve_with_transformers
from reasoning_study.backends.weights import embedded_model_dir
from reasoning_study.store import GenerationStore, generate_cached

pytestmark = pytest.mark.slow  # real OpenAI-compatible servers on 127.0.0.1 (transformers serve)


# --- a real server: `transformers serve` on the embedded model ----------------------------------------


@pytest.fixture(scope="module")
def served():
    "(base_url, model name) of the embedded model served by `transformers serve` for this module."
    model_dir = str(embedded_model_dir())
    with serve_with_transformers(model_dir, threads=1, startup_timeout=240) as base_url:
        yield base_url, model_dir


def backend_for(served, switch="never", **options) -> OpenAIBackend:
    base_url, model_dir = served
    preset = ModelPreset("smollm2-served", model_dir, "openai", switch, SamplingParams(max_tokens=32))
    return load_backend(preset, base_url=base_url, retry_base_delay=0.05, **options)


def test_chat_answered(served):
    [[c]] = backend_for(served).generate([chat("What is 2+2?", sampling=SamplingParams(max_tokens=40))])
    assert (c.status, c.finish_reason, c.error) == ("answered", "stop", None)
    assert c.answer and c.text == c.answer  # SmolLM2 does not think
    assert c.prompt_tokens > 10 and 0 < c.completion_tokens <= 40
    assert c.latency_s > 0


def test_tiny_budget_is_truncated(served):
    [[c]] = backend_for(served).generate([chat("Tell me a long story.", sampling=SamplingParams(max_tokens=3))])
    assert (c.status, c.finish_reason, c.completion_tokens) == ("truncated", "length", 3)


def test_n_samples_follow_the_seed_contract(served):
    backend = backend_for(served, max_concurrency=1)  # the server seeds a global generator: one at a time
    sampling = SamplingParams(temperature=0.7, max_tokens=6, n=2, seed=5)
    [pair] = backend.generate([chat("Name a colour.", sampling=sampling)])
    [[alone]] = backend.generate(
        [chat("Name a colour.", sampling=SamplingParams(temperature=0.7, max_tokens=6, seed=sampling.sample_seed(1)))]
    )
    assert [(c.sample_index, c.seed) for c in pair] == [(0, 5), (1, sampling.sample_seed(1))]
    assert pair[1].text == alone.text


def test_concurrent_requests_come_back_in_order(served):
    budgets = [4, 1, 3, 2]
    requests = [chat("Write a poem about the sea.", sampling=SamplingParams(max_tokens=b)) for b in budgets]
    answers = backend_for(served, max_concurrency=3).generate(requests)
    assert [a.completion_tokens for [a] in answers] == budgets  # each answer sits with its own request
    assert all(a.status == "truncated" for [a] in answers)


def test_template_thinking_switch_is_accepted(served):
    # chat_template_kwargs reaches the template (SmolLM2's ignores enable_thinking)
    [[c]] = backend_for(served, switch="template").generate(
        [chat("Say hi.", thinking=False, sampling=SamplingParams(max_tokens=4))]
    )
    assert c.status in ("answered", "truncated") and c.error is None


def test_transformers_serve_ignores_response_format(served):
    # `transformers serve` lists response_format among its unused fields: it logs a warning and decodes freely,
    # so the greedy reply is the same with and without the schema (a caller must validate; vLLM/SGLang enforce it)
    schema = {
        "type": "object",
        "properties": {"answer": {"type": "integer"}},
        "required": ["answer"],
        "additionalProperties": False,
    }
    sampling = SamplingParams(max_tokens=12)
    [constrained], [free] = backend_for(served).generate(
        [
            chat("What is 2+2? Reply in JSON.", response_schema=schema, sampling=sampling),
            chat("What is 2+2? Reply in JSON.", sampling=sampling),
        ]
    )
    assert constrained.error is None and constrained.status in ("answered", "truncated")
    assert constrained.text == free.text


def test_transformers_serve_drops_images_for_a_text_model(served):
    # a text-only model served by `transformers serve` keeps only the text parts of a message: the image is dropped
    # without an error, so the study must check the preset's `multimodal` flag before it sends a figure
    from PIL import Image

    sampling = SamplingParams(max_tokens=8)
    [seen], [plain] = backend_for(served).generate(
        [
            chat("Describe the picture.", images=[Image.new("RGB", (16, 16), "red")], sampling=sampling),
            chat("Describe the picture.", sampling=sampling),
        ]
    )
    assert seen.error is None and seen.text == plain.text


def test_transformers_serve_ignores_logprobs(served):
    # `transformers serve` accepts the field and returns no log-probabilities: "not available", the answer unharmed
    [[c]] = backend_for(served).generate([chat("What is 2+2?", sampling=SamplingParams(max_tokens=4, logprobs=True))])
    assert c.status in ("answered", "truncated") and c.text and c.token_logprobs is None


def test_unsupported_features_are_reported_not_retried(served):
    # `transformers serve` knows neither continue_final_message nor token-id prompts: 4xx, no retry, no raise
    answers = backend_for(served).generate([chat("Hi", prefill="Hello"), Request(prompt_token_ids=[1, 2, 3])])
    [[prefill]], [[tokens]] = answers[:1], answers[1:]
    assert prefill.status == "error" and "HTTP 422" in prefill.error and "continue_final_message" in prefill.error
    assert prefill.error.endswith("(1 attempt)")
    assert tokens.status == "error" and "HTTP 400" in tokens.error and "(1 attempt)" in tokens.error


# --- retries: a dead port and a scripted flaky server -------------------------------------------------


def test_dead_port_ends_in_error_quickly():
    preset = ModelPreset("nowhere", "some-model", "openai", "never")
    backend = load_backend(
        preset, base_url=f"http://127.0.0.1:{free_port()}/v1", max_retries=2, retry_base_delay=0.05, timeout=2
    )
    started = time.perf_counter()
    sampling = SamplingParams(n=2, seed=3)
    [[a, b]] = backend.generate([chat("Hello", sampling=sampling)])
    assert time.perf_counter() - started < 10
    assert [(c.status, c.seed) for c in (a, b)] == [("error", 3), ("error", sampling.sample_seed(1))]
    assert "APIConnectionError" in a.error and "(3 attempts)" in a.error


RECORDED = chat_reply("4", reasoning="2 and 2 make 4.")


class ScriptedServer(LocalServer):
    "Answers chat completions with a scripted list of (status, headers), then RECORDED, each after `delay`."

    def __init__(self, failures, delay=0.0):
        super().__init__()
        self.failures, self.delay = list(failures), delay
        self.in_flight = self.peak = 0

    def respond(self, body):
        with self.lock:
            self.record(body)
            status, headers = self.failures.pop(0) if self.failures else (200, {})
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
        time.sleep(self.delay)
        with self.lock:
            self.in_flight -= 1
        return status, headers, RECORDED if status == 200 else {"error": {"message": f"scripted {status}"}}


def scripted_backend(server, **options):
    preset = ModelPreset("scripted", "deepseek-reasoner", "openai", "api")
    return load_backend(preset, base_url=server.base_url, retry_base_delay=0.01, **options)


def test_concurrency_is_bounded():
    with ScriptedServer([], delay=0.3) as server:
        started = time.perf_counter()
        answers = scripted_backend(server, max_concurrency=3).generate([chat(f"Q{k}") for k in range(9)])
        elapsed = time.perf_counter() - started
    assert server.peak == 3 and len(server.bodies) == 9
    assert all(a.status == "answered" for [a] in answers)
    assert 0.85 < elapsed < 10  # three waves of 0.3 s, not nine


def test_server_errors_and_rate_limits_are_retried():
    with ScriptedServer([(503, {}), (500, {}), (429, {"Retry-After": "0"})]) as server:
        [[c]] = scripted_backend(server, max_retries=4).generate([chat("What is 2+2?")])
    assert len(server.bodies) == 4
    assert (c.status, c.reasoning, c.answer, c.prompt_tokens) == ("answered", "2 and 2 make 4.", "4", 9)


def test_retries_give_up_with_the_servers_message():
    with ScriptedServer([(502, {})] * 3) as server:
        [[c]] = scripted_backend(server, max_retries=2).generate([chat("Hi")])
    assert len(server.bodies) == 3
    assert c.status == "error" and "HTTP 502" in c.error and "scripted 502" in c.error and "(3 attempts)" in c.error


def test_client_errors_are_not_retried():
    with ScriptedServer([(400, {}), (401, {})]) as server:
        [[bad]] = scripted_backend(server).generate([chat("Hi")])
    assert len(server.bodies) == 1 and "HTTP 400" in bad.error


def test_what_goes_over_the_wire():
    with ScriptedServer([]) as server:
        sampling = SamplingParams(temperature=0.6, top_p=0.95, top_k=20, max_tokens=50, n=2, seed=1, stop=["\n\n"])
        preset = ModelPreset("hybrid", "Qwen/Qwen3-8B", "openai", "template")
        load_backend(preset, base_url=server.base_url, max_concurrency=1).generate(
            [chat("Q?", prefill="Solution 1:", thinking=False, sampling=sampling)]
        )
    first, second = sorted(server.bodies, key=lambda b: b["seed"])
    assert (first["seed"], second["seed"]) == (1, sampling.sample_seed(1))
    assert first["messages"][-1] == {"role": "assistant", "content": "Solution 1:"}
    assert first["continue_final_message"] is True and first["add_generation_prompt"] is False
    assert first["chat_template_kwargs"] == {"enable_thinking": False}
    assert (first["top_k"], first["max_completion_tokens"], first["stop"], first["temperature"]) == (
        20,
        50,
        ["\n\n"],
        0.6,
    )
    assert "n" not in first


def test_a_thinking_prefill_is_not_sent_through_continue_final_message():
    # the hybrid's template would close the thinking before the prefill: refused, nothing sent, the batch goes on
    with ScriptedServer([]) as server:
        preset = ModelPreset("hybrid", "Qwen/Qwen3-8B", "openai", "template")
        [[refused], [thinking_on], [fine]] = load_backend(preset, base_url=server.base_url).generate(
            [chat("Q?", prefill="<think>\nLet me", thinking=True), chat("Q?", prefill="Solution 1:"), chat("Q?")]
        )
    assert len(server.bodies) == 1 and "prefill" not in json.dumps(server.bodies[0])
    assert refused.status == "error" and "prefill_mode='tokens'" in refused.error and refused.latency_s == 0
    assert thinking_on.status == "error" and "empty <think></think>" in thinking_on.error  # thinking on by default
    assert fine.status == "answered"


class TokenizingServer(LocalServer):
    "Answers vLLM's /tokenize (the chat as ids 1..k, the prefill as 900..) and /completions (a text completion)."

    def respond(self, body):
        with self.lock:
            self.record(body)
        if "add_special_tokens" in body:  # a /tokenize body
            if "messages" in body:
                return 200, {}, {"tokens": list(range(1, 2 + len(body["messages"]))), "count": 0, "max_model_len": 99}
            return (
                200,
                {},
                {"tokens": [900 + k for k in range(len(body["prompt"].split()))], "count": 0, "max_model_len": 99},
            )
        if isinstance(body.get("prompt"), list):  # /completions with token ids
            return (
                200,
                {},
                {
                    "id": "c",
                    "object": "text_completion",
                    "created": 0,
                    "model": "m",
                    "choices": [{"index": 0, "text": " so 4.\n</think>\n\n4", "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": len(body["prompt"]), "completion_tokens": 5, "total_tokens": 0},
                },
            )
        return 200, {}, RECORDED


def test_tokens_mode_sends_the_rendered_prompt_and_the_prefill_tokens():
    with TokenizingServer() as server:
        preset = ModelPreset("hybrid", "Qwen/Qwen3-8B", "openai", "template")
        backend = load_backend(preset, base_url=server.base_url, prefill_mode="tokens", max_concurrency=1)
        sampling = SamplingParams(max_tokens=40, n=2, seed=4)
        [pair, [plain]] = backend.generate(
            [chat("Q?", system="S.", prefill="<think>\nLet me see", thinking=True, sampling=sampling), chat("Hi")]
        )
    # once per request, not per sample
    chat_tokenize, prefill_tokenize = [b for b in server.bodies if "add_special_tokens" in b]
    assert chat_tokenize == {
        "model": "Qwen/Qwen3-8B",
        "messages": [{"role": "system", "content": "S."}, {"role": "user", "content": "Q?"}],
        "add_generation_prompt": True,
        "add_special_tokens": False,
        "chat_template_kwargs": {"enable_thinking": True},
    }
    assert prefill_tokenize == {"model": "Qwen/Qwen3-8B", "prompt": "<think>\nLet me see", "add_special_tokens": False}
    completions = sorted((b for b in server.bodies if isinstance(b.get("prompt"), list)), key=lambda b: b["seed"])
    assert [b["prompt"] for b in completions] == [[1, 2, 3, 900, 901, 902, 903]] * 2 and [
        b["seed"] for b in completions
    ] == [4, sampling.sample_seed(1)]
    assert all(b["max_tokens"] == 40 for b in completions)
    assert [(c.reasoning, c.answer, c.status, c.prompt_tokens) for c in pair] == [
        ("Let me see so 4.", "4", "answered", 7)
    ] * 2
    assert plain.status == "answered" and backend.continues_prefill  # a request without a prefill stays a chat request


def test_tokens_mode_reports_a_server_without_tokenize():
    with ScriptedServer([]) as server:  # answers every POST with a chat completion: no token ids
        preset = ModelPreset("hybrid", "Qwen/Qwen3-8B", "openai", "template")
        [[c]] = load_backend(preset, base_url=server.base_url, prefill_mode="tokens").generate(
            [chat("Q?", prefill="<think>\n")]
        )
    assert c.status == "error" and "did not answer with token ids" in c.error and len(server.bodies) == 1


def test_hosted_providers_get_only_what_they_take():
    with ScriptedServer([]) as server:
        deepseek = load_backend("deepseek-r1", base_url=server.base_url)
        [[r1]] = deepseek.generate([chat("Q?", sampling=SamplingParams(temperature=0.2, max_tokens=20480, seed=3))])
        gpt = load_backend("gpt-4o-mini", base_url=server.base_url)
        [[g]] = gpt.generate([chat("Q?", sampling=SamplingParams(temperature=0.2, max_tokens=16384, seed=3))])
        o4 = load_backend("o4-mini", base_url=server.base_url)
        [[o]] = o4.generate([chat("Q?", sampling=SamplingParams(temperature=1.0, max_tokens=16384, seed=3))])
    first, second, third = server.bodies
    assert {k: v for k, v in first.items() if k != "messages"} == {"model": "deepseek-reasoner", "max_tokens": 20480}
    assert {k: v for k, v in second.items() if k != "messages"} == {
        "model": "gpt-4o-mini-2024-07-18",
        "temperature": 0.2,
        "top_p": 1.0,
        "max_completion_tokens": 16384,
        "seed": 3,
    }
    assert {k: v for k, v in third.items() if k != "messages"} == {
        "model": "o4-mini-2025-04-16",
        "max_completion_tokens": 16384,
        "seed": 3,
    }
    assert r1.status == g.status == o.status == "answered"


class HiddenReasoningServer(LocalServer):
    "Answers as o4-mini does: the answer only, and in the usage how many of the completion tokens were reasoning."

    def respond(self, body):
        with self.lock:
            self.record(body)
        reply = {**chat_reply("4", usage=(9, 300)), "model": "o4-mini-2025-04-16"}
        reply["usage"]["completion_tokens_details"] = {"reasoning_tokens": 256}
        return 200, {}, reply


def test_penalties_go_where_each_server_reads_them():
    penalized = SamplingParams(
        temperature=0.2, max_tokens=64, seed=3, repetition_penalty=1.05, presence_penalty=0.5, frequency_penalty=0.25
    )
    with ScriptedServer([]) as server:
        load_backend(ModelPreset("served", "m", "openai"), base_url=server.base_url).generate(
            [chat("Q?", sampling=penalized), chat("Q?")]
        )
        openai_penalties = replace(penalized, repetition_penalty=1.0)  # gpt-4o-mini refuses any other
        load_backend("gpt-4o-mini", base_url=server.base_url).generate([chat("Q?", sampling=openai_penalties)])
        load_backend("deepseek-v3", base_url=server.base_url).generate([chat("Q?", sampling=penalized)])
    served, plain, gpt, deepseek = server.bodies
    # vLLM / SGLang: OpenAI's two penalties in the body, repetition_penalty as an extra field
    assert (served["presence_penalty"], served["frequency_penalty"], served["repetition_penalty"]) == (0.5, 0.25, 1.05)
    assert not {"presence_penalty", "frequency_penalty", "repetition_penalty"} & set(plain)  # none set: none sent
    assert (gpt["presence_penalty"], gpt["frequency_penalty"]) == (0.5, 0.25) and "repetition_penalty" not in gpt
    # deepseek-chat honours OpenAI's two and has no repetition_penalty: not sent, recorded as ignored
    assert (deepseek["presence_penalty"], deepseek["frequency_penalty"]) == (0.5, 0.25)
    assert "repetition_penalty" not in deepseek and ignored_parameters("deepseek-v3", penalized) == [
        "repetition_penalty",
        "seed",
    ]


def test_reasoning_effort_is_sent_keyed_and_the_hidden_reasoning_counted(tmp_path):
    asked = [chat("Q?", sampling=SamplingParams(temperature=1.0, max_tokens=1000, seed=3))]
    with HiddenReasoningServer() as server, GenerationStore(tmp_path / "s.sqlite") as store:
        high = load_backend("o4-mini", base_url=server.base_url, reasoning_effort="high")
        [[c]] = generate_cached(high, asked, store, progress=False)
        default = load_backend("o4-mini", base_url=server.base_url)  # the provider's default effort
        [[d]] = generate_cached(default, asked, store, progress=False)
        rows = store.to_pandas()
    sent_high, sent_default = server.bodies
    assert sent_high["reasoning_effort"] == "high" and "reasoning_effort" not in sent_default
    assert (c.answer, c.completion_tokens, c.reasoning_tokens, d.reasoning_tokens) == ("4", 300, 256, 256)
    assert len(rows) == 2 and rows.reasoning_tokens.tolist() == [256, 256]  # two generations, two keys
    assert [json.loads(s).get("reasoning_effort") for s in rows.sampling_json] == ["high", None]


@pytest.mark.parametrize(
    "preset, sampling, message",
    [
        ("o4-mini", SamplingParams(temperature=0.2, max_tokens=100), "temperature=0.2 is rejected"),
        ("o4-mini", SamplingParams(temperature=1.0, top_p=0.9, max_tokens=100), "top_p=0.9 is rejected"),
        (
            "gpt-4o-mini",
            SamplingParams(temperature=0.2, max_tokens=20480),
            "max_tokens=20480 is above the provider's cap of 16384",
        ),
        (
            "deepseek-v3",
            SamplingParams(temperature=0.2, max_tokens=20480),
            "max_tokens=20480 is above the provider's cap of 8192",
        ),
        ("deepseek-r1", SamplingParams(max_tokens=100, logprobs=True), "logprobs=True is rejected"),
        ("o4-mini", SamplingParams(temperature=1.0, max_tokens=100, logprobs=True), "logprobs=True is rejected"),
    ],
)
def test_a_run_the_provider_cannot_honour_fails_before_its_first_request(preset, sampling, message):
    with ScriptedServer([]) as server:
        backend = load_backend(preset, base_url=server.base_url)
        with pytest.raises(ValueError, match=f"preset '{preset}'") as e:
            backend.generate(
                [chat("Fine", sampling=SamplingParams(temperature=1.0, max_tokens=8)), chat("Q?", sampling=sampling)]
            )
    assert message in str(e.value) and server.bodies == []


def test_images_and_response_format_over_the_wire():
    import base64
    import io

    from PIL import Image

    from reasoning_study.prompts.overthinking import JUDGE_SCHEMA

    figure = Image.new("RGB", (5, 4), (10, 200, 30))
    with ScriptedServer([]) as server:
        preset = ModelPreset("vlm", "Qwen/Qwen2.5-VL-7B-Instruct", "openai", "never", multimodal=True)
        backend = load_backend(preset, base_url=server.base_url, max_concurrency=1)
        [c], [tokens] = backend.generate(
            [
                chat("Which failure mode?", system="Judge.", images=[figure, figure], response_schema=JUDGE_SCHEMA),
                Request(prompt_token_ids=[1, 2], images=[figure]),
            ]
        )
    [body] = server.bodies  # the token-exact request with an image never left the client
    assert c.status == "answered" and tokens.status == "error" and "takes no images" in tokens.error
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "response", "schema": JUDGE_SCHEMA, "strict": True},
    }
    system, user = body["messages"]
    assert system == {"role": "system", "content": "Judge."}
    assert [p["type"] for p in user["content"]] == ["image_url", "image_url", "text"] and user["content"][2][
        "text"
    ] == "Which failure mode?"
    url = user["content"][0]["image_url"]["url"]
    assert url.startswith("data:image/png;base64,")
    decoded = Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))
    assert (decoded.format, decoded.size, decoded.getpixel((0, 0))) == ("PNG", (5, 4), (10, 200, 30))
    assert {
        "images",
        "response_schema",
    } <= backend.capabilities  # what it sends; the server decides what it does with them


class ScoringServer(LocalServer):
    "Answers chats, and /completions with token ids, with one log-probability per completion token when asked (as vLLM does)."

    def respond(self, body):
        with self.lock:
            self.record(body)
        reply = chat_reply("4.", usage=(9, 2))
        if isinstance(body.get("prompt"), list):
            reply = {
                "id": "c",
                "object": "text_completion",
                "created": 0,
                "model": "m",
                "usage": reply["usage"],
                "choices": [{"index": 0, "text": "4.", "finish_reason": "stop"}],
            }
            if "logprobs" in body:
                reply["choices"][0]["logprobs"] = {
                    "tokens": ["4", "."],
                    "token_logprobs": [-0.5, -2.0],
                    "top_logprobs": None,
                    "text_offset": [0, 1],
                }
        elif body.get("logprobs"):
            reply["choices"][0]["logprobs"] = {
                "content": [
                    {"token": t, "logprob": v, "bytes": None, "top_logprobs": []}
                    for t, v in (("4", -0.25), (".", -1.5))
                ]
            }
        return 200, {}, reply


def test_logprobs_over_the_wire():
    with ScoringServer() as server:
        backend = load_backend(ModelPreset("served", "my-model", "openai"), base_url=server.base_url, max_concurrency=1)
        scored = SamplingParams(logprobs=True)
        [[chat_scored], [plain], [tokens_scored]] = backend.generate(
            [chat("Q?", sampling=scored), chat("Q?"), Request(prompt_token_ids=[1, 2], sampling=scored)]
        )
    asked, not_asked, tokens = server.bodies
    assert asked["logprobs"] is True and "logprobs" not in not_asked and tokens["logprobs"] == 0
    assert (chat_scored.token_logprobs, plain.token_logprobs, tokens_scored.token_logprobs) == (
        (-0.25, -1.5),
        None,
        (-0.5, -2.0),
    )
    assert (
        "logprobs" in backend.capabilities
        and "logprobs" not in load_backend("deepseek-r1", base_url=server.base_url).capabilities
    )


def test_plain_requests_send_no_new_fields():
    with ScriptedServer([]) as server:
        scripted_backend(server).generate([chat("Hi")])
    [body] = server.bodies
    assert "response_format" not in body and body["messages"] == [{"role": "user", "content": "Hi"}]


# --- pure parts ------------------------------------------------------------------------------------------


def test_reasoning_field_variants():
    def read(message, finish="stop", prefill="", thinking=None):
        response = ChatCompletion.model_validate(
            {**RECORDED, "choices": [{"index": 0, "finish_reason": finish, "message": message}]}
        )
        return completion_from_response(response, prefill, thinking)

    c = read({"role": "assistant", "content": "4", "reasoning_content": "2+2=4"})  # DeepSeek, older vLLM
    assert (c.reasoning, c.answer, c.status) == ("2+2=4", "4", "answered")
    c = read({"role": "assistant", "content": "4", "reasoning": "2+2=4"})  # newer vLLM, SGLang
    assert (c.reasoning, c.answer) == ("2+2=4", "4")
    c = read({"role": "assistant", "content": "<think>2+2=4</think>\n\n4"})  # no reasoning parser
    assert (c.reasoning, c.answer) == ("2+2=4", "4")
    c = read({"role": "assistant", "content": None, "reasoning_content": "Let me see"}, finish="length")
    assert (c.reasoning, c.answer, c.status) == ("Let me see", "", "truncated")
    c = read({"role": "assistant", "content": "", "reasoning_content": "Let me see"})  # stopped without an answer
    assert c.status == "truncated"
    c = read({"role": "assistant", "content": "4", "reasoning_content": " so 4."}, prefill="<think>\n2+2")
    assert (c.reasoning, c.answer) == ("2+2 so 4.", "4")


def test_missing_server_or_key_is_a_clear_error(monkeypatch):
    for name in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "DEEPSEEK_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    served = ModelPreset("served", "some-model", "openai")  # a served model: no server of its own, no key
    with pytest.raises(ValueError, match="base_url="):
        load_backend(served)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    backend = load_backend(served)
    assert (backend.options.base_url, backend.options.api_key, backend.model_id) == (
        "http://127.0.0.1:9/v1",
        "EMPTY",
        "some-model",
    )
    # a hosted preset calls its provider with the key of its own variable, and says which one is missing
    monkeypatch.setenv("OPENAI_API_KEY", "sk-" + "o" * 32)
    with pytest.raises(ValueError, match=r"\$DEEPSEEK_API_KEY, which is not set"):
        load_backend("deepseek-r1")
    monkeypatch.setenv("DEEPSEEK_API_KEY", "sk-" + "d" * 32)
    backend = load_backend("deepseek-r1")
    assert (backend.options.base_url, backend.options.api_key, backend.model_id) == (
        "https://api.deepseek.com",
        "sk-" + "d" * 32,
        "deepseek-reasoner",
    )
    assert load_backend("o4-mini").options.api_key == "sk-" + "o" * 32


def test_options_are_validated():
    with pytest.raises(ValueError, match="max_tokens_field"):
        ApiOptions(base_url="http://x/v1", max_tokens_field="tokens")
    with pytest.raises(ValueError, match="max_concurrency"):
        ApiOptions(base_url="http://x/v1", max_concurrency=0)
    preset = ModelPreset("p", "m", "openai", options=(("base_url", "http://x/v1"), ("model", "served-name")))
    assert OpenAIBackend(preset, api_options(preset, env={})).model_id == "served-name"
    body = chat_body(
        chat("Hi"),
        0,
        "m",
        ApiOptions(base_url="http://x/v1", max_tokens_field="max_tokens", extra_body={"min_p": 0.05}),
    )
    assert body["max_tokens"] == 256 and body["extra_body"] == {"min_p": 0.05}
    # what the store key must see is no extra field: a sampling parameter, the reasoning effort
    for hidden in ({"repetition_penalty": 1.1}, {"reasoning_effort": "high"}):
        with pytest.raises(ValueError, match="where the store key sees them"):
            ApiOptions(base_url="http://x/v1", extra_body=hidden)
    with pytest.raises(ValueError, match="reasoning_effort must be one of"):
        ApiOptions(base_url="http://x/v1", reasoning_effort="maximal")


def test_generate_works_inside_a_running_event_loop():
    import asyncio

    async def notebook_cell():  # Jupyter runs cells inside a loop: generate must still work
        preset = ModelPreset("nowhere", "m", "openai")
        backend = load_backend(preset, base_url=f"http://127.0.0.1:{free_port()}/v1", max_retries=0)
        return backend.generate([chat("Hi")])

    [[c]] = asyncio.run(notebook_cell())
    assert c.status == "error"
    assert run_sync(asyncio.sleep(0, result=7)) == 7


def test_reasoning_effort_is_refused_for_a_model_that_does_not_reason():
    "A bad parameter fails before the first request: gpt-4o-mini would answer reasoning_effort with an HTTP 400 each time."
    from reasoning_study.backends.openai import check_options
    from reasoning_study.backends.presets import get_preset

    check_options(get_preset("o4-mini").with_options(reasoning_effort="high"))
    with pytest.raises(ValueError, match="reasoning_effort='high' is for reasoning models"):
        check_options(get_preset("gpt-4o-mini").with_options(reasoning_effort="high"))

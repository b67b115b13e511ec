"""vLLM's OpenAI-compatible server on 127.0.0.1 answering the project's `openai` backend, on the tiny Qwen3.

The model is `qwen3-tiny-random`: random weights (its text is noise, but greedy decoding in float32 is
deterministic) with the real Qwen3 tokenizer and thinking template, so what a chat template does to a
request is exactly what it does to Qwen3-8B. The server renders chat prompts with that template, so a
greedy chat answer must equal the offline engine's (thinking on and off); token-exact prompts go through
/completions; `n` seeded samples follow the seed contract.

Prefills: the template closes the thinking of the last assistant message, so `continue_final_message`
cannot continue a thinking prefill (the backend refuses it, nothing is sent); `prefill_mode="tokens"`
renders the chat with the server's /tokenize, appends the prefill's tokens and sends the ids to
/completions: the same prompt tokens, and the same greedy text, as the offline path. One server and one
offline engine for the module (each start costs about a minute on a small CPU). Skipped without vLLM;
`make test-vllm` runs it with the CPU build."""

import json
import urllib.request

import pytest
from conftest import need_vllm

from reasoning_study.backends.contract import render_prompt_ids
from reasoning_study.backends.presets import ModelPreset, load_backend
from reasoning_study.backends.request import Request, SamplingParams, chat

# one vLLM server at a time on this 2-core, 24 GiB machine: beside a rehearsal (its engines and its API stand-ins
# servers) a second server failed to start its engine core (two fresh-clone CI runs); alone it starts in seconds
pytestmark = pytest.mark.xdist_group("rehearsal")

GREEDY = SamplingParams(max_tokens=24)
THINKING_PREFILL = "<think>\nLet me"


@pytest.fixture(scope="module")
def qwen3_engine():
    "The offline vLLM backend on the tiny Qwen3 (float32 and eager on CPU: comparable token for token)."
    need_vllm()
    import torch

    from reasoning_study.backends import vllm

    precision = dict(batch_invariant=True) if torch.cuda.is_available() else dict(dtype="float32", enforce_eager=True)
    preset = ModelPreset("qwen3-tiny-vllm", "embedded:qwen3-tiny-random", "vllm", "template", GREEDY)
    before = set(vllm._ENGINES)
    yield load_backend(preset, max_model_len=2048, gpu_memory_utilization=0.3, **precision)
    for key in set(vllm._ENGINES) - before:  # shut down only this module's engine, while pytest still captures output
        core = getattr(getattr(vllm._ENGINES.pop(key), "llm_engine", None), "engine_core", None)
        if hasattr(core, "shutdown"):
            core.shutdown()


@pytest.fixture(scope="module")
def served():
    "(base_url, model folder) of the tiny Qwen3 served by `vllm serve` for this module."
    need_vllm()
    from reasoning_study.backends.server import serve_with_vllm
    from reasoning_study.backends.weights import tiny_qwen3_dir

    model_dir = str(tiny_qwen3_dir())
    with serve_with_vllm(model_dir, dtype="float32", max_model_len=2048, startup_timeout=900) as base_url:
        yield base_url, model_dir


def client(served, **options):
    base_url, model_dir = served
    preset = ModelPreset("qwen3-tiny-served", model_dir, "openai", "template", GREEDY)
    return load_backend(preset, base_url=base_url, retry_base_delay=0.05, max_concurrency=4, **options)


def as_served(completions):
    return [(c.text, c.status, c.completion_tokens, c.prompt_tokens) for [c] in completions]


def test_greedy_chat_equals_the_offline_engine(served, qwen3_engine):
    requests = [
        chat(q, thinking=t, sampling=GREEDY)
        for q, t in (
            ("What is 2+2?", False),
            ("Name three primary colours.", True),
            ("Write one sentence about the sea.", None),
        )
    ]
    answers = client(served).generate(requests)
    assert all(c.error is None for [c] in answers), [c.error for [c] in answers]
    assert as_served(answers) == as_served(qwen3_engine.generate(requests))


def test_token_prompts_equal_the_offline_engine(served, qwen3_engine):
    prefilled = chat("What is 12 times 3?", prefill=THINKING_PREFILL, thinking=True, sampling=GREEDY)
    exact = Request(
        prompt_token_ids=render_prompt_ids(qwen3_engine.tokenizer, prefilled, "template"),
        thinking=True,
        sampling=GREEDY,
    )
    [[by_ids]] = client(served).generate([exact])
    [[offline]] = qwen3_engine.generate([prefilled])
    assert by_ids.status != "error", by_ids.error
    assert (by_ids.text, by_ids.prompt_tokens) == (offline.text, offline.prompt_tokens)


def tokenize(base_url: str, body: dict) -> list[int]:
    from reasoning_study.backends.openai import token_ids_of, tokenize_url

    call = urllib.request.Request(
        tokenize_url(base_url), data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(call, timeout=60) as reply:
        return token_ids_of(json.loads(reply.read()))


@pytest.mark.parametrize(
    "prefill, thinking", [(THINKING_PREFILL, True), (THINKING_PREFILL, None), ("Solution 1:", False)]
)
def test_the_servers_tokenize_renders_the_offline_prompt(served, qwen3_engine, prefill, thinking):
    from reasoning_study.backends.openai import tokenize_bodies

    base_url, model_dir = served
    request = chat("What is 2+2?", system="Be brief.", prefill=prefill, thinking=thinking)
    rendered, continuation = tokenize_bodies(request, model_dir, "template")
    assert tokenize(base_url, rendered) + tokenize(base_url, continuation) == render_prompt_ids(
        qwen3_engine.tokenizer, request, "template"
    )


def test_a_thinking_prefill_in_tokens_mode_is_the_offline_prompt(served, qwen3_engine):
    requests = [
        chat("What is 2+2?", prefill=THINKING_PREFILL, thinking=True, sampling=GREEDY),
        chat("Count to three.", prefill="<think>\nOne, two", sampling=GREEDY),  # thinking on by the template's default
        chat("Name a colour.", prefill="Solution 1:", thinking=False, sampling=GREEDY),
    ]
    answers = client(served, prefill_mode="tokens").generate(requests)
    offline = qwen3_engine.generate(requests)
    assert all(c.error is None for [c] in answers), [c.error for [c] in answers]
    assert [c.prompt_tokens for [c] in answers] == [
        len(render_prompt_ids(qwen3_engine.tokenizer, r, "template")) for r in requests
    ]
    assert as_served(answers) == as_served(offline)
    assert [(c.reasoning, c.answer) for [c] in answers] == [(c.reasoning, c.answer) for [c] in offline]


def test_continue_mode_refuses_a_thinking_prefill(served, qwen3_engine):
    refused = [
        chat("What is 2+2?", prefill=THINKING_PREFILL, thinking=True, sampling=GREEDY),
        chat("What is 2+2?", prefill="Solution 1:", sampling=GREEDY),
    ]  # thinking on: the template would close it first
    # the template's own non-thinking prompt
    plain = chat("Name a colour.", prefill="Solution 1:", thinking=False, sampling=GREEDY)
    [*errors, [continued]] = client(served).generate(refused + [plain])
    assert all(c.status == "error" and "prefill_mode='tokens'" in c.error for [c] in errors), [
        c.error for [c] in errors
    ]
    [[offline]] = qwen3_engine.generate([plain])
    assert continued.error is None and (continued.text, continued.prompt_tokens) == (
        offline.text,
        offline.prompt_tokens,
    )


def test_seeded_samples_follow_the_contract(served):
    sampling = SamplingParams(temperature=1.0, max_tokens=12, n=3, seed=13)
    backend = client(served)
    [three] = backend.generate([chat("Tell me a word.", thinking=False, sampling=sampling)])
    [[alone]] = backend.generate(
        [
            chat(
                "Tell me a word.",
                thinking=False,
                sampling=SamplingParams(temperature=1.0, max_tokens=12, seed=sampling.sample_seed(2)),
            )
        ]
    )
    assert [c.seed for c in three] == [sampling.sample_seed(i) for i in range(3)] and three[2].text == alone.text
    assert all(c.status in ("answered", "truncated") for c in three)

"""The vLLM backend against the transformers backend on the embedded model (SmolLM2-135M-Instruct).

Both run the same weights in float32 on the CPU, so greedy decoding must give the same tokens: for plain
chat, for continuing a partial assistant message, and for token-exact prompts. The batched prober (vLLM,
one call with prefix caching) must give the same per-prefix answers as the KV-reuse prober (transformers)
on a real trace. Skipped without vLLM; `make test-vllm` runs them with the community CPU build."""

import pytest

from reasoning_study.backends.presets import load_backend
from reasoning_study.backends.request import Request, SamplingParams, chat
from reasoning_study.backends.vllm import cacheable_tokens
from reasoning_study.probing.prober import (
    plan_probes,
    probe_batched,
    probe_kv,
    render_prompt,
    trace_request,
    trace_text,
)
from reasoning_study.prompts.overthinking import question_prompt, termination_suffix

# the embedded model's vLLM engine, started once (conftest.vllm_engine)
pytestmark = pytest.mark.xdist_group("vllm-engines")

GREEDY = SamplingParams(max_tokens=40)
PROMPTS = [
    "What is 2+2?",
    "Name three primary colours.",
    "Write one sentence about the sea.",
    "A shop sells pens at 3 dollars each. How much do 7 pens cost?",
    "Translate 'good morning' into French.",
]


@pytest.fixture(scope="module")
def engine(vllm_engine):
    return vllm_engine


@pytest.fixture(scope="module")
def hf(engine):
    """The transformers backend in the engine's numerics (dtype and device: float32 on the CPU build; on a GPU host the
    engine's dtype on CUDA), not its own default: exact greedy tokens are compared only between like numerics."""
    dtype, device = engine.numerics.split("/")
    backend = load_backend("smollm2-135m", num_threads=1, batch_size=8, dtype=dtype, device=device)
    assert backend.numerics == engine.numerics
    return backend


def rows(completions):
    "(text, status, completion tokens) of one-sample completions: what parity compares."
    return [(c.text, c.status, c.completion_tokens) for [c] in completions]


def test_both_backends_render_the_same_prompt_tokens(hf, engine):
    for request in [chat(p) for p in PROMPTS] + [chat("Hi", prefill="Hello! I am"), chat("Hi", system="Be brief.")]:
        assert render_prompt(engine, request) == render_prompt(hf, request)


def test_greedy_chat_matches_transformers(hf, engine):
    requests = [chat(p, sampling=GREEDY) for p in PROMPTS]
    ours = rows(engine.generate(requests))
    assert ours == rows(hf.generate(requests))
    assert all(status in ("answered", "truncated") and tokens > 0 for _, status, tokens in ours)


def test_continuing_a_prefill_matches_transformers(hf, engine):
    requests = [
        chat("What is 12 times 3?", prefill="12 times 3 is", sampling=GREEDY),
        chat("Name an animal.", prefill="Sure! One animal is the", sampling=GREEDY),
    ]
    vllm_out, hf_out = engine.generate(requests), hf.generate(requests)
    assert rows(vllm_out) == rows(hf_out)
    assert not vllm_out[0][0].text.startswith("12 times 3 is")  # the prefill is context, not output


def test_token_exact_prompts_match_chat_and_transformers(hf, engine):
    chats = [chat(p, sampling=GREEDY) for p in PROMPTS[:3]]
    exact = [Request(prompt_token_ids=render_prompt(hf, r), sampling=GREEDY) for r in chats]
    by_chat, by_ids, by_hf = engine.generate(chats), engine.generate(exact), hf.generate(exact)
    assert rows(by_chat) == rows(by_ids) == rows(by_hf)


def test_seeded_samples_are_reproducible(engine):
    sampling = SamplingParams(temperature=1.0, max_tokens=12, n=4, seed=7)
    first, again = engine.generate([chat("Tell me a word.", sampling=sampling)] * 2)
    [later] = engine.generate([chat("Tell me a word.", sampling=sampling)])
    assert [c.text for c in first] == [c.text for c in again] == [c.text for c in later]
    assert [c.seed for c in first] == [sampling.sample_seed(i) for i in range(4)]
    assert len({c.text for c in first}) > 1


def test_batched_prober_matches_kv_prober_on_a_real_trace(hf, engine):
    question = "A train travels 60 km in one hour. How far does it travel in 2.5 hours?"
    request = trace_request(hf, question_prompt(question), SamplingParams(max_tokens=120))
    [[trace]] = hf.generate([request])
    text = trace_text(trace, thinking=False)
    suffix = termination_suffix("stop_now", False)
    kv_plan, vllm_plan = (
        plan_probes(hf, render_prompt(hf, request), text, suffix),
        plan_probes(engine, render_prompt(engine, request), text, suffix),
    )
    assert [vllm_plan.prompt_token_ids(i) for i in range(len(vllm_plan))] == [
        kv_plan.prompt_token_ids(i) for i in range(len(kv_plan))
    ]
    assert len(kv_plan) >= 4, text
    probe = SamplingParams(max_tokens=10, logprobs=True)  # with the log-probabilities trial-answer confidence reads
    kv = probe_kv(hf, kv_plan, probe)
    [batched], computed = probe_batched(engine, [(vllm_plan, range(len(vllm_plan)))], probe)
    assert [c.text for c in batched] == [c.text for c in kv]
    gaps = [abs(a - b) for v, k in zip(batched, kv) for a, b in zip(v.token_logprobs, k.token_logprobs)]
    assert (
        [len(c.token_logprobs) for c in batched]
        == [c.completion_tokens for c in batched]
        == [c.completion_tokens for c in kv]
    )
    assert max(gaps) < 1e-4, max(gaps)  # the same float32 weights on the CPU, other kernels (1.8e-05 seen)
    prompt_tokens = sum(c.prompt_tokens for c in batched)
    cached = [c.cached_prompt_tokens for c in batched]
    assert cached == [
        cacheable_tokens(c.prompt_tokens, engine.block_size, vllm_plan.cut(i))  # every whole block of the trace prefix
        for i, c in enumerate(batched)
    ]
    assert computed is not None and computed < prompt_tokens  # warm-up run + probes, less than the probes alone
    print(
        f"batched prober: {len(batched)} probes, {sum(cached)}/{prompt_tokens} prompt tokens from the prefix cache "
        f"({sum(cached) / prompt_tokens:.1%}, block size {engine.block_size}); engine computed {computed}; "
        f"largest log-probability gap to the KV prober {max(gaps):.2e}"
    )

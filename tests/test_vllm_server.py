"""vLLM's OpenAI-compatible server on 127.0.0.1 answering the project's `openai` backend (embedded model).

The server renders chat prompts with the model's template, so a greedy chat answer must equal the
offline engine's; token-exact prompts go through /completions; a prefill continues the assistant
message (vLLM's `continue_final_message`); `n` seeded samples follow the seed contract. Skipped without
vLLM; `make test-vllm` runs it with the CPU build."""
import pytest

from reasoning_study.backends.core import ModelPreset, Request, SamplingParams, chat, load_backend, render_prompt_ids
from reasoning_study.backends.transformers import embedded_model_dir

GREEDY = SamplingParams(max_tokens=32)


@pytest.fixture(scope="module")
def served(vllm_engine):
    from reasoning_study.backends.vllm import serve_with_vllm
    model_dir = str(embedded_model_dir())
    with serve_with_vllm(model_dir, dtype="float32", max_model_len=2048, startup_timeout=600) as base_url:
        yield base_url, model_dir


@pytest.fixture(scope="module")
def client(served):
    base_url, model_dir = served
    preset = ModelPreset("smollm2-vllm-served", model_dir, "openai", "never", SamplingParams(max_tokens=32))
    return load_backend(preset, base_url=base_url, retry_base_delay=0.05, max_concurrency=4)


def test_greedy_chat_equals_the_offline_engine(client, vllm_engine):
    requests = [chat(q, sampling=GREEDY) for q in ("What is 2+2?", "Name three primary colours.", "Write one sentence about the sea.")]
    served, offline = client.generate(requests), vllm_engine.generate(requests)
    assert [(c.text, c.status, c.completion_tokens) for [c] in served] == [(c.text, c.status, c.completion_tokens) for [c] in offline]
    assert [c.prompt_tokens for [c] in served] == [c.prompt_tokens for [c] in offline]


def test_token_prompts_and_prefill_equal_the_offline_engine(client, vllm_engine):
    prefilled = chat("What is 12 times 3?", prefill="12 times 3 is", sampling=GREEDY)
    exact = Request(prompt_token_ids=render_prompt_ids(vllm_engine.tokenizer, prefilled), sampling=GREEDY)
    [[by_prefill], [by_ids]] = client.generate([prefilled, exact])
    [[offline]] = vllm_engine.generate([prefilled])
    assert by_prefill.status != "error" and by_ids.status != "error", (by_prefill.error, by_ids.error)
    assert by_ids.text == offline.text and by_ids.prompt_tokens == offline.prompt_tokens
    assert by_prefill.text == offline.text


def test_seeded_samples_follow_the_contract(client):
    sampling = SamplingParams(temperature=1.0, max_tokens=12, n=3, seed=13)
    [three] = client.generate([chat("Tell me a word.", sampling=sampling)])
    [[alone]] = client.generate([chat("Tell me a word.", sampling=SamplingParams(temperature=1.0, max_tokens=12, seed=sampling.sample_seed(2)))])
    assert [c.seed for c in three] == [sampling.sample_seed(i) for i in range(3)] and three[2].text == alone.text
    assert all(c.status in ("answered", "truncated") for c in three)

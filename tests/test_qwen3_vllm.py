"""The vLLM backend against the transformers backend on a real Qwen3 tokenizer and thinking template.

`qwen3-tiny-random` (a seeded random-weight 2-layer Qwen3 with grouped-query attention and q/k norms, the
real Qwen3 tokenizer and template) runs in float32 on the CPU in both backends, so greedy decoding must give
the same tokens: thinking on and off, a prefill inside the thinking block, a forced `</think>`, token-exact
prompts; and vLLM's batched prober must return the KV prober's answers on a thinking trace. The text is
noise (random weights); what is compared is exact. Skipped without vLLM; `make test-vllm` runs it with the
community CPU build."""

import pytest
from conftest import need_vllm

from reasoning_study.backends.presets import ModelPreset, load_backend
from reasoning_study.backends.request import Request, SamplingParams, chat
from reasoning_study.backends.weights import QWEN3_THINK_IDS
from reasoning_study.probing.prober import plan_probes, probe_batched, probe_kv, render_prompt, trace_request
from reasoning_study.probing.trace import split_trace
from reasoning_study.prompts.overthinking import termination_suffix

# the embedded model's vLLM engine, started once (conftest.vllm_engine)
pytestmark = pytest.mark.xdist_group("vllm-engines")

GREEDY = SamplingParams(max_tokens=24)
TRACE = (
    "First, list the numbers that are small enough.\n\nWait, 12 is too large on its own, so drop it.\n\n"
    "Now try pairs: 5 + 13 reaches 18.\n\nWait, let me double-check: 5 + 13 = 18.\n\nSo one subset is {5, 13}."
)


@pytest.fixture(scope="module")
def engine(vllm_engine):  # after the shared engine, so that the session fixture shuts both down
    need_vllm()
    preset = ModelPreset("qwen3-tiny-random-vllm", "embedded:qwen3-tiny-random", "vllm", "template", GREEDY)
    return load_backend(preset, max_model_len=2048, gpu_memory_utilization=0.3, dtype="float32", enforce_eager=True)


@pytest.fixture(scope="module")
def hf(engine):
    """The transformers backend in the engine's numerics (dtype and device: float32 on the CPU build, float32 on CUDA on
    a GPU host), not its own default (bfloat16 on CUDA): exact greedy tokens are compared only between like numerics."""
    dtype, device = engine.numerics.split("/")
    backend = load_backend("qwen3-tiny-random", num_threads=1, batch_size=8, dtype=dtype, device=device)
    assert backend.numerics == engine.numerics
    return backend


def rows(completions):
    """(text, status, tokens) of one-sample completions. A reply cut by its budget may end inside a multi-byte
    character: transformers decodes the dangling bytes as U+FFFD, vLLM's incremental detokenizer holds them back."""
    return [(c.text.removesuffix("\ufffd"), c.status, c.completion_tokens) for [c] in completions]


def test_both_backends_render_qwen3_prompts_alike(hf, engine):
    requests = [
        chat("What is 2+2?", thinking=True),
        chat("What is 2+2?", thinking=False),
        chat("Hi", system="Be brief.", thinking=True, prefill="<think>\nLet me"),
        chat("Hi", thinking=True, prefill="<think>\nShort.\n</think>\n\n"),
    ]
    for request in requests:
        assert render_prompt(engine, request) == render_prompt(hf, request)
    assert engine.revision == hf.revision and engine.revision.startswith("random-")


def test_greedy_outputs_equal_transformers_thinking_on_and_off(hf, engine):
    requests = [
        chat("What is 2+2?", thinking=True, sampling=GREEDY),
        chat("What is 2+2?", thinking=False, sampling=GREEDY),
        chat("Name a colour.", thinking=True, prefill="<think>\nLet me", sampling=GREEDY),
        chat("Name a colour.", thinking=True, prefill="<think>\nA colour.\n</think>\n\n", sampling=GREEDY),
    ]
    ours, theirs = engine.generate(requests), hf.generate(requests)
    assert rows(ours) == rows(theirs)
    assert len({text for text, _, _ in rows(ours)}) == len(requests)  # varied tokens: the comparison could fail
    [on], [off], [inside], [closed] = ours
    assert on.status == "truncated" and on.answer == ""  # random weights never close </think>
    assert off.reasoning == "" and inside.reasoning.startswith("Let me")
    assert closed.reasoning == "A colour." and closed.answer == closed.text.strip()


def test_token_exact_prompts_equal_chat(hf, engine):
    request = chat("Name a colour.", thinking=True, prefill="<think>\nLet me", sampling=GREEDY)
    exact = Request(prompt_token_ids=render_prompt(hf, request), sampling=GREEDY)
    [[by_chat]], [[by_ids]], [[by_hf]] = engine.generate([request]), engine.generate([exact]), hf.generate([exact])
    assert by_chat.completion_tokens == by_ids.completion_tokens == by_hf.completion_tokens
    assert rows([[by_chat]]) == rows([[by_ids]]) == rows([[by_hf]])


def test_batched_prober_equals_the_kv_prober_on_a_thinking_trace(hf, engine):
    request = trace_request(hf, "Which subsets of {5, 12, 13} sum to 18?", GREEDY, thinking=True)
    assert request.prefill == "<think>\n"
    prompt_ids = render_prompt(hf, request)
    assert prompt_ids == render_prompt(engine, request)
    probes = plan_probes(hf, prompt_ids, split_trace(TRACE, hf.tokenizer), termination_suffix("stop_now", True))
    # every probe closes the thinking with the real token
    assert all(QWEN3_THINK_IDS[1] in s for s in probes.suffix_ids)
    sampling = SamplingParams(max_tokens=10)
    kv = probe_kv(hf, probes, sampling)
    [batched], computed = probe_batched(engine, [(probes, range(len(probes)))], sampling)
    assert [c.text for c in batched] == [c.text for c in kv] and len({c.text for c in kv}) > 1
    assert [c.prompt_tokens for c in batched] == [len(probes.prompt_token_ids(i)) for i in range(len(probes))]
    # the engine reports its prefix-cache hits (a trace this short fits in one CPU block of 128)
    assert computed is not None


def test_numerics_are_part_of_the_generation_key(hf, engine):
    "The vLLM engine names its numerics (float32 on this CPU build), so its generations never answer for bf16 GPU ones."
    import types

    from reasoning_study.store import generation_key, key_numerics

    assert engine.numerics == ("float32/cuda" if engine.numerics.endswith("cuda") else "float32/cpu")
    assert key_numerics(engine) == engine.numerics and key_numerics(hf) is None  # transformers fp32 CPU: the legacy key
    request = chat("Hi", sampling=GREEDY)
    gpu = types.SimpleNamespace(
        name=engine.name, model_id=engine.model_id, revision=engine.revision, numerics="bfloat16/cuda"
    )
    assert generation_key(engine, request, 0) != generation_key(gpu, request, 0)

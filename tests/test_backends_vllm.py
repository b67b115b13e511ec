"""The vLLM backend: its pure parts everywhere; the engine itself only where vLLM is installed (GPU hosts,
or the community CPU build), on the embedded model."""

import sys
from dataclasses import replace
from types import SimpleNamespace
from unittest import mock

import pytest
from conftest import HAVE_VLLM
from transformers import AutoTokenizer

from reasoning_study.backends import vllm as vb
from reasoning_study.backends.contract import expected_thinking, render_prompt_ids, stage_batch_size
from reasoning_study.backends.contract import tokenize_continuation as encode
from reasoning_study.backends.presets import ModelPreset, get_preset, load_backend
from reasoning_study.backends.request import Request, SamplingParams, chat
from reasoning_study.backends.vllm import VLLM_INSTALL_HINT, cacheable_tokens, from_preset, vllm_options
from reasoning_study.backends.weights import embedded_model_dir

# the embedded model's vLLM engine, started once (conftest.vllm_engine)
pytestmark = pytest.mark.xdist_group("vllm-engines")


def test_module_imports_without_vllm():
    import reasoning_study.backends.vllm  # noqa: F401

    if not HAVE_VLLM:
        assert "vllm" not in sys.modules


def test_missing_extra_names_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # makes `import vllm` fail, as on a machine without it
    with pytest.raises(ImportError, match=r"pip install 'reasoning_study\[vllm\]'"):
        from_preset("qwen3-8b")
    with pytest.raises(ImportError, match="reasoning_study\\[vllm\\]"):
        load_backend("qwen3-8b", gpu_memory_utilization=0.5)
    assert VLLM_INSTALL_HINT == "pip install 'reasoning_study[vllm]'"


def test_unknown_options_are_listed():
    with pytest.raises(ValueError, match="known: .*gpu_memory_utilization"):
        vllm_options(ModelPreset("p", "m", "vllm", options=(("gpu_memory", 0.5),)))


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(embedded_model_dir())


def test_prompt_is_template_then_prefill(tokenizer):
    base = render_prompt_ids(tokenizer, chat("What is 2+2?"))
    with_prefill = render_prompt_ids(tokenizer, chat("What is 2+2?", prefill="<think>\nTwo and two"))
    assert with_prefill == base + encode(tokenizer, "<think>\nTwo and two")
    assert tokenizer.decode(base).endswith("<|im_start|>assistant\n")


def test_enable_thinking_reaches_a_template_that_uses_it(tokenizer):
    hybrid = AutoTokenizer.from_pretrained(embedded_model_dir())
    hybrid.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
        "<|im_start|>assistant\n{% if enable_thinking is defined and not enable_thinking %}"
        "<think>\n\n</think>\n\n{% endif %}"
    )
    off = hybrid.decode(render_prompt_ids(hybrid, chat("Hi", thinking=False), "template"))
    default = hybrid.decode(render_prompt_ids(hybrid, chat("Hi"), "template"))
    fixed = hybrid.decode(render_prompt_ids(hybrid, chat("Hi", thinking=False), "never"))  # not a switchable preset
    assert off.endswith("<think>\n\n</think>\n\n") and not default.endswith("</think>\n\n") and fixed == default


def test_token_exact_requests_pass_through(tokenizer):
    assert render_prompt_ids(tokenizer, Request(prompt_token_ids=[3, 1, 4])) == [3, 1, 4]
    with pytest.raises(ValueError, match="no `prefill`"):
        render_prompt_ids(tokenizer, Request(prompt_token_ids=[3], prefill="x"))


def test_expected_thinking_follows_the_request_then_the_switch():
    switches = ("template", "always", "never", "api")
    assert [expected_thinking(s, chat("x", thinking=True)) for s in switches] == [True] * 4
    assert [expected_thinking(s, chat("x")) for s in switches] == [None, True, False, None]


@pytest.mark.parametrize("preset", ["vl-rethinker-7b", "mm-eureka-qwen-7b", "qwen2.5-vl-7b-instruct", "dualmind-vlm"])
def test_a_release_repetition_penalty_reaches_vllm(preset):
    "The penalty of a release (1.05 for these four) is in the preset's sampling and in vLLM's SamplingParams."
    kwargs = vb.sample_params_kwargs(get_preset(preset).sampling, 1)
    assert (kwargs["repetition_penalty"], kwargs["presence_penalty"], kwargs["frequency_penalty"]) == (1.05, 0.0, 0.0)


def test_the_penalties_always_reach_vllm():
    "vLLM applies a model's generation config only to a request without sampling parameters: every penalty is sent."
    plain = vb.sample_params_kwargs(SamplingParams(), 0)
    asked = vb.sample_params_kwargs(
        SamplingParams(repetition_penalty=1.3, presence_penalty=-0.5, frequency_penalty=2), 0
    )
    assert {k: plain[k] for k in plain if k.endswith("_penalty")} == {
        "repetition_penalty": 1.0,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
    }
    assert (asked["repetition_penalty"], asked["presence_penalty"], asked["frequency_penalty"]) == (1.3, -0.5, 2)


# --- the engine (skipped without vLLM) -------------------------------------------------------------------


@pytest.fixture(scope="module")
def engine(vllm_engine):
    return vllm_engine


def test_presets_with_the_same_weights_share_one_engine(engine):
    twin = ModelPreset("smollm2-vllm-twin", engine.model_id, "vllm", "always", options=engine.preset.options)
    assert load_backend(twin).llm is engine.llm


def test_engine_seed_contract_prefill_and_truncation(engine):
    sampling = SamplingParams(temperature=0.9, max_tokens=16, n=3, seed=21)
    [three], [[prefilled], [short]] = (
        engine.generate([chat("Name an animal.", sampling=sampling)]),
        engine.generate(
            [
                chat("What is 2+2?", prefill="The answer is"),
                chat("Count to ten.", sampling=SamplingParams(max_tokens=2)),
            ]
        ),
    )
    [[alone]] = engine.generate(
        [chat("Name an animal.", sampling=SamplingParams(temperature=0.9, max_tokens=16, seed=sampling.sample_seed(2)))]
    )
    assert [c.seed for c in three] == [sampling.sample_seed(i) for i in range(3)] and three[2].text == alone.text
    assert len({c.text for c in three}) > 1  # different seeds, different samples
    assert prefilled.status == "answered" and not prefilled.text.startswith("The answer is")
    assert (short.status, short.finish_reason, short.completion_tokens) == ("truncated", "length", 2)
    assert engine.revision.startswith("gguf-")


def test_engine_isolates_a_prompt_that_does_not_fit(engine):
    too_long = Request(prompt_token_ids=[1] * 3000)  # max_model_len is 2048
    [[bad], [good]] = engine.generate([too_long, chat("Hi", sampling=SamplingParams(max_tokens=4))])
    assert bad.status == "error" and "max_model_len" in bad.error
    assert good.status in ("answered", "truncated")


def test_engine_probes_prefixes_with_prefix_caching(engine):
    steps = " ".join(f"Step {k}: {k} times 3 is {3 * k}." for k in range(1, 31))
    trace = render_prompt_ids(engine.tokenizer, chat("Triple 1 to 30.")) + encode(engine.tokenizer, steps)
    engine.generate_token_prompts([trace], SamplingParams(max_tokens=1))
    prefixes = [trace[:k] for k in range(len(trace) // 2, len(trace) + 1, len(trace) // 6)]
    probes = engine.generate_token_prompts(prefixes, SamplingParams(max_tokens=6))
    assert [p.prompt_tokens for [p] in probes] == [len(x) for x in prefixes]
    assert all(p.status != "error" for [p] in probes)
    assert [p.cached_prompt_tokens for [p] in probes] == [cacheable_tokens(len(x), engine.block_size) for x in prefixes]


def test_response_schema_constrains_decoding(engine):
    import json

    import jsonschema

    schema = {
        "type": "object",
        "properties": {"animal": {"type": "string", "maxLength": 20}, "legs": {"type": "integer"}},
        "required": ["animal", "legs"],
        "additionalProperties": False,
    }
    request = chat(
        "Name an animal and its number of legs.", response_schema=schema, sampling=SamplingParams(max_tokens=60)
    )
    [[c]] = engine.generate([request])
    assert c.status == "answered", c
    jsonschema.validate(json.loads(c.answer), schema)


def test_the_failure_judge_sends_its_schema_as_structured_output(engine):
    "Constrained, the judge's reply is the schema's JSON from its first token; the free reply of the 135M model is not."
    from reasoning_study.probing.judge import JudgeCase, judge_traces
    from reasoning_study.prompts.overthinking import JUDGE_SCHEMA

    case = JudgeCase(
        "c1",
        "smollm2",
        "champ",
        "What is 7 times 8?",
        "56",
        "54",
        "7 times 8 is 56.",
        "7 times 8 is 56.\nWait, 7 times 8 is 54.\nFinal answer: 54",
    )
    sampling = SamplingParams(max_tokens=200)
    constrained, free = (
        judge_traces(engine, [case], retries=0, sampling=sampling, structured=s).iloc[0] for s in (True, False)
    )
    first_key = next(iter(JUDGE_SCHEMA["properties"]))
    assert constrained["raw_reply"].replace(" ", "").startswith('{"' + first_key + '":'), constrained["raw_reply"][:80]
    assert not free["raw_reply"].lstrip().startswith('{"' + first_key)
    # the tiny model may fill a free-text field until the budget ends: then the row says so, nothing is invented
    assert constrained["status"] == "ok" or (
        constrained["status"] == "parse_error" and constrained["finish_reason"] == "length"
    )


def test_images_for_a_text_only_model_are_an_error_row(engine):
    from PIL import Image

    [[bad], [good]] = engine.generate(
        [
            chat("Describe the figure.", images=(Image.new("RGB", (8, 8), "red"),)),
            chat("Hi", sampling=SamplingParams(max_tokens=4)),
        ]
    )
    assert bad.status == "error" and bad.error
    assert good.status in ("answered", "truncated")


# --- several engines, whole stages, options (pure: no engine) ---------------------------------------------------


def test_a_stage_goes_whole_to_vllm_and_in_batches_elsewhere(tmp_path):
    "A counting stand-in through the store: one generate call for a stage on a continuous backend, batches of 8 otherwise."
    from reasoning_study.backends.request import make_completion
    from reasoning_study.store import GenerationStore, generate_cached

    class Counting:
        name, model_id, revision = "stand-in", "stand-in", "0"

        def __init__(self, continuous):
            self.capabilities, self.calls = frozenset({"continuous_batching"} if continuous else ()), []

        def generate(self, requests):
            self.calls.append(len(requests))
            return [[make_completion("ok", "stop")] for _ in requests]

    stage = [chat(f"Question {k}") for k in range(30)]
    for continuous, calls in ((True, [30]), (False, [8, 8, 8, 6])):
        backend = Counting(continuous)
        with GenerationStore(tmp_path / f"{continuous}.sqlite") as store:
            generate_cached(backend, stage, store, batch_size=stage_batch_size(backend, len(stage)), progress=False)
        assert backend.calls == calls
    assert "continuous_batching" in vb.VllmBackend.capabilities


def test_trust_remote_code_reaches_the_engine_and_its_tokenizer(tmp_path):
    seen = {}

    def LLM(**kwargs):
        seen.update(kwargs)
        return SimpleNamespace(
            get_tokenizer=lambda: "engine tokenizer",
            llm_engine=SimpleNamespace(
                model_config=SimpleNamespace(max_model_len=4096, dtype="torch.bfloat16"),
                vllm_config=SimpleNamespace(cache_config=SimpleNamespace(block_size=16)),
            ),
        )

    preset = ModelPreset("remote", "internlm/Intern-S1-mini", "vllm", "always", options=(("trust_remote_code", True),))
    before = set(vb._ENGINES)
    with mock.patch.dict(sys.modules, {"vllm": SimpleNamespace(LLM=LLM)}):
        backend = load_backend(preset, model_dir=str(tmp_path))
    for key in set(vb._ENGINES) - before:
        del vb._ENGINES[key]
    assert seen["trust_remote_code"] is True and backend.tokenizer == "engine tokenizer"


H200 = 139 * vb.GIB
SIZES = {
    "Qwen/Qwen3-8B": vb.EngineMemory(int(16.4e9), 147456, 40960),
    "Qwen/Qwen3-4B-Instruct-2507": vb.EngineMemory(int(8.0e9), 147456, 8192),
    "Qwen/Qwen3-30B-A3B-Instruct-2507": vb.EngineMemory(int(61.1e9), 98304, 262144),
}


def sizes(preset, max_model_len=None):
    return replace(SIZES[preset.model_id], context=max_model_len or SIZES[preset.model_id].context)


def test_three_engines_share_one_gpu_sized_to_their_contexts():
    roles = {
        "model": vb.EngineRole("qwen3-8b-overthinking"),
        "extractor": vb.EngineRole("qwen3-4b-extractor", context=8192),
        "judge": vb.EngineRole("qwen3-judge", context=71680),
    }
    planned = vb.co_resident_options(roles, gpu_bytes=H200, memory=sizes)
    shares = {r: o["gpu_memory_utilization"] for r, o in planned.items()}
    assert sum(shares.values()) <= 0.9 and max(shares, key=shares.get) == "judge"
    assert planned["judge"]["max_model_len"] == 71680 and "max_model_len" not in planned["model"]
    for role, options in planned.items():  # each engine holds its weights and a KV cache for one full-length request
        need = sizes(get_preset(roles[role].preset), options.get("max_model_len"))
        assert need.needed <= options["gpu_memory_utilization"] * H200
    # the judge at its 262k context, a tighter budget
    with pytest.raises(ValueError, match="more than 80% of this GPU"):
        vb.co_resident_options(
            {**roles, "judge": vb.EngineRole("qwen3-judge")}, budget=0.8, gpu_bytes=H200, memory=sizes
        )
    with pytest.raises(ValueError, match="add up to 1.10"):  # known before any GPU is asked
        vb.co_resident_options(
            {
                "model": vb.EngineRole("qwen3-8b-overthinking", {"gpu_memory_utilization": 0.6}),
                "judge": vb.EngineRole("qwen3-judge", {"gpu_memory_utilization": 0.5}),
            }
        )


def test_judge_context_fits_its_prompts():
    assert vb.fit_max_model_len([3000, 40000], 1024) == 41984  # 41024 rounded up to a multiple of 1024
    assert vb.fit_max_model_len([3000, 40000], 1024, limit=32768) == 32768
    tiny = ModelPreset("tiny-vllm", "embedded:qwen3-tiny-random", "vllm", "template")
    lengths = vb.prompt_lengths(tiny, [chat("short", thinking=False), chat("a longer question " * 50, thinking=False)])
    assert lengths[0] < lengths[1] < 1024 - 64 and vb.fit_max_model_len(lengths, 64) == 1024
    memory = vb.model_memory(tiny, max_model_len=1024)
    assert memory.kv_per_token == 2 * 2 * 2 * 32 * 4 and memory.context == 1024

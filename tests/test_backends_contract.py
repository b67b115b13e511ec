"""The backend contract (issue 14, point 5): declared capabilities per backend, `require` errors,
`describe()` on every backend, the token-level protocol, and one preset per model (point 8).

The expectations are written out by hand: each set is what the backend's notebook says it does."""

from types import SimpleNamespace

import pytest

from reasoning_study.backends.contract import (
    CAPABILITIES,
    DESCRIBE_KEYS,
    Backend,
    MissingCapability,
    TokenBackend,
    capabilities_of,
    describe_backend,
    require,
    stage_batch_size,
    supports,
)
from reasoning_study.backends.presets import (
    PRESET_ALIASES,
    PRESETS,
    ModelPreset,
    check_backend_options,
    get_preset,
    load_backend,
)


def test_the_capability_names():
    assert set(CAPABILITIES) == {
        "token_prompts",
        "tokenizer",
        "kv_reuse",
        "prefill",
        "response_schema",
        "images",
        "logprobs",
        "continuous_batching",
        "gpu_share",
        "remote",
        "local_threads",
    }
    assert DESCRIBE_KEYS == ("backend", "model", "revision", "dtype", "device")


def test_capabilities_of_the_local_backends():
    from reasoning_study.backends.transformers import TransformersBackend

    # importable without vLLM: it is imported when an engine starts
    from reasoning_study.backends.vllm import VllmBackend

    assert TransformersBackend.capabilities == {
        "token_prompts",
        "tokenizer",
        "kv_reuse",
        "prefill",
        "logprobs",
        "local_threads",
    }
    assert VllmBackend.capabilities == {
        "token_prompts",
        "tokenizer",
        "prefill",
        "images",
        "response_schema",
        "continuous_batching",
        "logprobs",
        "gpu_share",
    }


def test_each_kind_declares_what_its_backends_declare():
    "A plan reads a kind's capabilities before anything loads: they hold every capability its loaded backends declare."
    from reasoning_study.backends.presets import BACKEND_KINDS
    from reasoning_study.backends.transformers import TransformersBackend
    from reasoning_study.backends.vllm import VllmBackend

    assert TransformersBackend.capabilities == BACKEND_KINDS["transformers"].capabilities
    assert VllmBackend.capabilities == BACKEND_KINDS["vllm"].capabilities
    served = [
        load_backend(p, base_url="http://127.0.0.1:9/v1", prefill_mode=mode, api_key_env="")
        for p in ("o4-mini", "deepseek-r1", ModelPreset("served", "my-model", "openai"))
        for mode in ("continue", "prefix", "tokens")
    ]
    assert set().union(*(b.capabilities for b in served)) == BACKEND_KINDS["openai"].capabilities
    assert all("remote" in b.capabilities for b in served)


@pytest.mark.parametrize(
    "preset, mode, expected",
    [
        (
            "o4-mini",
            "continue",
            {"images", "response_schema", "continuous_batching", "remote"},
        ),  # a hosted API: no token prompts
        (
            "deepseek-r1",
            "prefix",
            {"images", "response_schema", "continuous_batching", "prefill", "remote"},
        ),  # DeepSeek's prefix mode continues
        (
            ModelPreset("served", "my-model", "openai"),
            "continue",
            {"images", "response_schema", "continuous_batching", "token_prompts", "logprobs", "remote"},
        ),
        (
            ModelPreset("served", "my-model", "openai"),
            "tokens",
            {"images", "response_schema", "continuous_batching", "token_prompts", "prefill", "logprobs", "remote"},
        ),
        (
            "deepseek-v3",
            "continue",
            {"images", "response_schema", "continuous_batching", "logprobs", "remote"},
        ),  # deepseek-chat returns them
    ],
)
def test_capabilities_of_the_openai_backend_follow_its_server_and_mode(preset, mode, expected):
    backend = load_backend(preset, base_url="http://127.0.0.1:9/v1", prefill_mode=mode, api_key_env="")
    assert backend.capabilities == expected and backend.continues_prefill == ("prefill" in expected)
    assert backend.describe() == {
        "backend": "openai",
        "model": get_preset(preset).model_id,
        "revision": "main",
        "dtype": None,
        "device": "http://127.0.0.1:9/v1",
    }
    assert isinstance(backend, Backend) and not isinstance(backend, TokenBackend)


def test_the_transformers_backend_describes_itself_and_is_token_level():
    backend = load_backend("smollm2-135m", num_threads=1)
    assert isinstance(backend, TokenBackend)
    described = describe_backend(backend)
    assert described == {
        "backend": "transformers",
        "model": "embedded:SmolLM2-135M-Instruct",
        "revision": backend.revision,
        "dtype": "float32",
        "device": "cpu",
    }
    assert backend.revision.startswith("gguf-") and list(described) == list(DESCRIBE_KEYS)


class Stub:
    name, model_id, revision = "stub", "stub-model", "r0"
    capabilities = frozenset({"token_prompts"})

    def generate(self, requests):
        return []

    def describe(self):
        return {"backend": "stub", "model": "stub-model", "revision": "r0", "dtype": None, "device": None}


def test_require_names_the_backend_what_it_lacks_and_who_needs_it():
    assert require(Stub(), "token_prompts", study="probing") is not None
    with pytest.raises(MissingCapability) as e:
        require(Stub(), "kv_reuse", "tokenizer", "token_prompts", study="probing with method 'kv'")
    assert str(e.value) == (
        "probing with method 'kv' needs 2 capabilities that the stub backend (stub-model) does not declare: "
        "kv_reuse (continues many suffixes from one encoded prefix (prefill_cache, continue_many)); "
        "tokenizer (tokenises locally (TokenBackend: tokenizer, render_prompt_ids, encode, decode, expects_thinking)). "
        "It declares: token_prompts"
    )
    assert isinstance(e.value, ValueError)
    with pytest.raises(
        MissingCapability, match="this study needs 1 capability that the stub backend .* It declares: token_prompts"
    ):
        require(Stub(), "images")
    with pytest.raises(ValueError, match=r"unknown backend capabilities \['kv-reuse'\]"):
        require(Stub(), "kv-reuse")
    # a bad declaration is an error, not a silent no
    with pytest.raises(ValueError, match="unknown backend capabilities"):
        capabilities_of(SimpleNamespace(capabilities={"fast"}))


def test_supports_reads_declarations_and_old_stand_in_flags():
    assert supports(Stub(), "token_prompts") and not supports(Stub(), "images")
    old = SimpleNamespace(supports_continuous_batching=True, supports_images=False)
    assert capabilities_of(old) == {"continuous_batching"} and supports(old, "supports_continuous_batching")
    assert stage_batch_size(old, 30, 4) == 30 and stage_batch_size(Stub(), 30, 4) == 4
    # a declaration wins
    assert capabilities_of(SimpleNamespace(capabilities=frozenset(), supports_images=True)) == frozenset()


def test_describe_backend_of_a_stand_in_without_describe():
    assert describe_backend(SimpleNamespace(name="scripted", model_id="m", revision="1")) == {
        "backend": "scripted",
        "model": "m",
        "revision": "1",
        "dtype": None,
        "device": None,
    }


def test_the_prober_asks_for_capabilities():
    from reasoning_study.backends.request import chat
    from reasoning_study.probing.prober import probe_method, render_prompt

    with pytest.raises(
        MissingCapability, match="probing with method 'batched' needs 1 capability that the stub backend"
    ):
        probe_method(Stub())
    with pytest.raises(MissingCapability, match="does not declare: tokenizer"):
        render_prompt(Stub(), chat("Hi"))
    engine_like = SimpleNamespace(name="vllm", model_id="m", capabilities=frozenset({"tokenizer", "token_prompts"}))
    assert probe_method(engine_like) == "batched" and probe_method(engine_like, "naive") == "naive"
    with pytest.raises(MissingCapability, match="kv_reuse"):
        probe_method(engine_like, "kv")


def test_one_preset_per_model_content():
    content = lambda p: (p.model_id, p.backend, p.thinking, p.sampling, p.revision, p.multimodal, p.options, p.rules)
    assert len({content(p) for p in PRESETS.values()}) == len(PRESETS)
    assert "qwen3-8b" in PRESETS and not {"qwen3-8b-think", "qwen3-8b-no-think"} & set(PRESETS)
    assert (
        get_preset("qwen3-8b-think") is PRESETS["qwen3-8b"] and get_preset("qwen3-8b-no-think") is PRESETS["qwen3-8b"]
    )
    assert PRESETS["qwen3-8b"].thinking == "template"  # the paradigm switches it per request
    assert set(PRESET_ALIASES.values()) <= set(PRESETS)


def test_backend_options_are_checked_by_their_backend():
    check_backend_options("qwen3-8b", {"gpu_memory_utilization": 0.5})
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['gpu_mem'\] for the vllm backend"):
        check_backend_options("qwen3-8b", {"gpu_mem": 0.5})
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['batchsize'\] for the transformers backend"):
        check_backend_options("smollm2-135m", {"batchsize": 2})
    check_backend_options("o4-mini", {"reasoning_effort": "high"})  # an option of the openai backend
    with pytest.raises(ValueError, match="reasoning_effort must be one of"):
        check_backend_options("o4-mini", {"reasoning_effort": "extreme"})


def test_weights_and_server_modules_and_no_old_names():
    import subprocess
    import sys

    code = (
        "import sys; import reasoning_study.backends.weights, reasoning_study.backends.server, reasoning_study.backends.vllm; "
        "print(sorted(m for m in ('torch', 'transformers', 'vllm', 'openai') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"  # resolving weights, starting servers and the vLLM module import none of them
    from reasoning_study.backends import openai as oa
    from reasoning_study.backends import server, weights
    from reasoning_study.backends import transformers as tb
    from reasoning_study.backends import vllm as vb

    # each name lives in one module: no re-exports (pre-1.0)
    assert weights.embedded_model_dir and server.serve_with_transformers
    assert not {"embedded_model_dir", "random_qwen3", "QWEN3_THINK_IDS", "tiny_qwen3_dir"} & set(tb.__all__) | set(
        dir(tb)
    ) & {"tiny_qwen3_dir"}
    assert not {"free_port", "serve_command", "serve_with_transformers"} & set(dir(oa))
    assert not hasattr(vb, "serve_with_vllm")  # the server lifecycle lives in backends.server only (no circle back)
    source = open(vb.__file__).read()
    # issue 14: no reach into other backends
    assert "backends.transformers" not in source and "backends.openai" not in source


class KilledEngine:
    "A continuously batching stand-in killed once it has worked on `killed_after` samples (the kill comes mid-call)."

    name, model_id, revision, capabilities, stage_chunk = "engine", "m", "r", frozenset({"continuous_batching"}), 100

    def __init__(self, killed_after=None):
        self.calls, self.killed_after, self.asked = 0, killed_after, 0

    def generate(self, requests):
        from reasoning_study.backends.request import make_completion

        self.calls += 1
        if self.killed_after is not None and self.asked + len(requests) > self.killed_after:
            raise KeyboardInterrupt  # the job is killed while this call runs: none of its samples came back
        self.asked += len(requests)
        return [[make_completion(f"answer {r.tag}", "stop", seed=r.sampling.sample_seed(0))] for r in requests]


def test_a_killed_stage_keeps_every_chunk_it_finished(tmp_path):
    "Issue 30, point 1: a stage on a continuously batching backend goes in chunks, each stored before the next starts."
    from reasoning_study.backends.request import SamplingParams, chat
    from reasoning_study.store import GenerationStore, generate_cached

    stage = [chat(f"q{i}", sampling=SamplingParams(max_tokens=4), tag=f"q{i}") for i in range(450)]
    engine = KilledEngine(killed_after=250)
    with GenerationStore(tmp_path / "s.sqlite") as store:
        with pytest.raises(KeyboardInterrupt):
            generate_cached(engine, stage, store, batch_size=stage_batch_size(engine, len(stage), 8), progress=False)
        assert len(store.keys()) == 200  # two chunks of 100 stored; the kill lost only the third
        rerun = KilledEngine()
        out = generate_cached(rerun, stage, store, batch_size=stage_batch_size(rerun, len(stage), 8), progress=False)
        assert rerun.asked == 250 and rerun.calls == 3  # the rest, in chunks of 100, nothing generated twice
        assert [cs[0].text for cs in out] == [f"answer q{i}" for i in range(450)]

"""Fixtures shared by test files: the vLLM engine on the embedded model.

Without vLLM its tests skip (vLLM is an optional extra), except under `make test-vllm`, which sets
REASONING_STUDY_REQUIRE_VLLM=1 so that a broken CPU build fails loudly instead of skipping."""
import importlib.util
import os

import pytest

HAVE_VLLM = importlib.util.find_spec("vllm") is not None
REQUIRE_VLLM = os.environ.get("REASONING_STUDY_REQUIRE_VLLM") == "1"


def need_vllm():
    "Skip (or, under `make test-vllm`, fail) when vLLM cannot be imported."
    if HAVE_VLLM: return
    if REQUIRE_VLLM: pytest.fail("REASONING_STUDY_REQUIRE_VLLM=1 but vLLM is not importable in this environment")
    pytest.skip("vLLM is not installed (an optional extra; `make test-vllm` runs these tests with its CPU build)")


@pytest.fixture(scope="session")
def vllm_engine():
    "The vLLM backend on the embedded SmolLM2: on CPU float32 (comparable token for token) and eager (no 3-min compile)."
    need_vllm()
    import torch
    from reasoning_study.backends.core import ModelPreset, SamplingParams, load_backend
    precision = dict(batch_invariant=True) if torch.cuda.is_available() else dict(dtype="float32", enforce_eager=True)
    preset = ModelPreset("smollm2-vllm", "embedded:SmolLM2-135M-Instruct", "vllm", "never", SamplingParams(max_tokens=32))
    yield load_backend(preset, max_model_len=2048, gpu_memory_utilization=0.3, **precision)
    # shut the engine down while pytest still captures output (its exit logging otherwise hits closed streams)
    import gc
    from reasoning_study.backends import vllm
    for llm in vllm._ENGINES.values():
        shutdown = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
        if hasattr(shutdown, "shutdown"): shutdown.shutdown()
    vllm._ENGINES.clear()
    gc.collect()

"""Issue 30, points 1 (vLLM part) and 4: the vLLM backend isolates a failing request by bisection, counts a
multimodal prompt after image expansion, says how large a stage's chunk is; the engine plan reads the GPU's size
without nvidia-smi, refuses an unsized plan, and sizes the reasoning model's context from the study's budgets.
All on CPU: a stand-in engine (no vLLM), stand-in subprocesses, the real models' sizes written down."""

import subprocess
from types import SimpleNamespace

import pytest
from PIL import Image

import reasoning_study.backends.vllm as vb
from reasoning_study.backends.presets import ModelPreset
from reasoning_study.backends.request import Request, SamplingParams


class StandInLLM:
    "A vllm.LLM stand-in: `generate` raises when a bad prompt (first token 666) is in its batch; it counts its calls."

    def __init__(self, max_num_seqs=256):
        self.calls = []
        self.llm_engine = SimpleNamespace(
            vllm_config=SimpleNamespace(scheduler_config=SimpleNamespace(max_num_seqs=max_num_seqs))
        )

    def generate(self, prompts, params, use_tqdm=False):
        self.calls.append(len(prompts))
        self.prompts = getattr(self, "prompts", []) + list(prompts)
        if any(p["prompt_token_ids"][0] == 666 for p in prompts):
            raise ValueError("The decoder prompt (length 70000) is longer than the maximum model length of 65536")
        return [
            SimpleNamespace(
                prompt_token_ids=p["prompt_token_ids"],
                num_cached_tokens=0,
                outputs=[SimpleNamespace(text="4", token_ids=[4], finish_reason="stop")],
            )
            for p in prompts
        ]


def stand_in_backend(llm, max_model_len=4096, processor=None):
    "A VllmBackend over a stand-in engine (built without vLLM: only what generate reads)."
    backend = object.__new__(vb.VllmBackend)
    backend.vllm = SimpleNamespace(SamplingParams=lambda **kw: kw)
    backend.preset, backend.options = ModelPreset("stand-in", "stand-in", "vllm"), vb.VllmOptions()
    backend.llm, backend.max_model_len, backend.tokenizer = llm, max_model_len, None
    backend.source, backend.decode = "/nonexistent", lambda ids: " ".join(map(str, ids))
    # the prompt lengths after image expansion: this processor, else the model folder's (none here) on first use
    backend._lengths = vb.ImageExpansion(processor, backend.decode) if processor is not None else None
    backend.image_token = 9  # the placeholder the stand-in processor expands
    return backend


def test_a_failing_request_is_isolated_by_bisection_not_one_call_per_job():
    llm = StandInLLM()
    requests = [
        Request(prompt_token_ids=[666 if k == 700 else 1, k + 2], sampling=SamplingParams(max_tokens=4))
        for k in range(1024)
    ]
    out = stand_in_backend(llm).generate(requests)
    assert [k for k, [c] in enumerate(out) if c.status == "error"] == [700]
    assert "longer than the maximum model length" in out[700][0].error
    assert all(c.status == "answered" for k, [c] in enumerate(out) if k != 700)
    assert len(llm.calls) <= 2 * 10 + 1, len(llm.calls)  # O(log n) calls, not 1 + 1024


def test_bisection_counts_calls():
    calls = []

    def run(jobs):
        calls.append(len(jobs))
        if 3 in jobs or 900 in jobs:
            raise RuntimeError("bad")
        return jobs

    out = vb.isolate_failures(range(1024), run, lambda job, e: ("error", job))
    assert [r for r in out if isinstance(r, tuple)] == [("error", 3), ("error", 900)]
    assert len(calls) <= 4 * 10 + 1


class ExpandingProcessor:
    """An HF processor stand-in: each image placeholder (token 9) becomes 5000 tokens. Like a real one, it takes
    images only (a `RequestImage` is refused) and it counts its calls."""

    calls = 0

    def __call__(self, text, images, **kwargs):
        if not all(isinstance(i, Image.Image) for i in images):
            raise TypeError(f"only images are supported, got {[type(i).__name__ for i in images]}")
        self.calls += 1
        ids = [int(t) for t in text[0].split()]
        return {"input_ids": [[t for i in ids for t in ([9] * 5000 if i == 9 else [i])]]}


def test_a_multimodal_prompt_is_checked_after_image_expansion():
    llm = StandInLLM()
    figure = Image.new("RGB", (8, 8))
    requests = [
        Request(prompt_token_ids=[1, 9, 2, 3], images=(figure,), sampling=SamplingParams(max_tokens=4)),
        Request(prompt_token_ids=[1, 2, 3], sampling=SamplingParams(max_tokens=4)),
    ]
    [[with_image], [text_only]] = stand_in_backend(llm, max_model_len=4096, processor=ExpandingProcessor()).generate(
        requests
    )
    assert with_image.status == "error" and "prompt of 5003 tokens (images expanded)" in with_image.error
    assert text_only.status == "answered" and llm.calls == [1]  # the over-long prompt never reached the engine


def test_the_probes_of_a_figure_share_one_count_and_one_decoded_image():
    "Each probe holds its own RequestImage of the figure: one processor call, one PIL image sent for all of them."
    llm, processor = StandInLLM(), ExpandingProcessor()
    figure = Image.new("RGB", (8, 8), "blue")
    probes = [
        Request(prompt_token_ids=[1, 9] + [5] * k, images=(figure,), sampling=SamplingParams(max_tokens=4))
        for k in range(6)
    ]
    assert len({id(p.images[0]) for p in probes}) == 6  # six objects, one content
    out = stand_in_backend(llm, max_model_len=9000, processor=processor).generate(probes)
    assert [c.status for [c] in out] == ["answered"] * 6 and processor.calls == 1
    sent = [p["multi_modal_data"]["image"][0] for p in llm.prompts]
    assert all(image is sent[0] for image in sent) and sent[0].size == (8, 8)  # decoded once, the same object


def test_stage_chunk_is_four_times_the_schedulers_sequences():
    assert stand_in_backend(StandInLLM(max_num_seqs=256)).stage_chunk == 1024
    assert stand_in_backend(StandInLLM(max_num_seqs=512)).stage_chunk == 2048
    assert stand_in_backend(SimpleNamespace()).stage_chunk == 1024  # nothing to read: the fallback
    assert isinstance(vb.VllmBackend.stage_chunk, property)


def test_the_gpu_size_is_read_without_nvidia_smi(monkeypatch):
    seen = []

    def run(command, **kwargs):
        seen.append(command[0])
        if command[0] == "nvidia-smi":
            raise FileNotFoundError("nvidia-smi")  # a container without the utility capability
        return SimpleNamespace(returncode=0, stdout="150754820096\n")  # torch.cuda.mem_get_info in a child process

    monkeypatch.setattr(subprocess, "run", run)
    if hasattr(vb, "torch_memory_bytes"):
        vb.torch_memory_bytes.cache_clear()
    assert vb.gpu_memory_bytes() == 150754820096
    assert seen[0] == "nvidia-smi" and seen[1] != "nvidia-smi"  # a child process, not torch in this one
    if hasattr(vb, "torch_memory_bytes"):
        vb.torch_memory_bytes.cache_clear()


H200 = 139 * vb.GIB
SIZES = {
    "Qwen/Qwen3-8B": vb.EngineMemory(int(16.4e9), 147456, 40960),
    "Qwen/Qwen3-4B-Instruct-2507": vb.EngineMemory(int(8.0e9), 147456, 8192),
    "Qwen/Qwen3-30B-A3B-Instruct-2507": vb.EngineMemory(int(61.1e9), 98304, 262144),
}


def sizes(preset, max_model_len=None):
    need = SIZES[preset.model_id]
    return vb.EngineMemory(need.weights, need.kv_per_token, max_model_len or need.context)


def test_an_unsized_plan_of_several_engines_is_refused():
    roles = {
        "model": vb.EngineRole("qwen3-8b-overthinking"),
        "extractor": vb.EngineRole("qwen3-4b-extractor", context=8192),
        "judge": vb.EngineRole("qwen3-judge", context=71680),
    }
    with pytest.raises(ValueError, match="its size is unknown"):
        vb.co_resident_options(roles, gpu_bytes=None, memory=sizes)
    # a CPU host, asked for
    shares = vb.co_resident_options(roles, gpu_bytes=None, memory=sizes, split_unsized_evenly=True)
    assert {o["gpu_memory_utilization"] for o in shares.values()} == {0.3}
    given = {r: vb.EngineRole(role.preset, {"gpu_memory_utilization": 0.3}, role.context) for r, role in roles.items()}
    # all given: fine
    assert vb.co_resident_options(given, gpu_bytes=None, memory=sizes)["judge"]["gpu_memory_utilization"] == 0.3
    # one engine: fine
    assert vb.co_resident_options({"model": roles["model"]}, gpu_bytes=None, memory=sizes) == {"model": {}}


def test_the_reasoning_models_context_comes_from_the_studys_budgets(monkeypatch):
    "Issue 30 point 4: Qwen3-VL's engine is sized to its longest probe and one figure, not its 262,144 positions."
    from reasoning_study.studies.overthinking import config as config_module
    from reasoning_study.studies.overthinking import study
    from reasoning_study.sweep.rehearsal import GPUS, paper_model_memory

    config = study.OverthinkingConfig(
        preset="qwen3-vl-8b-thinking",
        benchmarks=["mathvision"],
        max_tokens=16384,
        probe_max_tokens=64,
        extractors=["llm:qwen3-4b-extractor"],
        llm_extraction="all",
        judge="qwen3-vl-judge",
        judge_max_tokens=1024,
        musobench_tasks=[],
    )
    plan = study.model_plan(config, GPUS["H200"], paper_model_memory)  # 133 GiB before: it did not fit
    assert plan.roles["model"].context == config_module.model_context(config) == 4096 + 16384 + 16384 + 1024
    assert plan.options["model"]["max_model_len"] == plan.roles["model"].context
    assert plan.roles["judge"].context == 2 * 16384 + 4096 + 16384 + 1024  # two traces, instructions, the figure, reply
    assert sum(o["gpu_memory_utilization"] for o in plan.options.values()) <= 0.9
    assert plan.stages["traces"] == ["model"] and plan.stages["judge"] == [
        "model",
        "extractor:qwen3-4b-extractor",
        "judge",
    ]
    # a GPU whose size cannot be read: refused before anything loads; a host without CUDA (the CPU build): even shares
    from reasoning_study.backends import vllm as vllm_backend

    monkeypatch.setattr(vllm_backend, "torch_memory_bytes", lambda device=None: None)
    with pytest.raises(ValueError, match="its size is unknown"):
        study.model_plan(config, lambda: None, paper_model_memory)
    monkeypatch.setattr(vllm_backend, "torch_memory_bytes", lambda device=None: 0)
    assert {
        o["gpu_memory_utilization"] for o in study.model_plan(config, lambda: None, paper_model_memory).options.values()
    } == {0.3}

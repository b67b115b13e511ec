"""The tiny random vision-language stand-ins (`backends.weights.tiny_vl_dir`) on vLLM's CPU engine: each family reads an
image through its real processor, vLLM's model code and its vision tower.

One engine per family (Qwen2-VL, Qwen2.5-VL, Qwen3-VL, and Qwen3.5 for the robustness cells' second extractor), float32
(Qwen3.5: bfloat16, the only dtype of the CPU build's gated delta-net kernel) and eager as the other CPU engine tests,
one after another, each in its own process started with `backends.weights.vl_environment()` (torchvision's Python package from
the overlay: vLLM's model modules for these families import it), the engine in that process (no engine-core or worker
process to start: about 15 s an engine instead of about 2 minutes here). The project's vLLM backend renders a chat
request with one small PIL image through the stand-in's template, vLLM expands its placeholder with the family's
processor, and the prompt ids the engine reports carry the run of `<|image_pad|>` tokens the image's grid asks for (grid
product / merge²). The backend's own length check counts the same expansion, a different image changes what the model
computes, and the backend answers an image request and a text one (the extractor's kind). Skipped without vLLM or the
torchvision overlay (under `make test-vllm`, failed)."""

import json
import os
import subprocess
import sys

import pytest
from conftest import REQUIRE_VLLM, need_vllm

from reasoning_study.backends.weights import (
    TORCHVISION_OVERLAY_ENV,
    TORCHVISION_WHEEL,
    VISION_TOKENS,
    VL_FAMILIES,
    vl_environment,
)

pytestmark = pytest.mark.xdist_group("vllm-engines")  # one engine at a time, beside the other engine tests

IMAGE_PAD, START, END = (VISION_TOKENS[t] for t in ("<|image_pad|>", "<|vision_start|>", "<|vision_end|>"))

# what runs in the family's process: the project's backend on the stand-in, one image, the engine's prompt ids
CHECK = r"""
import gc, json, sys, time

if __name__ == "__main__":
    from PIL import Image
    from transformers import AutoProcessor

    from reasoning_study.backends import vllm
    from reasoning_study.backends.presets import ModelPreset, load_backend
    from reasoning_study.backends.request import Request, SamplingParams, chat
    from reasoning_study.backends.weights import VL_FAMILIES, tiny_vl_dir

    for family in sys.argv[1:]:
        started = time.perf_counter()
        thinking = "template" if family == "qwen3.5" else "never"  # the extractor's preset switches it in the template
        preset = ModelPreset(
            f"{family}-stand-in", f"reasoning-study/{family}-stand-in", "vllm", thinking, SamplingParams(max_tokens=4),
            multimodal=True,
            options=(
                ("model_dir", str(tiny_vl_dir(family, thinking))),
                # the engine's worker in its process (and, VLLM_ENABLE_V1_MULTIPROCESSING=0, its core in this one)
                ("engine_kwargs", {
                    "limit_mm_per_prompt": {"image": 1, "video": 0},
                    "distributed_executor_backend": "uni",
                    "kv_cache_memory_bytes": 256 << 20,  # a tiny model's short prompts: 256 MiB of KV cache is ample
                }),
            ),
        )
        dtype = "bfloat16" if family == "qwen3.5" else "float32"  # the CPU build's delta-rule kernel takes only bfloat16
        backend = load_backend(preset, max_model_len=1024, gpu_memory_utilization=0.3, dtype=dtype, enforce_eager=True)
        loaded = time.perf_counter()
        side = 2 * VL_FAMILIES[family].patch_size  # one vision token: 2 x 2 patches
        image = Image.new("RGB", (6 * side, 4 * side), (200, 30, 30))  # 6 x 4 tokens
        noise = Image.effect_noise(image.size, 80).convert("RGB")
        request = Request(messages=[{"role": "user", "content": "What colour is it?"}], images=(image,), thinking=False)
        ids = backend.render_prompt_ids(request)
        greedy = backend.vllm.SamplingParams(max_tokens=1, temperature=0.0, logprobs=5)
        out, other = (
            backend.llm.generate([{"prompt_token_ids": ids, "multi_modal_data": {"image": [i]}}], greedy, use_tqdm=False)[0]
            for i in (image, noise)
        )
        processor = AutoProcessor.from_pretrained(backend.source)
        grid = [int(n) for n in processor.image_processor(images=[image])["image_grid_thw"][0]]
        extractor = chat("Extract the final answer: 'so the answer is 7'.", thinking=False)
        completions = backend.generate([request, extractor])
        logprobs = [{t: round(lp.logprob, 4) for t, lp in o.outputs[0].logprobs[0].items()} for o in (out, other)]
        print("RESULT " + json.dumps(dict(
            family=family,
            image_processor=type(processor.image_processor).__name__,
            ids=ids,
            prompt=list(out.prompt_token_ids),
            grid=grid,
            merge=processor.image_processor.merge_size,
            prompt_length=backend.prompt_length(ids, [image]),
            other_image_other_logprobs=logprobs[0] != logprobs[1],
            statuses=[c.status for [c] in completions],
            errors=[c.error for [c] in completions],
            tokens=[c.completion_tokens for [c] in completions],
            extractor_prompt=backend.decode(backend.render_prompt_ids(extractor)),
            seconds=dict(start=round(loaded - started, 1), checks=round(time.perf_counter() - loaded, 1)),
        )), flush=True)
        del backend, out, other
        vllm._ENGINES.clear()  # the next family's engine starts once this one is freed
        gc.collect()
"""


@pytest.fixture(scope="session")
def environment():
    need_vllm()
    env = vl_environment()
    if not env:
        import importlib.util

        if importlib.util.find_spec("torchvision") is None:
            why = (
                f"no torchvision overlay: pip install --no-deps --target <venv>/torchvision-overlay {TORCHVISION_WHEEL} "
                f"(or name a folder in ${TORCHVISION_OVERLAY_ENV})"
            )
            pytest.fail(why) if REQUIRE_VLLM else pytest.skip(why)
    return os.environ | env


@pytest.fixture(scope="module")
def results(environment, tmp_path_factory) -> dict:
    """Each family's checks, each in its own process with the overlay's environment, one after another: a process holds
    one engine, and its memory goes back when it ends (in one process for all four families it reached 4.3 GB and, in
    CI beside the rehearsals' vLLM servers, the kernel's OOM killer ended it at the second family)."""
    script = tmp_path_factory.mktemp("vl") / "check.py"
    script.write_text(CHECK)
    # the engine in that process; its KV cache as the script sizes it (VLLM_CPU_KVCACHE_SPACE, when set, overrides it)
    env = {k: v for k, v in environment.items() if k != "VLLM_CPU_KVCACHE_SPACE"} | {
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0"
    }
    found = {}
    for family in sorted(VL_FAMILIES):
        run = subprocess.run(
            [sys.executable, str(script), family], env=env, capture_output=True, text=True, timeout=600
        )
        assert run.returncode == 0, (family, run.returncode, run.stderr[-4000:])
        [line] = [x for x in run.stdout.splitlines() if x.startswith("RESULT ")]
        found[family] = json.loads(line.removeprefix("RESULT "))
    return found


def image_runs(ids) -> list[int]:
    "Lengths of the runs of <|image_pad|> between <|vision_start|> and <|vision_end|> (each run all image pads)."
    runs, i = [], 0
    while START in ids[i:]:
        i = ids.index(START, i) + 1
        j = ids.index(END, i)
        assert set(ids[i:j]) == {IMAGE_PAD}, ids[i:j]
        runs.append(j - i)
    return runs


@pytest.mark.slow
@pytest.mark.parametrize("family", sorted(VL_FAMILIES))
def test_the_image_reaches_the_model(family, results):
    r = results[family]
    print(family, r["seconds"], r["image_processor"])
    assert image_runs(r["ids"]) == [1]  # the stand-in's template: one placeholder for the image
    expected = r["grid"][0] * r["grid"][1] * r["grid"][2] // r["merge"] ** 2
    assert (r["grid"], expected) == ([1, 8, 12], 24)  # 8 x 12 patches, merged 2 x 2
    assert image_runs(r["prompt"]) == [expected]  # vLLM expanded the placeholder to the image's tokens
    assert len(r["prompt"]) == len(r["ids"]) + expected - 1
    assert r["prompt_length"] == len(r["prompt"])  # the backend's length check counts the same expansion
    assert r["other_image_other_logprobs"]  # the vision tower's output reached the language model
    assert set(r["statuses"]) <= {"answered", "truncated"}, r["errors"]  # no error: an image and a text request
    assert min(r["tokens"]) >= 1
    if family == "qwen3.5":  # the hybrid's thinking switched off in the template: an empty block
        assert r["extractor_prompt"].endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")

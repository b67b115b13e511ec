"""Streamed attention entropies on the real embedded model (SmolLM2-135M-Instruct), checked against attention maps."""

import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from reasoning_study.backends.presets import effective_sampling, get_preset
from reasoning_study.backends.request import SamplingParams, chat
from reasoning_study.backends.transformers import from_preset
from reasoning_study.metrics import attention as attention_metrics
from reasoning_study.studies.attention import recording as at
from reasoning_study.studies.attention import study as attention_study
from reasoning_study.tasks.musobench import build_task

pytestmark = pytest.mark.slow  # the embedded model generates in every test (the recorder's hooks on real attention)

torch.set_num_threads(1)
N_TOKENS = 24


@pytest.fixture(scope="module")
def backend():
    # float32 on any device: exact comparisons
    return from_preset(get_preset("smollm2-135m").with_options(dtype="float32"))


@pytest.fixture(scope="module")
def item():
    return build_task("subsetsum", seed=0, per_level=1, levels=[1])[0]


@pytest.fixture(scope="module")
def request_(item):
    return at.paradigm_request(item.task, item.question, "short", max_new_tokens=N_TOKENS)


@pytest.fixture(scope="module")
def trace(backend, request_):
    return at.generate_with_entropies(backend, request_)


def reference_entropies(probs: np.ndarray, eps: float = 1e-9):
    "The reference script's formula: renormalise, then -sum p log2(p + eps), per head; and of the head mean."
    probs = probs / probs.sum(-1, keepdims=True)
    per_head = -(probs * np.log2(probs + eps)).sum(-1)
    mean = probs.mean(-2)
    return per_head, -(mean * np.log2(mean + eps)).sum(-1)


def test_streamed_entropies_equal_output_attentions_maps(backend, request_, trace):
    """Acceptance: the reference's procedure (greedy generate with output_attentions=True, last row of each step's
    maps) gives the same tokens and the same entropies, per head and head-averaged, for every layer and step."""
    ids = torch.tensor([trace.prompt_ids], device=backend.device)
    with torch.inference_mode():
        out = backend.model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=N_TOKENS,
            do_sample=False,
            output_attentions=True,
            return_dict_in_generate=True,
            pad_token_id=backend.pad_id,
        )
    generated = out.sequences[0, len(trace.prompt_ids) :].tolist()
    assert generated[: trace.n_steps] == trace.token_ids
    assert len(out.attentions) >= trace.n_steps
    for step in range(trace.n_steps):
        # [layers, heads, keys]
        rows = np.stack([layer[0, :, -1, :].float().cpu().numpy() for layer in out.attentions[step]])
        assert rows.shape[-1] == len(trace.prompt_ids) + step  # the query sees the prompt and the tokens before it
        per_head, averaged = reference_entropies(rows)
        np.testing.assert_allclose(trace.head_entropy[step], per_head, atol=1e-4)
        np.testing.assert_allclose(trace.head_avg_entropy[step], averaged, atol=1e-4)


def test_generation_matches_backend_generate(backend, request_, trace):
    completion = backend.generate([request_])[0][0]
    assert trace.completion.text == completion.text
    assert (trace.completion.finish_reason, trace.completion.completion_tokens) == (
        completion.finish_reason,
        completion.completion_tokens,
    )
    assert trace.n_steps == completion.completion_tokens


def test_sdpa_streaming_equals_eager(trace, request_):
    sdpa = from_preset(get_preset("smollm2-135m").with_options(attn_implementation="sdpa", dtype="float32"))
    assert sdpa.model.config._attn_implementation == "sdpa"
    other = at.generate_with_entropies(sdpa, request_)
    assert other.token_ids == trace.token_ids
    np.testing.assert_allclose(other.head_entropy, trace.head_entropy, atol=1e-4)
    assert sdpa.model.config._attn_implementation == "sdpa"  # switched back


def test_layer_subset_and_replay(backend, trace):
    replayed = at.replay_entropies(backend, trace.prompt_ids, trace.token_ids, layers=[29, 3])
    assert replayed.layers == [3, 29] and replayed.head_entropy.shape == (trace.n_steps, 2, 9)
    np.testing.assert_allclose(replayed.head_entropy, trace.head_entropy[:, [3, 29]], atol=1e-4)


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
def test_left_padded_batch_rows_equal_single_rows(implementation):
    """With padding the mask matters: each row's last query must equal the same prompt run alone."""
    backend = from_preset(get_preset("smollm2-135m").with_options(attn_implementation=implementation, dtype="float32"))
    prompts = [
        backend.render_prompt_ids(chat("Name two prime numbers.")),
        backend.render_prompt_ids(chat("Write one sentence about the sea, please, with a colour in it.")),
    ]
    width = max(map(len, prompts))
    ids = torch.tensor([[backend.pad_id] * (width - len(p)) + p for p in prompts], device=backend.device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=backend.device)
    positions = torch.tensor([[0] * (width - len(p)) + list(range(len(p))) for p in prompts], device=backend.device)
    batched = at.EntropyRecorder()
    with torch.inference_mode(), at.recording_attention_entropy(backend.model, batched):
        backend.model(input_ids=ids, attention_mask=mask, position_ids=positions)
        batched.end_step()
    for row, prompt in enumerate(prompts):
        alone = at.EntropyRecorder()
        with torch.inference_mode(), at.recording_attention_entropy(backend.model, alone):
            backend.model(input_ids=torch.tensor([prompt], device=backend.device))
            alone.end_step()
        np.testing.assert_allclose(batched.arrays(row)[0], alone.arrays()[0], atol=1e-4)


def test_recorder_keeps_only_entropies(backend, request_):
    """Memory: what is kept is steps x layers x (heads + 1) float32 numbers, whatever the context length."""
    trace = at.generate_with_entropies(backend, request_)
    recorder_bytes = trace.head_entropy.nbytes + trace.head_avg_entropy.nbytes
    assert recorder_bytes == trace.n_steps * 30 * (9 + 1) * 4
    assert trace.head_entropy.dtype == np.float32


def test_recording_context_restores_and_refuses_nesting(backend):
    with pytest.raises(ZeroDivisionError):
        with at.recording_attention_entropy(backend.model, at.EntropyRecorder()):
            1 / 0
    assert backend.model.config._attn_implementation == "eager"
    with at.recording_attention_entropy(backend.model, at.EntropyRecorder()):
        with pytest.raises(RuntimeError, match="already recording"):
            with at.recording_attention_entropy(backend.model, at.EntropyRecorder()):
                pass
    assert backend.model.config._attn_implementation == "eager"
    with pytest.raises(NotImplementedError, match="eager or sdpa"):
        at.register_entropy_attention("flash_attention_2")


def test_generation_rejects_bad_input(backend, request_):
    with pytest.raises(ValueError, match="n=1"):
        at.generate_with_entropies(backend, chat("Hi", sampling=SamplingParams(n=2)))
    with pytest.raises(ValueError, match="layers must be"):
        at.generate_with_entropies(backend, request_, layers=[-1])
    with pytest.raises(ValueError, match="does not fit"):
        at.replay_entropies(backend, [1] * backend.max_model_len, [2])


def test_study_tables_and_summaries(backend, item):
    entropies, runs = at.entropy_study(backend, [item], layers=[0, 29], max_new_tokens=8, progress=False)
    assert list(runs.paradigm) == ["short", "long"] and (runs.n_steps == 8).all()
    assert attention_metrics.is_compact(entropies) and len(entropies) == 2 * 2  # one row per run and layer
    tidy = attention_metrics.expand_entropies(entropies)
    assert len(tidy) == 2 * 2 * 8
    assert tidy.relative_position.between(0, 1).all()
    assert set(tidy.phase) == {"early", "middle", "late"}
    summary = attention_metrics.layer_phase_summary(entropies)
    assert set(summary.phase.astype(str)) == {"early", "middle", "late", "all"}
    assert (summary.n_runs == 1).all()
    whole = summary[(summary.phase == "all") & (summary.layer == 0) & (summary.paradigm == "short")]["mean"].item()
    assert whole == pytest.approx(
        tidy[(tidy.layer == 0) & (tidy.paradigm == "short")][attention_metrics.ENTROPY].mean(), rel=1e-6
    )
    curves = attention_metrics.relative_position_curves(entropies, bins=4)
    assert set(curves.position) == {0.125, 0.375, 0.625, 0.875}
    assert len(attention_metrics.paradigm_difference(curves)) == 2 * 4
    heads = attention_metrics.per_head_table(entropies)
    assert len(heads) == 9 * len(tidy)


@pytest.fixture(scope="module")
def qwen_tiny():
    return from_preset("qwen3-tiny-random")


def test_a_thinking_model_sampled_stored_compactly_and_read_back_for_the_figures(qwen_tiny, item, tmp_path):
    """Qwen3 loops under greedy decoding in thinking mode: the study samples with the preset's (or given) settings, and a run's
    entropies are stored as one row per layer of float32 arrays, which the summaries and Figures 7 and 14 read back."""
    import matplotlib.pyplot as plt

    from reasoning_study.figures.attention import plot_entropy_heatmap, plot_entropy_layers
    from reasoning_study.store import GenerationStore

    # Qwen3's thinking sampling: 0.6, 0.95, 20
    sampling = effective_sampling("qwen3-8b-overthinking", seed=5)
    with GenerationStore(tmp_path / "generations.sqlite") as store:
        entropies, runs = at.entropy_study(
            qwen_tiny,
            [item],
            max_new_tokens=40,
            store=store,
            cache_dir=tmp_path / "entropies",
            sampling=sampling,
            progress=False,
        )
        generated = qwen_tiny.generated_tokens
        again, _ = at.entropy_study(
            qwen_tiny,
            [item],
            max_new_tokens=40,
            store=store,
            cache_dir=tmp_path / "entropies",
            sampling=sampling,
            progress=False,
        )
    assert qwen_tiny.generated_tokens == generated  # the rerun read both runs back
    assert (runs.temperature == 0.6).all() and (runs.top_k == 20).all() and (runs.seed == 5).all()
    for paradigm, thinking in (("short", False), ("long", True)):
        request = at.paradigm_request(item.task, item.question, paradigm, "template", 40, sampling)
        assert request.thinking is thinking
        [[completion]] = qwen_tiny.generate([request])
        assert runs[runs.paradigm == paradigm].text.item() == completion.text  # sampled exactly as the backend samples
    greedy, _ = at.entropy_study(qwen_tiny, [item], ["long"], max_new_tokens=40, progress=False)
    # another run
    assert not np.array_equal(
        greedy[attention_metrics.ENTROPY][0], entropies[entropies.paradigm == "long"][attention_metrics.ENTROPY].iloc[0]
    )
    files = sorted((tmp_path / "entropies").iterdir())
    assert len(files) == 2 and all(f.name.endswith(".entropies.parquet") for f in files)
    back = pd.read_parquet(files[0])
    # 2 layers, 4 heads
    assert (
        len(back) == 2 and back["n_heads"].iloc[0] == 4 and back[attention_metrics.ENTROPY].iloc[0].dtype == np.float32
    )
    assert len(back["entropy_per_head"].iloc[0]) == 4 * back["n_steps"].iloc[0]
    pd.testing.assert_frame_equal(
        attention_metrics.expand_entropies(again, per_head=True),
        attention_metrics.expand_entropies(entropies, per_head=True),
    )
    # the study folder's entropy.parquet, read back: the curves and the figures
    entropies.to_parquet(tmp_path / "entropy.parquet")
    stored = pd.read_parquet(tmp_path / "entropy.parquet")
    relative = attention_metrics.relative_position_curves(stored, bins=4)
    pd.testing.assert_frame_equal(
        relative, attention_metrics.relative_position_curves(attention_metrics.expand_entropies(entropies), bins=4)
    )
    fig7 = plot_entropy_layers(relative, attention_metrics.absolute_step_curves(stored, step_width=8), layers=[0, 1])
    fig14 = plot_entropy_heatmap(relative, attention_metrics.paradigm_difference(relative))
    assert len(fig7.axes) == 4 and fig14.axes[0].images[0].get_array().shape == (2, 4)
    plt.close("all")


def test_attention_preset_keeps_the_options_the_transformers_backend_shares():
    preset = get_preset("intern-s1-mini").with_options(trust_remote_code=True, gpu_memory_utilization=0.5)
    assert dict(at.attention_preset(preset, device="cuda").options) == {"trust_remote_code": True, "device": "cuda"}


def test_thinking_models_switch_thinking_per_paradigm(item):
    long = at.paradigm_request(item.task, item.question, "long", thinking_switch="template")
    short = at.paradigm_request(item.task, item.question, "short", thinking_switch="template")
    assert (long.thinking, short.thinking) == (True, False)
    assert at.attention_preset("qwen3-8b-no-think").backend == "transformers"


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 6), st.integers(1, 40), st.integers(0, 2**31 - 1))
def test_entropy_bounds(heads, keys, seed):
    """0 <= H(p_h) <= log2(keys), and the head-averaged distribution has at least the mean per-head entropy."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(heads, keys, generator=g) * 4
    logits[:, torch.rand(keys, generator=g) < 0.3] = float("-inf")  # some masked positions
    logits[:, 0] = 0.0  # at least one position is visible
    probs = logits.softmax(-1)
    per_head, averaged = at.attention_entropies(probs)
    assert (per_head >= -1e-6).all() and (per_head <= np.log2(keys) + 1e-5).all()
    assert averaged >= per_head.mean() - 1e-5


@pytest.mark.parametrize(
    "values, message",
    [
        (dict(per_level=0), "'per_level'"),
        (dict(paradigms=["short", "medium"]), "medium"),
        (dict(layers=[3, -1]), "layer indices >= 0, got [-1]"),
        (dict(levels=[]), "'levels' must not be empty"),
        (dict(top_p=1.5), "'top_p' must be <= 1"),
        (dict(preset="no-such-model"), "no-such-model"),
        (dict(max_tokens=8), "did you mean 'max_new_tokens'"),
    ],
)
def test_attention_config_rejects_bad_values(values, message):
    from reasoning_study.config import ConfigError, config_from

    with pytest.raises(ConfigError) as e:
        config_from(attention_study.AttentionConfig, values)
    assert message in str(e.value)


def test_study_entry_points_and_rescore(backend, tmp_path):
    from reasoning_study.studies.runner import execute

    cfg = attention_study.AttentionConfig(
        tasks=["subsetsum"],
        per_level=1,
        layers=[0, 15, 29],
        max_new_tokens=5,
        bins=2,
        step_width=2,
        resamples=200,
        out_dir=str(tmp_path),
    )
    done = execute("attention_entropy", cfg, tmp_path, backends=backend)
    raw, written = done.raw, done.written
    assert len(raw["runs"]) == 2 and len(raw["entropies"]) == 2 * 3  # short and long, three layers each
    assert done.record["backends"]["model"]["model"] == backend.model_id and done.record["counts"] == {"runs": 2}
    assert (
        tmp_path / "figures" / "fig7_attention_entropy_layers.png"
    ).is_file() and "fig14_attention_entropy_grid" in written
    again = attention_study.rescore(tmp_path)
    for name, file in attention_study.RESULT_FILES.items():
        pd.testing.assert_frame_equal(again[name], pd.read_parquet(tmp_path / file))
    from reasoning_study.cli import rescore_folder

    # rs-rescore --check: the declared files
    assert rescore_folder(tmp_path, check=True) == dict.fromkeys(attention_study.RESULT_FILES, "unchanged")
    assert list(attention_study.per_layer_means(again["summary"]).index) == [0, 15, 29]
    # every mean has its interval columns (one run per paradigm here: no interval, and the report says so)
    summary, comparisons = again["summary"], again["comparisons"]
    assert {"mean", "mean_lo", "mean_hi", "n_units"} <= set(summary.columns) and (summary["n_units"] == 1).all()
    assert summary["mean_lo"].isna().all() and summary["mean_hi"].isna().all()
    assert {"difference", "lo", "hi", "p_value", "pairing", "n_units", "n_unpaired"} <= set(comparisons.columns)
    assert len(comparisons) == 3 * 4 and (comparisons["n_units"] == 1).all()  # layers x (three phases and all), paired
    markdown = (tmp_path / "summary_layer_phase.md").read_text()
    assert "[n/a]" in markdown and "Intervals over fewer than 10 runs say little" in markdown, markdown
    with pytest.raises(FileNotFoundError, match="not a finished attention-entropy run"):
        attention_study.rescore(tmp_path / "figures")

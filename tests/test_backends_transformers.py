"""The transformers backend on the real embedded model (SmolLM2-135M-Instruct), short generations only."""

import json
import warnings
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from reasoning_study.backends import transformers as tb
from reasoning_study.backends import weights  # the embedded model: found, converted, cached
from reasoning_study.backends.contract import Backend
from reasoning_study.backends.presets import ModelPreset, load_backend
from reasoning_study.backends.request import Request, SamplingParams, chat

# generation by the embedded model and the tiny Qwen3 (the backend's contract on real models)
pytestmark = pytest.mark.slow

QUESTIONS = [
    "What is 2+2?",
    "Hi",
    "List three fruits.",
    "Write a short story about a dragon who loves pancakes, with many details about the morning.",
    "Name the largest planet of the solar system.",
]


@pytest.fixture(scope="module")
def backend():
    return load_backend("smollm2-135m")


def with_batch_size(backend, batch_size, **kwargs):
    "Another backend over the same loaded model, differing only in how it batches."
    return tb.TransformersBackend(
        backend.model,
        backend.tokenizer,
        backend.model_id,
        backend.revision,
        backend.thinking,
        batch_size=batch_size,
        **kwargs,
    )


def texts(results):
    return [[c.text for c in cs] for cs in results]


def test_identity_and_protocol(backend):
    assert isinstance(backend, Backend)
    assert (backend.name, backend.model_id) == ("transformers", "embedded:SmolLM2-135M-Instruct")
    assert backend.revision == "gguf-" + weights.file_sha256(weights.embedded_gguf_path())[:12]
    assert load_backend("smollm2-135m").model is backend.model  # loaded once per process


def test_converted_copy_is_servable():
    folder = weights.embedded_model_dir()
    config = json.loads((folder / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and "quantization_config" not in config
    assert {"model.safetensors", "tokenizer.json", "chat_template.jinja"} <= {p.name for p in folder.iterdir()}


def test_greedy_matches_transformers_generate(backend):
    request = chat("What is the capital of Italy?", sampling=SamplingParams(max_tokens=12))
    ids = backend.render_prompt_ids(request)
    with torch.inference_mode():
        out = backend.model.generate(
            torch.tensor([ids], device=backend.device),
            attention_mask=torch.ones(1, len(ids), dtype=torch.long, device=backend.device),
            max_new_tokens=12,
            do_sample=False,
        )
    reference = out[0, len(ids) :].tolist()
    if reference[-1] in backend.eos_ids:
        reference = reference[:-1]
    assert backend.generate([request])[0][0].text == backend.decode(reference)


def test_greedy_batched_equals_sequential(backend):
    requests = [chat(q, sampling=SamplingParams(max_tokens=12)) for q in QUESTIONS]
    batched = with_batch_size(backend, 8).generate(requests)
    sequential = with_batch_size(backend, 1).generate(requests)
    assert texts(batched) == texts(sequential)
    assert [c[0].finish_reason for c in batched] == [c[0].finish_reason for c in sequential]
    assert all(c[0].status in ("answered", "truncated") for c in batched)


def test_chunked_prompt_encoding_changes_nothing(backend):
    requests = [chat(q, sampling=SamplingParams(max_tokens=8)) for q in QUESTIONS]
    assert texts(with_batch_size(backend, 8, prefill_chunk=5).generate(requests)) == texts(backend.generate(requests))


def test_seeded_sampling_reproducible_and_independent_of_batch(backend):
    sampling = SamplingParams(temperature=1.0, top_p=0.95, top_k=50, n=3, seed=5, max_tokens=10)
    target = chat("Tell me a fun fact.", sampling=sampling)
    alone = backend.generate([target])[0]
    others = [chat(q, sampling=SamplingParams(temperature=0.7, seed=99, max_tokens=6)) for q in QUESTIONS[:3]]
    crowded = backend.generate([others[0], target, *others[1:]])[1]
    assert [c.text for c in alone] == [c.text for c in crowded]
    assert [c.seed for c in alone] == [sampling.sample_seed(i) for i in range(3)]
    # sample i equals sample 0 of the same request with n=1 and seed = sample_seed(i)
    single = backend.generate(
        [
            chat(
                "Tell me a fun fact.",
                sampling=SamplingParams(
                    temperature=1.0, top_p=0.95, top_k=50, seed=sampling.sample_seed(2), max_tokens=10
                ),
            )
        ]
    )[0][0]
    assert single.text == alone[2].text


def test_samples_differ(backend):
    samples = backend.generate(
        [chat("Write a word.", sampling=SamplingParams(temperature=1.0, n=4, seed=0, max_tokens=8))]
    )[0]
    assert len(samples) == 4 and [c.sample_index for c in samples] == [0, 1, 2, 3]
    assert len({c.text for c in samples}) > 1


def test_top_k_one_is_greedy(backend):
    greedy = chat("Name a fruit.", sampling=SamplingParams(max_tokens=8))
    top1 = chat("Name a fruit.", sampling=SamplingParams(temperature=1.3, top_k=1, seed=3, max_tokens=8))
    assert texts(backend.generate([greedy])) == texts(backend.generate([top1]))


# --- penalties (issue 41): a release's repetition penalty, OpenAI's presence and frequency penalties ---------------

LOOP = chat("Describe a tree.", sampling=SamplingParams(max_tokens=80))  # greedy, the embedded model repeats a phrase


def with_sampling(request, **changes):
    return Request(messages=request.messages, sampling=replace(request.sampling, **changes))


def distinct_4grams(backend, text) -> float:
    "The share of the token 4-grams of a text that occur only once in it (1.0: nothing repeats)."
    ids = backend.encode(text)
    grams = [tuple(ids[i : i + 4]) for i in range(len(ids) - 3)]
    return len(set(grams)) / len(grams)


def test_a_repetition_penalty_breaks_a_greedy_loop_as_transformers_does(backend):
    [[loop], [penalized]] = backend.generate([LOOP, with_sampling(LOOP, repetition_penalty=1.3)])
    assert loop.text.count("a vibrant green color") >= 3 and penalized.text != loop.text
    assert distinct_4grams(backend, penalized.text) > distinct_4grams(backend, loop.text)
    assert distinct_4grams(backend, penalized.text) == 1.0
    # the same tokens as transformers' own greedy decoding with RepetitionPenaltyLogitsProcessor (prompt + output)
    ids = backend.render_prompt_ids(LOOP)
    with torch.inference_mode():
        reference = backend.model.generate(
            torch.tensor([ids], device=backend.device),
            attention_mask=torch.ones(1, len(ids), dtype=torch.long, device=backend.device),
            max_new_tokens=80,
            do_sample=False,
            repetition_penalty=1.3,
        )[0, len(ids) :].tolist()
    assert penalized.text == backend.decode([t for t in reference if t not in backend.eos_ids])


def test_presence_and_frequency_penalties_repeat_less(backend):
    [[loop], [frequency], [presence]] = backend.generate(
        [LOOP, with_sampling(LOOP, frequency_penalty=1.0), with_sampling(LOOP, presence_penalty=1.5)]
    )
    for penalized in (frequency, presence):
        assert penalized.text != loop.text
        assert distinct_4grams(backend, penalized.text) > distinct_4grams(backend, loop.text)


def test_each_row_of_a_batch_has_its_own_penalties(backend):
    "Rows with other penalties, or none, share a batch: each decodes as it does alone, greedy or sampled."
    rows = [
        LOOP,
        with_sampling(LOOP, repetition_penalty=1.3),
        with_sampling(LOOP, repetition_penalty=1.05, frequency_penalty=0.5),
        with_sampling(LOOP, temperature=0.8, seed=4, presence_penalty=0.7),
        chat("What is 2+2?", sampling=SamplingParams(max_tokens=12, repetition_penalty=0.9)),
    ]
    together = texts(with_batch_size(backend, 8).generate(rows))
    alone = texts(with_batch_size(backend, 1).generate(rows))
    assert together == alone and len({t[0] for t in together}) == len(rows)


def test_a_repetition_penalty_reads_the_prefix_on_the_kv_path(backend, trace):
    "continue_many penalizes the cached prefix's tokens as re-encoding the prompt does."
    prompt, sequence = trace
    cached, cue = backend.prefill_cache(sequence), backend.encode("\nFinal answer:")
    penalized = SamplingParams(max_tokens=8, repetition_penalty=1.4, frequency_penalty=0.3)
    jobs = [(len(prompt) + 5, cue), (len(sequence), cue)]
    continued = backend.continue_many(cached, jobs, penalized)
    naive = backend.generate([Request(prompt_token_ids=sequence[:n] + s, sampling=penalized) for n, s in jobs])
    assert [c.text for c in continued] == [r[0].text for r in naive]
    plain = backend.continue_many(cached, jobs, replace(penalized, repetition_penalty=1.0, frequency_penalty=0.0))
    assert [c.text for c in plain] != [c.text for c in continued]


def test_a_row_needs_its_prompt_for_a_repetition_penalty(backend):
    with pytest.raises(ValueError, match="give new_row the prompt_ids"):
        backend.new_row(5, SamplingParams(repetition_penalty=1.1), None)
    row = backend.new_row(5, SamplingParams(presence_penalty=0.5), None)  # the output is all it reads
    assert row.history is not None and not row.history.seen.any()
    assert backend.new_row(5, SamplingParams(), None).history is None  # no penalty: no history


def test_stop_strings(backend):
    question = "List three fruits."
    full = backend.generate([chat(question, sampling=SamplingParams(max_tokens=24))])[0][0]
    stop = "fruits"
    assert stop in full.text
    stopped = backend.generate([chat(question, sampling=SamplingParams(max_tokens=24, stop=(stop, "zzz")))])[0][0]
    assert stopped.text == full.text[: full.text.index(stop)]
    assert (stopped.finish_reason, stopped.status) == ("stop", "answered")
    assert stopped.completion_tokens < full.completion_tokens


def test_per_row_budgets_in_one_batch(backend):
    short, long_ = (chat("Write a poem about the sea.", sampling=SamplingParams(max_tokens=m)) for m in (3, 9))
    a, b = backend.generate([short, long_])
    assert (a[0].completion_tokens, a[0].finish_reason, a[0].status) == (3, "length", "truncated")
    assert b[0].completion_tokens == 9 and b[0].text.startswith(a[0].text)


def test_truncated_thinking_is_not_an_answer(backend):
    c = backend.generate([chat("What is 17 * 3?", prefill="<think>\nLet me", sampling=SamplingParams(max_tokens=4))])[
        0
    ][0]
    assert (c.finish_reason, c.status, c.answer) == ("length", "truncated", "")
    assert c.reasoning.startswith("Let me")


def test_token_exact_prompt_equals_chat_render(backend):
    request = chat("What is 2 + 3?", sampling=SamplingParams(max_tokens=10))
    ids = backend.render_prompt_ids(request)
    assert (
        ids
        == backend.tokenizer.apply_chat_template(request.messages, add_generation_prompt=True, return_dict=True)[
            "input_ids"
        ]
    )
    exact = Request(prompt_token_ids=ids, sampling=request.sampling)
    assert texts(backend.generate([exact])) == texts(backend.generate([request]))
    # a prefill is tokenized on its own and appended after the template
    prefilled = chat("What is 2 + 3?", prefill="The answer", sampling=request.sampling)
    assert backend.render_prompt_ids(prefilled) == ids + backend.encode("The answer")


def test_error_isolation(backend):
    fine = chat("Hi", sampling=SamplingParams(max_tokens=5))
    too_long = Request(prompt_token_ids=[1] * backend.max_model_len, sampling=SamplingParams(max_tokens=5, n=2))
    bad_token = Request(prompt_token_ids=[1, 10**7], sampling=SamplingParams(max_tokens=5))  # fails inside the batch
    results = backend.generate([fine, too_long, bad_token, fine])
    assert [c.status for c in results[1]] == ["error", "error"] and "does not fit" in results[1][0].error
    assert results[2][0].status == "error" and results[2][0].error
    assert results[0][0].status != "error" and texts([results[0]]) == texts([results[3]]) == texts(
        backend.generate([fine])
    )


def test_images_are_an_error_not_a_silent_text_prompt(backend):
    from PIL import Image

    figure = Image.new("RGB", (8, 8), "red")
    fine = chat("Hi", sampling=SamplingParams(max_tokens=5))
    results = backend.generate(
        [
            chat("What colour is the figure?", images=[figure], sampling=SamplingParams(max_tokens=5, n=2)),
            fine,
            Request(prompt_token_ids=backend.render_prompt_ids(fine), images=[figure]),
        ]
    )
    assert [c.status for c in results[0]] == ["error", "error"] and results[2][0].status == "error"
    assert "text-only" in results[0][0].error and "multimodal preset" in results[0][0].error
    assert texts([results[1]]) == texts(backend.generate([fine]))  # the other requests are unaffected
    with pytest.raises(ValueError, match="text-only"):
        backend.render_prompt_ids(chat("x", images=[figure]))  # what the prober asks first: it fails before any probe
    assert not {"images", "response_schema"} & backend.capabilities


def test_response_schema_is_accepted_and_decoded_freely(backend):
    schema = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}
    sampling = SamplingParams(max_tokens=12)
    [constrained], [free] = backend.generate(
        [
            chat("What is 2+2? Reply in JSON.", response_schema=schema, sampling=sampling),
            chat("What is 2+2? Reply in JSON.", sampling=sampling),
        ]
    )
    assert constrained.status != "error" and constrained.text == free.text  # no constrained decoding here


MULTIMODAL_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{% if m.content is string %}{{ m.content }}{% else %}"
    "{% for p in m.content %}{% if p.type == 'image' %}<image>{% else %}{{ p.text }}{% endif %}{% endfor %}{% endif %}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def test_core_rendering_places_images_with_a_multimodal_template(backend):
    # the rendering vLLM uses (backends.contract.render_prompt_ids): image parts reach the template; templates that skip or
    # print them are refused. The embedded tokenizer with a small multimodal template stands in for a VLM's.
    import copy

    from PIL import Image

    from reasoning_study.backends.contract import render_prompt_ids

    figure = Image.new("RGB", (8, 8), "red")
    request = chat("Count the squares.", system="Be brief.", images=[figure, figure])
    vlm = copy.deepcopy(backend.tokenizer)
    vlm.chat_template = MULTIMODAL_TEMPLATE
    text = backend.tokenizer.decode(render_prompt_ids(vlm, request))
    assert "<|im_start|>user\n<image><image>Count the squares.<|im_end|>" in text and text.startswith(
        "<|im_start|>system\nBe brief."
    )
    # SmolLM2's template wants strings
    with pytest.raises(ValueError, match="does not place images .it fails on image parts"):
        render_prompt_ids(backend.tokenizer, request)
    printing = copy.deepcopy(backend.tokenizer)
    printing.chat_template = (
        "{% for m in messages %}{{ m.content }}{% endfor %}"  # a text template that prints the parts
    )
    with pytest.raises(ValueError, match="skips or prints the image parts"):
        render_prompt_ids(printing, request)
    skipping = copy.deepcopy(backend.tokenizer)
    skipping.chat_template = MULTIMODAL_TEMPLATE.replace("<image>", "")
    with pytest.raises(ValueError, match="skips or prints the image parts"):
        render_prompt_ids(skipping, request)
    assert render_prompt_ids(vlm, chat("Count.")) == render_prompt_ids(vlm, chat("Count."))  # no images, no check


@pytest.fixture(scope="module")
def trace(backend):
    q = chat("A shop sells 3 apples for 2 dollars. How much do 9 apples cost?", sampling=SamplingParams(max_tokens=30))
    prompt = backend.render_prompt_ids(q)
    return prompt, prompt + backend.encode(backend.generate([q])[0][0].text)


def test_continue_from_equals_reencoding(backend, trace):
    prompt, sequence = trace
    cue = backend.encode("\nFinal answer:")
    cached = backend.prefill_cache(sequence, chunk=16)  # chunked encoding gives the same cache
    greedy = SamplingParams(max_tokens=6)
    for n in (len(prompt) + 1, len(prompt) + 15, len(sequence)):
        naive = backend.generate([Request(prompt_token_ids=sequence[:n] + cue, sampling=greedy)])[0][0]
        continued = backend.continue_from(cached, n, cue, greedy)
        assert continued.text == naive.text
        assert (continued.prompt_tokens, continued.cached_prompt_tokens) == (n + len(cue), n)
    # an empty suffix continues the prefix itself
    n = len(prompt) + 10
    naive = backend.generate([Request(prompt_token_ids=sequence[:n], sampling=greedy)])[0][0]
    assert backend.continue_from(cached, n, [], greedy).text == naive.text


def test_continue_many_mixed_suffixes_and_counter(backend, trace):
    prompt, sequence = trace
    cached = backend.prefill_cache(sequence)
    cues = [
        backend.encode(s) for s in ["\nAnswer:", "\nSo, putting it all together, the final answer is", " Therefore"]
    ]
    jobs = [
        (len(prompt) + 3, cues[0]),
        (len(sequence), cues[1]),
        (len(prompt) + 20, cues[2]),
        (len(prompt) + 8, cues[1]),
    ]
    greedy = SamplingParams(max_tokens=5)
    prober, naive_runner = (
        with_batch_size(backend, 3, probe_batch_size=3),
        with_batch_size(backend, 8),
    )  # each counts its own tokens
    continued = prober.continue_many(cached, jobs, greedy)
    naive = naive_runner.generate([Request(prompt_token_ids=sequence[:n] + s, sampling=greedy) for n, s in jobs])
    assert [c.text for c in continued] == [r[0].text for r in naive]
    assert prober.prefill_tokens == sum(len(s) for _, s in jobs)  # only the suffixes were encoded
    assert naive_runner.prefill_tokens == sum(n + len(s) for n, s in jobs)  # re-encoding pays for every prefix


def test_continue_rejects_bad_input(backend, trace):
    cached = backend.prefill_cache(trace[1])
    with pytest.raises(ValueError, match="prefix_len"):
        backend.continue_from(cached, 0, [1])
    with pytest.raises(ValueError, match="n=1"):
        backend.continue_many(cached, [(5, [1])], SamplingParams(n=2))


def test_presets_are_offline_by_default():
    with pytest.raises(OSError, match="allow_download"):
        tb.from_preset(ModelPreset("nowhere", "reasoning-study-test/not-a-real-model", "transformers"))
    with pytest.raises(ValueError, match=r"unknown option\(s\) \[.batchsize.\] for the transformers backend"):
        tb.from_preset(
            ModelPreset("typo", "embedded:SmolLM2-135M-Instruct", "transformers", options=(("batchsize", 2),))
        )
    with pytest.raises(ValueError, match="unknown embedded model"):
        tb.from_preset(ModelPreset("other", "embedded:TinyLlama", "transformers"))


def test_embedded_dir_survives_a_race(tmp_path, monkeypatch):
    "Two processes converting at once: the loser drops its copy and uses the winner's."
    monkeypatch.setenv("REASONING_STUDY_CACHE", str(tmp_path))
    target = tmp_path / "models" / f"{weights.EMBEDDED_NAME}-{weights.file_sha256(weights.embedded_gguf_path())[:12]}"

    def convert_while_another_wins(gguf, out_dir):
        (Path(out_dir) / "config.json").write_text("{}")  # our (pretend) copy
        target.mkdir(parents=True)
        (target / "config.json").write_text('{"winner": true}')  # the other process renamed first
        (target / "model.safetensors").write_text("")
        return out_dir

    monkeypatch.setattr(weights, "convert_gguf", convert_while_another_wins)
    assert weights.embedded_model_dir() == target
    assert json.loads((target / "config.json").read_text()) == {"winner": True}
    assert [p.name for p in target.parent.iterdir()] == [target.name]  # no temporary folder left behind


# ---------------------------------------------------------------- batched sampling, stop strings, numerics


def test_numerics_and_cache_keyword(backend):
    device = tb.default_device()
    assert backend.numerics == ("float32/cpu" if device == "cpu" else "bfloat16/cuda")
    assert backend.cache_keyword in ("cache", "past_key_values")
    import inspect

    assert backend.cache_keyword in inspect.signature(backend.model.forward).parameters


@pytest.fixture(scope="module")
def qwen():
    return load_backend("qwen3-tiny-random")


@pytest.mark.parametrize("which", ["backend", "qwen"])
def test_no_deprecated_cache_keyword(which, request):
    "transformers 5.24 warns on every forward that gets `past_key_values`: the backend passes the keyword the model takes."
    b = request.getfixturevalue(which)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*past_key_values.*")
        b.generate([chat("Hi", sampling=SamplingParams(max_tokens=3))])
        cached = b.prefill_cache(b.render_prompt_ids(chat("Hi")))
        b.continue_many(cached, [(len(cached), b.encode(" ok"))], SamplingParams(max_tokens=2))


def test_one_batched_draw_per_step(backend, monkeypatch):
    "Sampling runs once per step for the whole batch (not once per row), and each row still gets its own stream."
    calls = []
    sample = tb.sample_tokens
    monkeypatch.setattr(tb, "sample_tokens", lambda logits, s, g: calls.append(logits.shape[0]) or sample(logits, s, g))
    sampling = SamplingParams(temperature=0.9, top_k=40, top_p=0.9, n=6, seed=2, max_tokens=5, stop=("zzz",))
    [samples] = with_batch_size(backend, 8).generate([chat("Name an animal.", sampling=sampling)])
    assert len(calls) == max(c.completion_tokens for c in samples) and calls[0] == 6
    monkeypatch.setattr(tb, "sample_tokens", sample)
    for i in (0, 5):
        alone = backend.generate(
            [
                chat(
                    "Name an animal.",
                    sampling=SamplingParams(
                        temperature=0.9, top_k=40, top_p=0.9, seed=sampling.sample_seed(i), max_tokens=5, stop=("zzz",)
                    ),
                )
            ]
        )[0][0]
        assert alone.text == samples[i].text


def test_mixed_sampling_rules_in_one_batch_equal_each_alone(backend):
    rules = [
        SamplingParams(temperature=0.7, top_p=0.8, seed=1, max_tokens=8),
        SamplingParams(max_tokens=8),
        SamplingParams(temperature=1.2, top_k=5, seed=2, max_tokens=8),
        SamplingParams(temperature=1.0, seed=3, max_tokens=8),
    ]
    requests = [chat(q, sampling=r) for q, r in zip(QUESTIONS, rules)]
    together = with_batch_size(backend, 8).generate(requests)
    assert texts(together) == [texts(backend.generate([r]))[0] for r in requests]


def test_sampler_is_row_independent_and_faithful():
    device = tb.default_device()
    logits = torch.randn(6, 300, generator=torch.Generator().manual_seed(1)).to(device)
    rules = [
        SamplingParams(temperature=t, top_k=k, top_p=p)
        for t, k, p in [(0.7, 0, 0.9), (0.0, 0, 1.0), (1.0, 20, 1.0), (1.5, 3, 0.5), (1.0, 0, 1.0), (0.3, 299, 0.99)]
    ]
    for seed in range(10):
        gens = lambda: [
            tb.row_generator(seed + 100 * i, device) if r.temperature else None for i, r in enumerate(rules)
        ]
        batch = tb.sample_tokens(logits, rules, gens()).tolist()
        alone = [tb.pick_next_token(logits[i], r, g) for i, (r, g) in enumerate(zip(rules, gens()))]
        assert batch == alone and batch[1] == int(logits[1].argmax())
    kept = tb.filter_logits(logits, [r.top_k for r in rules], [r.top_p for r in rules]).isfinite()
    assert kept[2].sum() == 20 and kept[3].sum() <= 3 and kept[1].all() and kept[4].all()
    # the empirical distribution of many draws follows the filtered probabilities
    probs = (tb.filter_logits(logits[3:4] / 1.5, 3, 0.5)).softmax(-1)
    g = tb.row_generator(0, device)
    draws = torch.cat(
        [tb.draw_tokens(probs, torch.rand(1, generator=g, device=device, dtype=torch.float64)) for _ in range(3000)]
    )
    freq = torch.bincount(draws, minlength=300).double() / 3000
    assert (freq - probs[0].double()).abs().max() < 0.04 and freq[probs[0] == 0].sum() == 0


def test_stop_strings_decode_only_a_tail(backend, monkeypatch):
    lengths, decode = [], backend.decode
    monkeypatch.setattr(backend, "decode", lambda ids: lengths.append(len(list(ids))) or decode(ids))
    c = backend.generate(
        [chat("Write a poem about the sea.", sampling=SamplingParams(max_tokens=24, stop=("zzz", "\n\n\n\n")))]
    )[0][0]
    assert c.completion_tokens == 24
    steps = lengths[:-1]  # the last call is the completion's own text
    assert len(steps) == 24 and max(steps) <= tb.stop_window(("zzz", "\n\n\n\n")) < 24


def test_stop_string_across_tokens_and_multibyte(backend):
    question = "List three fruits."
    full = backend.generate([chat(question, sampling=SamplingParams(max_tokens=24))])[0][0]
    words = full.text.split()
    stop = " ".join(words[2:4])  # spans several tokens
    stopped = backend.generate([chat(question, sampling=SamplingParams(max_tokens=24, stop=(stop,)))])[0][0]
    assert stopped.text == full.text[: full.text.index(stop)] and stopped.finish_reason == "stop"


# ---------------------------------------------------------------- the shared prefix of continue_many


def long_trace(b, tokens=600):
    q = chat("Explain, step by step, how to add 17 and 25.", sampling=SamplingParams(max_tokens=8))
    prompt = b.render_prompt_ids(q)
    filler = b.encode(" First I add the tens, then the ones, and I check the sum again." * 60)
    return prompt, prompt + filler[: tokens - len(prompt)]


@pytest.mark.parametrize("which", ["backend", "qwen"])
def test_continue_many_holds_one_prefix_not_one_per_row(which, request, monkeypatch):
    "8 rows over a 600-token trace: the trace is cached once, exactly; a batch's passes hold only the rows' own positions."
    b = with_batch_size(request.getfixturevalue(which), 8)
    prompt, sequence = long_trace(b)
    cached = b.prefill_cache(sequence)
    cue = b.encode("\nSo the answer is")
    jobs = [(len(sequence) - 40 * k, cue) for k in range(8)]
    held, run_model, loaded = [], b.run_model, b.model.config._attn_implementation
    monkeypatch.setattr(
        b,
        "run_model",
        lambda cache, **inputs: held.append((tb.cache_nbytes(cache), cache)) or run_model(cache, **inputs),
    )
    greedy = SamplingParams(max_tokens=6)
    continued = b.continue_many(cached, jobs, greedy)
    config = b.model.config.get_text_config()
    per_position = (
        2
        * config.num_hidden_layers
        * config.num_key_value_heads
        * getattr(config, "head_dim", config.hidden_size // config.num_attention_heads)
        * b.model.dtype.itemsize
    )
    prefix_bytes = tb.cache_nbytes(cached.cache)
    assert prefix_bytes == len(sequence) * per_position  # the trace, exactly: its buffers were sized once
    own = len(jobs) * (len(cue) + greedy.max_tokens) * per_position  # each row's suffix and generated tokens
    largest = max(n for n, _ in held)
    print(
        f"{which}: prefix {prefix_bytes / 1e6:.1f} MB, largest batch cache {largest / 1e6:.2f} MB, one copy per row would be {8 * prefix_bytes / 1e6:.1f} MB"
    )
    assert largest == own < 0.2 * prefix_bytes  # no pass held any copy of the prefix
    prefix_storage = {layer.keys.untyped_storage().data_ptr() for layer in cached.cache.layers}
    assert not prefix_storage & {
        layer.keys.untyped_storage().data_ptr() for _, c in held for layer in c.layers if layer.keys is not None
    }
    naive = b.generate([Request(prompt_token_ids=sequence[:n] + s, sampling=greedy) for n, s in jobs])
    assert [c.text for c in continued] == [r[0].text for r in naive]
    assert b.model.config._attn_implementation == loaded  # the loaded attention, put back


def test_continue_many_on_qwen3_equals_reencoding(qwen):
    prompt = qwen.render_prompt_ids(chat("What is 6 * 7?", prefill="<think>\n", sampling=SamplingParams(max_tokens=20)))
    trace = qwen.generate([Request(prompt_token_ids=prompt, sampling=SamplingParams(max_tokens=20))])[0][0]
    sequence = prompt + qwen.encode(trace.text)
    cached = qwen.prefill_cache(sequence, chunk=7)
    close = qwen.encode("\n</think>\n\nThe answer is")
    jobs = [
        (len(prompt) + 2, close),
        (len(sequence), close[:2]),
        (len(prompt) + 11, close),
        (len(prompt) + 6, []),
        (len(prompt) + 1, close[1:]),
    ]
    greedy = SamplingParams(max_tokens=5)
    prober = with_batch_size(qwen, 3, probe_batch_size=3)  # two batches
    prober.prefill_chunk = 4  # the suffixes are encoded a row per forward pass, then decoded together
    continued = prober.continue_many(cached, jobs, greedy, thinking=False)
    naive = qwen.generate([Request(prompt_token_ids=sequence[:n] + list(s), sampling=greedy) for n, s in jobs])
    assert [c.text for c in continued] == [r[0].text for r in naive]
    assert [c.cached_prompt_tokens for c in continued] == [n if s else n - 1 for n, s in jobs]

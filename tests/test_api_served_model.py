"""Issue 30, point 3: which model answered is recorded, and a stored answer is reused only for the same reported model.

A provider alias (`deepseek-reasoner`, `gpt-4o-mini`) can be repointed to another model at any time. A local
OpenAI-compatible server on 127.0.0.1 stands in for such a provider: every reply names the model behind the alias
(`model`) and a `system_fingerprint`, and the test repoints the alias between two runs on one store."""

import pytest
from local_server import LocalServer, chat_reply

from reasoning_study.backends.presets import ModelPreset, load_backend
from reasoning_study.backends.request import SamplingParams, chat
from reasoning_study.provenance import finish_record, start_record
from reasoning_study.store import GenerationStore, generate_cached


class AliasServer(LocalServer):
    "A provider whose alias points at `self.model`: each reply names that model and its fingerprint, and answers as it."

    def __init__(self, model: str):
        super().__init__()
        self.model = model

    def respond(self, body):
        with self.lock:
            self.record(body)
            model = self.model
        return 200, {}, {**chat_reply(f"answer of {model}"), "model": model, "system_fingerprint": f"fp_{model}"}


def alias_backend(server):
    "A fresh backend on the alias (a new run: it knows nothing of the server yet)."
    return load_backend(
        ModelPreset("alias", "provider-alias", "openai", "never"),
        base_url=server.base_url,
        retry_base_delay=0.01,
        max_concurrency=1,
    )


QUESTION = [chat("What is 2+2?", sampling=SamplingParams(temperature=0.7, max_tokens=16, seed=1))]


def test_each_completion_names_the_model_that_answered():
    with AliasServer("model-2024-07-18") as server:
        [[c]] = alias_backend(server).generate(QUESTION)
    assert (c.served_model, c.system_fingerprint, c.text) == (
        "model-2024-07-18",
        "fp_model-2024-07-18",
        "answer of model-2024-07-18",
    )


def test_a_stored_answer_is_reused_only_for_the_same_reported_model(tmp_path):
    with AliasServer("model-2024-07-18") as server, GenerationStore(tmp_path / "s.sqlite") as store:
        first = alias_backend(server)
        [[made]] = generate_cached(first, QUESTION, store, progress=False)
        row = store.get(store.keys()[0])
        assert (row.served_model, row.system_fingerprint) == ("model-2024-07-18", "fp_model-2024-07-18")
        assert len(server.bodies) == 1

        [[again]] = generate_cached(first, QUESTION, store, progress=False)  # the same run: the model is known
        assert again.text == made.text and len(server.bodies) == 1 and store.last_stats.cached == 1

        # a later run, the alias unchanged: one identifying request, the answer reused
        unchanged = alias_backend(server)
        [[reused]] = generate_cached(unchanged, QUESTION, store, progress=False)
        assert reused.text == "answer of model-2024-07-18" and store.last_stats.cached == 1
        [identify] = server.bodies[1:]
        assert identify.get("max_completion_tokens") == 1 and "seed" not in identify

        server.model = "model-2025-04-14"  # the provider repoints the alias
        moved = alias_backend(server)
        [[fresh]] = generate_cached(moved, QUESTION, store, progress=False)
        assert fresh.text == "answer of model-2025-04-14" and fresh.served_model == "model-2025-04-14"
        assert (store.last_stats.cached, store.last_stats.generated) == (0, 1)
        assert store.get(store.keys()[0]).served_model == "model-2025-04-14" and len(store) == 1


def test_run_json_names_the_reported_models():
    with AliasServer("model-2024-07-18") as server:
        backend = alias_backend(server)
        backend.generate(QUESTION)
        server.model = "model-2025-04-14"
        backend.generate(QUESTION)
    record = finish_record(start_record("musobench", {"x": 1}), {"model": backend})
    assert record["served_models"] == {
        "model": [
            {"model": "model-2024-07-18", "system_fingerprint": "fp_model-2024-07-18"},
            {"model": "model-2025-04-14", "system_fingerprint": "fp_model-2025-04-14"},
        ]
    }
    assert set(record["backends"]["model"]) == {
        "backend",
        "model",
        "revision",
        "dtype",
        "device",
    }  # describe() unchanged


def test_stage_chunk_keeps_the_server_saturated():
    backend = load_backend(ModelPreset("p", "m", "openai"), base_url="http://127.0.0.1:9/v1", max_concurrency=16)
    assert backend.stage_chunk == 64
    with pytest.raises(AttributeError):
        backend.stage_chunk = 3  # read-only

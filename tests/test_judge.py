"""Tests of `reasoning_study.probing.judge`: strict validation of hand-written replies, the retry loop and
its statuses (scripted replies for the pure logic), Table 4 on hand-computed verdicts, and one real
judge call on the embedded model through the generation store."""

import json
import math
import os
from dataclasses import replace

import pandas as pd
import pytest
from local_server import LocalServer, chat_reply

from reasoning_study.backends.request import SamplingParams, make_completion
from reasoning_study.probing.judge import (
    CASE_COLUMNS,
    JUDGE_SAMPLING,
    RESULT_COLUMNS,
    JudgeCase,
    as_cases,
    attempt_sampling,
    judge_request,
    judge_traces,
    parse_judgement,
    taxonomy_table,
)
from reasoning_study.prompts.overthinking import FAILURE_CATEGORIES, JUDGE_SCHEMA
from reasoning_study.store import GenerationStore

VALID = {
    "category": "visual",
    "secondary_categories": [],
    "severity": 50,
    "what_went_wrong": "It recounted the bricks and saw two missing that are there.",
    "evidence": "on the right side, there are 2 bricks missing",
    "minimal_example": "Counting 5 bricks where the figure shows 6.",
    "confidence": 80,
}


def case(case_id, model="m", benchmark="b"):
    return JudgeCase(
        case_id,
        model,
        benchmark,
        f"How many bricks are in wall {case_id}?",
        "6",
        "5",
        "I count the bricks row by row: 3 + 3 = 6.",
        "I count the bricks row by row: 3 + 3 = 6. On the right side, 2 bricks are missing, so 5.",
    )


# --- validation ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "reply",
    [
        json.dumps(VALID),
        "  \n" + json.dumps(VALID, indent=2) + "\n",
        "```json\n" + json.dumps(VALID) + "\n```",
        "```\n" + json.dumps(VALID) + "\n```",
        "<think>The added step misreads the figure.</think>\n" + json.dumps(VALID),
        "<think>a</think><think>b</think>" + json.dumps(VALID),
        json.dumps({**VALID, "secondary_categories": ["logical", "calculation"], "severity": 0, "confidence": 100}),
        json.dumps({**VALID, "evidence": ""}),  # the schema allows an empty quote
    ],
)
def test_valid_replies(reply):
    verdict, status, error = parse_judgement(reply)
    assert status == "ok" and error is None and verdict["category"] in FAILURE_CATEGORIES
    assert set(verdict) == set(JUDGE_SCHEMA["required"])


@pytest.mark.parametrize(
    "reply,reason",
    [
        (None, "empty reply"),
        ("   ", "empty reply"),
        ("<think>only thoughts</think>", "nothing after the thinking block"),
        ('<think>never closed {"category": "visual"}', "never closed"),
        ("Category: logical", "not one JSON object"),
        ("The verdict is " + json.dumps(VALID), "not one JSON object"),
        (json.dumps(VALID) + " I am confident.", "not one JSON object"),
        (json.dumps(VALID) + json.dumps(VALID), "not one JSON object"),
        ("{'category': 'visual'}", "not one JSON object"),  # Python, not JSON
        ('"visual"', "not an object"),
        ("null", "not an object"),
        (json.dumps({**VALID, "category": "Visual"}), "'Visual' is not one of"),
        (json.dumps({**VALID, "category": "other"}), "'other' is not one of"),
        (json.dumps({**VALID, "category": ["visual"]}), "is not of type 'string'"),
        (json.dumps({**VALID, "secondary_categories": "logical"}), "is not of type 'array'"),
        (json.dumps({**VALID, "severity": -1}), "less than the minimum"),
        (json.dumps({**VALID, "severity": "50"}), "is not of type 'integer'"),
        (json.dumps({**VALID, "severity": 50.5}), "is not of type 'integer'"),
        (json.dumps({**VALID, "confidence": 0.8}), "is not of type 'integer'"),
        (json.dumps({**VALID, "confidence": 1000}), "greater than the maximum"),
        (json.dumps({**VALID, "severity": None}), "None is not of type 'integer'"),
        (json.dumps({**VALID, "severity": float("nan")}), "NaN is not valid JSON"),
        (json.dumps({**VALID, "confidence": float("inf")}), "Infinity is not valid JSON"),
        (
            json.dumps({k: v for k, v in VALID.items() if k != "what_went_wrong"}),
            "'what_went_wrong' is a required property",
        ),
        (json.dumps({**VALID, "went_wrong": "x"}), "Additional properties are not allowed"),
        (json.dumps({**VALID, "parse_error": False}), "Additional properties are not allowed"),
        (json.dumps(VALID)[:-1] + ', "category": "logical"}', "duplicate keys ['category']"),
        ("{}", "is a required property"),
    ],
)
def test_invalid_replies_are_parse_errors(reply, reason):
    verdict, status, error = parse_judgement(reply)
    assert verdict is None and status == "parse_error" and reason in error, error


def test_many_schema_errors_are_summarised():
    verdict, status, error = parse_judgement(json.dumps({"severity": 500, "x": 1}))
    assert status == "parse_error" and "more)" in error


# --- cases -----------------------------------------------------------------------------------------


def test_cases_from_a_dataframe_keep_extra_columns():
    frame = pd.DataFrame(
        [{**{c: getattr(case("a"), c) for c in CASE_COLUMNS}, "last_correct_index": 3, "final_index": 9}]
    )
    (c,) = as_cases(frame)
    assert c == JudgeCase(
        **{k: getattr(case("a"), k) for k in CASE_COLUMNS}, metadata={"last_correct_index": 3, "final_index": 9}
    )
    with pytest.raises(ValueError, match="unique"):
        as_cases([case("a"), case("a")])
    with pytest.raises(ValueError, match="missing columns"):
        as_cases([{"case_id": "a", "model": "m"}])
    with pytest.raises(TypeError, match="`gold` must be a string"):
        JudgeCase("a", "m", "b", "q", 6, "5", "p", "t")


def test_request_carries_the_traces_and_the_schema_keys():
    request = judge_request(case("a"))
    user = request.messages[-1]["content"]
    assert "I count the bricks row by row: 3 + 3 = 6." in user and "2 bricks are missing" in user
    assert all(key in user for key in JUDGE_SCHEMA["required"])
    assert request.sampling == JUDGE_SAMPLING and request.tag == "judge:a"


def test_request_asks_for_structured_output_and_keys_on_it():
    from types import SimpleNamespace

    from reasoning_study.store import generation_key

    judge = SimpleNamespace(name="vllm", model_id="judge", revision="r")
    structured, free = judge_request(case("a")), judge_request(case("a"), structured=False)
    assert structured.response_schema == JUDGE_SCHEMA and free.response_schema is None
    assert structured.prompt_key()["response_schema"] == JUDGE_SCHEMA and "response_schema" not in free.prompt_key()
    # a free reply is never served for a constrained one
    assert generation_key(judge, structured, 0) != generation_key(judge, free, 0)


def test_image_cases_show_the_figure():
    from PIL import Image

    figure = Image.new("RGB", (6, 6), "gray")
    frame = pd.DataFrame(
        [
            {**{c: getattr(case("a"), c) for c in CASE_COLUMNS}, "image": figure},
            {**{c: getattr(case("b"), c) for c in CASE_COLUMNS}, "image": None},
        ]
    )
    with_figure, without = as_cases(frame)
    assert with_figure.image is figure and without.image is None and "image" not in with_figure.metadata
    assert len(judge_request(with_figure).images) == 1 and judge_request(without).images == ()


def planets_case(**ground_truth) -> JudgeCase:
    "A multiple-choice case: the trace had Jupiter (B) and ended with C."
    return JudgeCase(
        "planets",
        "m",
        "mmlu-sample",
        "Which planet is largest?",
        "Jupiter",
        "C",
        "Jupiter is the largest, so B.",
        "Jupiter is the largest, so B. Wait, Venus looks bigger: C.",
        **ground_truth,
    )


OPTIONS = ["Mars", "Jupiter", "Venus", "Earth"]


def test_a_multiple_choice_case_shows_its_options_and_gold():
    "Issue 41, point 6: the judge reads every option with its letter, the gold letter and text, format and benchmark."
    user = judge_request(planets_case(format="mc", options=OPTIONS, gold_letter="B")).messages[-1]["content"]
    assert "A. Mars\nB. Jupiter\nC. Venus\nD. Earth" in user
    assert (
        "Correct answer: B. Jupiter" in user and "Format: multiple choice" in user and "Benchmark: mmlu-sample" in user
    )
    assert "answer-option mismatch" in user
    # the block sits between the problem and the traces
    assert user.index("Which planet is largest?") < user.index("Ground truth:") < user.index("<correct_prefix>")


def test_ground_truth_of_other_cases():
    free = JudgeCase("ff", "m", "aime2025", "Find x.", "42", "41", "x = 42", "x = 42. No, 41.", format="ff")
    assert "Format: free form\nCorrect answer: 42\n" in judge_request(free).messages[-1]["content"]
    in_image = planets_case(format="mc", gold_letter="D")  # the options are drawn in the figure
    user = judge_request(replace(in_image, gold="D")).messages[-1]["content"]
    assert "Options: not listed here" in user and "Correct answer: D\n" in user


def test_a_case_without_a_format_gets_the_prompt_it_always_got():
    "The ground truth is one block added after the problem; without a format the prompt has none (stored replies stay valid)."
    told_case = planets_case(format="mc", options=OPTIONS, gold_letter="B")
    bare, told = judge_request(planets_case()).messages, judge_request(told_case).messages
    assert (
        "Ground truth" not in bare[-1]["content"]
        and "Which planet is largest?\n\nReasoning up to" in bare[-1]["content"]
    )
    assert bare[0] == told[0] and told[-1]["content"].replace(told_case.ground_truth, "", 1) == bare[-1]["content"]


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(format="mc", options=OPTIONS, gold_letter="C"), "is not option C"),
        (dict(format="mc", options=OPTIONS), "needs the gold letter"),
        (dict(format="ff", options=OPTIONS, gold_letter="B"), "free-form ground truth has no options"),
        (dict(format="open"), "answer format must be one of"),
    ],
)
def test_a_ground_truth_that_cannot_be_written_fails_at_once(fields, message):
    with pytest.raises(ValueError, match=message):
        planets_case(**fields)


def test_ground_truth_columns_of_a_dataframe():
    frame = pd.DataFrame(
        [
            {
                **{c: getattr(planets_case(), c) for c in CASE_COLUMNS},
                "format": "mc",
                "options": OPTIONS,
                "gold_letter": "B",
            },
            {**{c: getattr(case("b"), c) for c in CASE_COLUMNS}, "format": None, "options": None, "gold_letter": None},
        ]
    )
    told, bare = as_cases(frame)
    assert (told.format, told.options, told.gold_letter, told.metadata) == ("mc", OPTIONS, "B", {})
    assert (bare.format, bare.options, bare.gold_letter, bare.ground_truth) == (None, None, None, "")
    assert "B. Jupiter" in judge_request(told).messages[-1]["content"]


def test_retry_sampling():
    assert attempt_sampling(JUDGE_SAMPLING, 0, 0.7) == JUDGE_SAMPLING
    retry = attempt_sampling(JUDGE_SAMPLING, 2, 0.7)
    assert (retry.seed, retry.temperature, retry.max_tokens) == (2, 0.7, JUDGE_SAMPLING.max_tokens)
    assert attempt_sampling(SamplingParams(temperature=1.0, seed=5), 1, 0.7).temperature == 1.0


# --- the retry loop --------------------------------------------------------------------------------


class ScriptedJudge:
    "A stand-in backend: replies keyed by (case tag, seed); None means the call fails (pure-logic tests only)."

    name, model_id, revision = "scripted", "scripted-judge", "v1"

    def __init__(self, script):
        self.script, self.calls = script, []

    def generate(self, requests):
        self.calls.append([(r.tag, r.sampling.seed, r.sampling.temperature) for r in requests])
        out = []
        for r in requests:
            reply = self.script[(r.tag, r.sampling.seed)]
            out.append(
                [
                    make_completion("", "error", error="connection reset")
                    if reply is None
                    else make_completion(reply, "stop")
                ]
            )
        return out


SCRIPT = {
    ("judge:ok", 0): json.dumps(VALID),
    ("judge:fixed", 0): "It is visual.",
    ("judge:fixed", 1): json.dumps({**VALID, "category": "logical"}),
    ("judge:hopeless", 0): "{}",
    ("judge:hopeless", 1): "[]",
    ("judge:hopeless", 2): json.dumps({**VALID, "severity": 900}),
    ("judge:down", 0): None,
    ("judge:down", 1): None,
    ("judge:down", 2): None,
    ("judge:flaky", 0): None,
    ("judge:flaky", 1): json.dumps({**VALID, "category": "calculation", "severity": 75.0}),
}


def test_statuses_attempts_and_fields():
    backend = ScriptedJudge(SCRIPT)
    result = judge_traces(backend, [case(k) for k in ("ok", "fixed", "hopeless", "down", "flaky")], retries=2)
    assert list(result.columns) == list(RESULT_COLUMNS)
    assert result["status"].tolist() == ["ok", "ok", "parse_error", "error", "ok"]
    assert result["attempts"].tolist() == [1, 2, 3, 3, 2]
    assert result["category"].tolist()[:2] == ["visual", "logical"] and result.loc[4, "category"] == "calculation"
    assert (
        result.loc[4, "severity"] == 75
        and result["severity"].dtype == "Int64"
        and result["confidence"].dtype == "Int64"
    )
    hopeless, down = result.loc[2], result.loc[3]
    assert "greater than the maximum" in hopeless["error"] and hopeless["raw_reply"] == SCRIPT[("judge:hopeless", 2)]
    assert all(pd.isna(hopeless[k]) for k in JUDGE_SCHEMA["required"])  # never turned into a category
    assert down["error"] == "connection reset" and down["finish_reason"] == "error"
    # attempt k re-asks only the cases still invalid, with seed k and a non-zero temperature
    assert [[tag for tag, _, _ in call] for call in backend.calls] == [
        ["judge:ok", "judge:fixed", "judge:hopeless", "judge:down", "judge:flaky"],
        ["judge:fixed", "judge:hopeless", "judge:down", "judge:flaky"],
        ["judge:hopeless", "judge:down"],
    ]
    assert {(seed, temp) for call in backend.calls[1:] for _, seed, temp in call} == {(1, 0.7), (2, 0.7)}


def test_no_retries_and_bad_arguments():
    result = judge_traces(ScriptedJudge(SCRIPT), [case("fixed")], retries=0)
    assert (result.loc[0, "status"], result.loc[0, "attempts"]) == ("parse_error", 1)
    with pytest.raises(ValueError, match="retries must be >= 0"):
        judge_traces(ScriptedJudge(SCRIPT), [case("ok")], retries=-1)
    assert judge_traces(ScriptedJudge(SCRIPT), []).empty


def test_every_attempt_is_stored_and_reused(tmp_path):
    store = GenerationStore(tmp_path / "judge.sqlite")
    cases = [case("ok"), case("fixed"), case("hopeless")]
    first = judge_traces(ScriptedJudge(SCRIPT), cases, store=store, retries=2)
    assert len(store) == 1 + 2 + 3  # one stored sample per attempt
    rerun_backend = ScriptedJudge(SCRIPT)
    again = judge_traces(rerun_backend, cases, store=store, retries=2)
    assert rerun_backend.calls == [] and store.last_stats.cached == 1  # the last round is served from the store
    pd.testing.assert_frame_equal(first, again)
    # identical prompts are one request: two cases that differ only in their id share the stored reply
    twins = [JudgeCase(f"twin{k}", "m", "b", "q", "1", "2", "p", "t") for k in (1, 2)]
    judge_traces(ScriptedJudge({("judge:twin1", 0): json.dumps(VALID)}), twins, store=store, retries=0)
    assert store.last_stats.repeated == 1


@pytest.mark.parametrize("continuous, calls", [(True, 1), (False, 3)])
def test_an_attempt_goes_whole_to_a_continuously_batching_backend(tmp_path, continuous, calls):
    "vLLM gets every case of an attempt in one call (its scheduler fills the GPU); other backends get batches of 8."
    script = {(f"judge:w{k}", 0): json.dumps(VALID) for k in range(20)}
    backend = ScriptedJudge(script)
    backend.supports_continuous_batching = continuous
    with GenerationStore(tmp_path / "judge.sqlite") as store:
        result = judge_traces(backend, [case(f"w{k}") for k in range(20)], store=store, retries=0)
    assert len(backend.calls) == calls and (result["status"] == "ok").all()


# --- structured output through a real HTTP client and server ----------------------------------------


class VerdictServer(LocalServer):
    """A local OpenAI-compatible server standing in for a judge with structured output: it records every body,
    and answers a request that carries the judge's response_format with the next scripted reply."""

    def __init__(self, replies):
        super().__init__()
        self.replies = list(replies)

    def respond(self, body):
        with self.lock:
            self.record(body)
            schema = body.get("response_format", {}).get("json_schema", {}).get("schema")
            content = self.replies.pop(0) if schema == JUDGE_SCHEMA else "no schema, no verdict"
        return 200, {}, chat_reply(content, usage=(1, 1))


def test_structured_judge_over_http(tmp_path):
    from reasoning_study.backends.presets import ModelPreset, load_backend

    truncated_object = json.dumps(VALID)[:40]  # a reply cut at the token budget is still invalid JSON
    with VerdictServer([json.dumps(VALID), truncated_object, json.dumps({**VALID, "category": "logical"})]) as server:
        backend = load_backend(
            ModelPreset("judge", "judge-model", "openai", "never"), base_url=server.base_url, max_concurrency=1
        )
        result = judge_traces(backend, [case("a"), case("b")], store=GenerationStore(tmp_path / "j.sqlite"), retries=1)
        unstructured = judge_traces(backend, [case("c")], retries=0, structured=False)
    assert all(
        b["response_format"]
        == {"type": "json_schema", "json_schema": {"name": "response", "schema": JUDGE_SCHEMA, "strict": True}}
        for b in server.bodies[:3]
    )
    assert "response_format" not in server.bodies[3]
    assert result["status"].tolist() == ["ok", "ok"] and result["attempts"].tolist() == [1, 2]
    assert result["category"].tolist() == ["visual", "logical"]
    assert (unstructured.loc[0, "status"], unstructured.loc[0, "raw_reply"]) == ("parse_error", "no schema, no verdict")


def test_invalid_structured_reply_is_still_a_parse_error():
    from reasoning_study.backends.presets import ModelPreset, load_backend

    with VerdictServer([json.dumps(VALID)[:40]]) as server:
        backend = load_backend(ModelPreset("judge", "judge-model", "openai", "never"), base_url=server.base_url)
        result = judge_traces(backend, [case("a")], retries=0)
    row = result.loc[0]
    assert row["status"] == "parse_error" and "not one JSON object" in row["error"] and pd.isna(row["category"])


# --- Table 4 ---------------------------------------------------------------------------------------


def test_taxonomy_table_hand_computed():
    rows = (
        [("m1", "aime", "ok", "logical")] * 3
        + [("m1", "aime", "ok", "calculation")]
        + [("m1", "aime", "parse_error", None)] * 2
        + [("m1", "gpqa", "ok", "visual"), ("m1", "gpqa", "error", None)]
        + [("m2", "aime", "ok", "visual"), ("m2", "aime", "ok", "logical")]
    )
    judgements = pd.DataFrame(rows, columns=["model", "benchmark", "status", "category"])
    table = taxonomy_table(judgements)
    assert table[["model", "benchmark"]].values.tolist() == [["m1", "aime"], ["m1", "gpqa"], ["m2", "aime"]]
    assert table[["n_cases", "n_valid", "n_parse_error", "n_error"]].values.tolist() == [
        [6, 4, 2, 0],
        [2, 1, 0, 1],
        [2, 2, 0, 0],
    ]
    assert table[list(FAILURE_CATEGORIES)].values.tolist() == [[0.0, 25.0, 75.0], [100.0, 0.0, 0.0], [50.0, 0.0, 50.0]]
    assert all(math.isclose(s, 100.0) for s in table[list(FAILURE_CATEGORIES)].sum(axis=1))


def test_taxonomy_table_from_judge_output_and_errors():
    result = judge_traces(
        ScriptedJudge(SCRIPT), [case("ok", "m1"), case("fixed", "m1"), case("hopeless", "m1")], retries=1
    )
    table = taxonomy_table(result)
    assert table.loc[0, ["n_cases", "n_valid", "n_parse_error"]].tolist() == [3, 2, 1]
    assert table.loc[0, ["visual", "logical"]].tolist() == [50.0, 50.0]
    with pytest.raises(ValueError, match="lack columns"):
        taxonomy_table(result.drop(columns="status"))
    with pytest.raises(ValueError, match="unknown categories"):
        taxonomy_table(result.assign(category="other"))


# --- a real judge call -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def embedded():
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from reasoning_study.backends.presets import load_backend

    return load_backend("smollm2-135m")


@pytest.mark.slow
def test_embedded_model_as_judge(embedded, tmp_path):
    store = GenerationStore(tmp_path / "judge.sqlite")
    sampling = SamplingParams(max_tokens=24)
    result = judge_traces(embedded, [case("real")], store=store, retries=1, sampling=sampling)
    row = result.loc[0]
    assert row["status"] in ("ok", "parse_error") and row["raw_reply"]
    if row["status"] == "parse_error":  # what a 135M model usually gives: recorded as invalid, no category invented
        assert row["attempts"] == 2 and row["error"] and all(pd.isna(row[k]) for k in JUDGE_SCHEMA["required"])
    else:
        assert row["category"] in FAILURE_CATEGORIES
    again = judge_traces(embedded, [case("real")], store=store, retries=1, sampling=sampling)
    assert store.last_stats.generated == 0
    pd.testing.assert_frame_equal(result, again)


def test_image_questions_need_a_judge_that_sees_the_figure():
    "Issue 30 point 5: a text-only judge of image questions is refused before any model loads, unless asked for."
    from reasoning_study.config import ConfigError
    from reasoning_study.studies.overthinking.study import OverthinkingConfig

    image_questions = dict(
        preset="qwen2.5-vl-7b-instruct", benchmarks=["mathvision"], extractors=["rules"], musobench_tasks=[]
    )
    with pytest.raises(ConfigError, match="judge 'qwen3-judge' is text-only"):
        OverthinkingConfig(**image_questions, judge="qwen3-judge")
    assert OverthinkingConfig(**image_questions, judge="qwen3-judge", text_only_judge=True).text_only_judge
    assert OverthinkingConfig(**image_questions, judge="qwen3-vl-judge").judge == "qwen3-vl-judge"
    OverthinkingConfig(benchmarks=["champ"], judge="qwen3-judge")  # text questions: a text judge is fine

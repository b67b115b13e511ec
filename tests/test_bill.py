"""The bill before the run (`sweep.bill`, each study's `workload`): the counts of small grids written out by hand.

No model loads and nothing runs: the studies count what their `run` would ask from the config alone (the instances
are built, seconds), and the bill prices it at the model map's rates or the stated GPU throughput.
"""

import math
from pathlib import Path

import pandas as pd
import pytest

from reasoning_study.backends.lifecycle import map_entry
from reasoning_study.prompts.musobench import CONFIDENCE_PROMPT, RECONSIDER_PROMPT, solve_prompt
from reasoning_study.studies.attention.study import AttentionConfig
from reasoning_study.studies.attention.study import workload as attention_workload
from reasoning_study.studies.musobench.config import MuSoBenchConfig
from reasoning_study.studies.musobench.replies import exploration_prefill
from reasoning_study.studies.musobench.run import workload as musobench_workload
from reasoning_study.studies.overthinking.config import OverthinkingConfig
from reasoning_study.studies.overthinking.run import workload as overthinking_workload
from reasoning_study.studies.registry import STUDIES, TEMPLATE_TOKENS, contract_problems, study_workload
from reasoning_study.sweep.bill import NO_WORKLOAD, REMOTE, bill_markdown, sweep_bill
from reasoning_study.sweep.spec import load_sweep
from reasoning_study.tasks.musobench import build_task

BUDGET = 1000
# Qwen3-8B both ways on SubsetSum levels 1 and 2, three instances a level: N = 6
SMALL = dict(
    short_preset="qwen3-8b",
    long_preset="qwen3-8b",
    tasks=["subsetsum"],
    levels=[1, 2],
    per_level=3,
    sc_samples=4,
    reflection_ks=[0, 2],
    max_tokens=BUDGET,
    reply_openings=["confidence"],
    temperature=0.2,
)


def test_musobench_counts_by_hand():
    bill = {w.role: w for w in musobench_workload(MuSoBenchConfig(**SMALL))}
    n = 6
    # Short-CoT: solve, exploration, then confidence and reconsideration of the base and exploration dialogues
    short = n + n + 2 * n + 2 * n
    # Long-CoT: 4 solve samples, 2 checkpoint continuations; 7 dialogues an instance (base, 4 samples, 2 checkpoints)
    # asked for confidence, each reopened after the model's own </think> (the confidence opening); 3 reconsidered
    long = 4 * n + 2 * n + 7 * n + 7 * n + 3 * n
    assert (bill["short"].requests, bill["long"].requests) == (36, 138) == (short, long)
    assert bill["short"].completion_tokens_max == short * BUDGET
    assert bill["long"].completion_tokens_max == long * BUDGET
    # the Short-CoT prompt bound, term by term: one token a character, TEMPLATE_TOKENS a message; a turn-1 answer
    # carried on is at most twice the budget (an exploration continuation appends to the base answer)
    items = build_task("subsetsum", seed=0, per_level=3, levels=[1, 2])
    question = sum(len(solve_prompt("subsetsum", it.question, "short")) + TEMPLATE_TOKENS for it in items)
    confidence = 2 * BUDGET + len(CONFIDENCE_PROMPT) + 2 * TEMPLATE_TOKENS
    reconsider = confidence + BUDGET + len(RECONSIDER_PROMPT) + 2 * TEMPLATE_TOKENS
    expected_bound = (
        question  # turn 1
        + question
        + n * (BUDGET + len(exploration_prefill("")))  # exploration: the answer and the cue, continued
        + 2 * question
        + 2 * n * confidence  # two dialogues an instance
        + 2 * question
        + 2 * n * reconsider
    )
    assert bill["short"].prompt_tokens_max == expected_bound
    # the expected figure: the typical lengths, never above the bound
    assert 0 < bill["short"].completion_tokens_expected < bill["short"].completion_tokens_max
    assert all(w.prompt_tokens_expected < w.prompt_tokens_max for w in bill.values())


def test_musobench_budget_caps_the_typical_length():
    small = MuSoBenchConfig(**{**SMALL, "max_tokens": 100, "paradigms": ["long"], "sc_samples": 0, "reflection_ks": []})
    (long,) = musobench_workload(small)
    assert long.requests == 6 + 6 + 6 + 6  # solve, confidence and its reopening, reconsideration
    assert long.completion_tokens_expected <= long.completion_tokens_max == 24 * 100


def test_musobench_noveltybench_judge_and_rater():
    config = MuSoBenchConfig(
        short_preset="qwen3-8b",
        long_preset="qwen3-8b",
        tasks=["noveltybench"],
        novelty_prompts=5,
        novelty_k=4,
        novelty_mode="independent",
        novelty_judge="qwen3-8b",
        novelty_rater="qwen3-8b",
        max_tokens=BUDGET,
        reply_openings=["confidence"],
        temperature=0.2,
    )
    bill = {w.role: w for w in musobench_workload(config)}
    # per paradigm: 5 prompts x 4 samples, 5 confidence turns (Long-CoT's reopened after its own </think>)
    assert (bill["short"].requests, bill["long"].requests) == (20 + 5, 20 + 5 + 5)
    # the judge compares each answer with every class opener so far: at most 0+1+2+3 = 6 per prompt and paradigm
    assert bill["novelty_judge"].requests == 2 * 5 * 6
    assert bill["novelty_rater"].requests == 2 * 5 * 4  # at most every answer opens a class
    assert bill["novelty_judge"].completion_tokens_max == 2 * 5 * 6 * 8  # the judge's 8-token verdicts


def test_overthinking_counts_by_hand():
    config = OverthinkingConfig(
        benchmarks=["mmlu-sample"],
        n_items=3,
        n_samples=2,
        temperature=0.7,
        max_tokens=50,
        granularity=["utterance", "tokens:20"],
        musobench_tasks=[],
    )
    bill = {w.role: w for w in overthinking_workload(config)}
    traces = 3 * 2
    # at most 50 utterances (one token each): 51 prefixes; chunks of 20 tokens: ceil(50 / 20) + 1 = 4; two templates
    probes = traces * 2 * (51 + 4)
    assert bill["model"].requests == traces + probes == 666
    assert bill["model"].completion_tokens_max == traces * 50 + probes * config.probe_max_tokens
    assert bill["extractor:smollm2-135m"].requests == probes + traces  # every probe and every trace's answer
    assert bill["judge"].requests == traces  # at most one harmful trajectory per trace
    assert bill["judge"].completion_tokens_max == traces * config.judge_max_tokens


def test_overthinking_whole_benchmark_uses_its_stated_size():
    config = OverthinkingConfig(
        preset="qwen3-8b-overthinking",
        benchmarks=["aime2025"],
        n_items=None,
        judge=None,
        extractors=["rules"],
        musobench_tasks=[],
        max_tokens=100,
    )
    (model,) = overthinking_workload(config)
    assert model.requests == 30 + 30 * 2 * 101  # AIME 2025: 30 problems; two templates, 101 prefixes each at most


def test_attention_counts():
    (w,) = attention_workload(AttentionConfig(tasks=["subsetsum"], levels=[1, 2], per_level=3, max_new_tokens=1000))
    assert (w.requests, w.completion_tokens_max) == (12, 12_000)  # 6 instances x 2 paradigms
    assert w.completion_tokens_expected == 6 * 600 + 6 * 1000  # Long-CoT's typical 6,000 capped at the budget


def test_workload_is_optional():
    assert study_workload("musobench_build", None) is None
    for name, entry in STUDIES.items():
        assert contract_problems(entry.load(), entry) == []


GRID = """
name: bill-test
experiments:
  - notebook: musobench
    parameters: {tasks: [subsetsum], levels: [1, 2], per_level: 3, temperature: 0.2, max_tokens: 500,
                 paradigms: [short], exploration: false, reflection_ks: [], sc_samples: 0, reply_openings: []}
    cases:
      served: {short_preset: qwen3-8b, long_preset: qwen3-8b}
      api: {short_preset: deepseek-v3, long_preset: deepseek-v3}
      host: {short_preset: deepseek-v3-hosted, long_preset: deepseek-v3-hosted}
  - notebook: musobench_build
    parameters: {per_level: 2}
"""


@pytest.fixture(scope="module")
def small_bill(tmp_path_factory):
    path = tmp_path_factory.mktemp("grid") / "grid.yaml"
    path.write_text(GRID)
    return sweep_bill(load_sweep(path, root=Path(__file__).resolve().parents[1]))


def test_sweep_bill_prices_by_hand(small_bill):
    rows = small_bill.set_index("cell")
    # each cell: 6 solve, 6 confidence and 6 reconsideration turns of at most 500 tokens
    assert rows.loc[["musobench__served", "musobench__api", "musobench__host"], "requests"].tolist() == [18] * 3
    api, served, host = rows.loc["musobench__api"], rows.loc["musobench__served"], rows.loc["musobench__host"]
    chat = map_entry("deepseek-v3")
    assert api["engine"] == "DeepSeek" and api["completion_tokens_max"] == 18 * 500
    assert api["usd_max"] == pytest.approx(
        api["prompt_tokens_max"] * chat["input_cost_per_token"] + 9_000 * chat["output_cost_per_token"]
    )
    assert served["engine"] == "vllm" and math.isnan(served["usd_max"])
    assert served["gpu_hours_max"] == pytest.approx(9_000 / 4_000 / 3600)  # 8B: 4,000 tokens/s on vLLM
    assert host["engine"] == REMOTE and math.isnan(host["usd_max"]) and math.isnan(host["gpu_hours_max"])
    assert rows.loc["musobench_build", "basis"] == NO_WORKLOAD and pd.isna(rows.loc["musobench_build", "requests"])
    total = rows.loc["total"]
    assert total["requests"] == 54 and total["usd_max"] == pytest.approx(api["usd_max"])
    assert total["gpu_hours_max"] == pytest.approx(served["gpu_hours_max"])


def test_bill_markdown(small_bill):
    text = bill_markdown(small_bill)
    lines = [line for line in text.splitlines() if line.startswith("| ")]
    assert len(lines) == 1 + len(small_bill)  # the header, then one line per row (the total's included)
    assert "| **total** |" in text and "LiteLLM's model map" in text and NO_WORKLOAD in text


@pytest.mark.parametrize("grid", ["musobench", "overthinking"])
def test_the_readme_quotes_each_paper_grids_bill_as_it_is_now(grid):
    "The README's bill tables are what `sweep_bill` computes today (a changed grid or price shows up here)."
    from reasoning_study.sweep.bill import bill_by_experiment

    root = Path(__file__).resolve().parents[1]
    table = bill_by_experiment(sweep_bill(load_sweep(root / "nbs" / "sweeps" / f"{grid}.yaml", root)))
    assert table in (root / "README.md").read_text(), table

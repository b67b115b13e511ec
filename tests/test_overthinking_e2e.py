"""End to end: the overthinking experiment notebook through papermill on the embedded model (a tiny slice).

The run (the slice sweep's overthinking cell, conftest, built once per pytest run) must write the three tidy tables of the contract with metrics.overthinking, the metric tables,
and every figure the data supports (the others listed with a reason); a second run with the same
parameters on a copy of its folder must reuse every stored generation (traces, probes, extractor and judge replies).
Bad parameters and model combinations are refused by the notebook's parameter check before any model loads.
"""

import json
import subprocess
from pathlib import Path

import pandas as pd
import pytest
from conftest import CELL_PARAMETERS, papermill_command

from reasoning_study.backends.request import make_completion
from reasoning_study.config import config_from, parameters_source
from reasoning_study.metrics.overthinking import PREFIX_COLUMNS, PREFIX_OPTIONAL, TRACE_COLUMNS, UTTERANCE_COLUMNS
from reasoning_study.studies.overthinking.study import RESULT_FILES, OverthinkingConfig, model_plan, rescore

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "nbs" / "experiments" / "overthinking.ipynb"
# the run-folder tests read the slice sweep's overthinking cell (conftest.SLICE): these sizes, probed after every utterance
# and every 32 tokens (issue 15: token granularity, on the same traces and store)
SLICE = {
    name: CELL_PARAMETERS["overthinking"][name]
    for name in ("n_items", "max_tokens", "probe_max_tokens", "judge_max_tokens")
}

ALWAYS_DRAWN = {"fig1_strategy_accuracy", "table3_results_figure", "table2_stopping_figure", "fig9_transition_matrix"}
NEED_MORE_DATA = {
    "fig12_lengths_utterances",
    "fig13_format_breakdown",
    "fig4_stability_curve",
    "fig10_token_statistics",
    "fig11_wasted_budget",
    "fig7_cross_model",
    "fig8_test_time_scaling",
    "table4_taxonomy",
}
MODEL = "smollm2-135m"
# the results tables whose headline numbers carry `<metric>_lo`, `<metric>_hi` (and `n_units`): issue 31
INTERVALS = {
    "strategies": ["accuracy", "length", "harmful_rate"],
    "overthinking_by_format": ["harmful_rate", "verbose_share"],
    "stopping_at_k": ["accuracy", "length", "harmful_rate"],
    "stopping_policies": ["accuracy", "tokens", "utterances", "gap_recovered"],
}


def papermill(out: Path, name: str, params: dict):
    return subprocess.run(
        papermill_command(NOTEBOOK, out.parent / name, params), capture_output=True, text=True, cwd=ROOT, timeout=1500
    )


def run_stats(folder: Path) -> dict:
    return json.loads((folder / "run_stats.json").read_text())


@pytest.fixture(scope="session")  # once per worker: the slice tests are grouped on one
def runs(slice_sweep, tmp_path_factory):
    "The slice sweep's overthinking run folder and its stats, and the stats of the notebook run again on a copy of it."
    out = slice_sweep.run("overthinking")
    again = tmp_path_factory.mktemp("overthinking") / "rerun"
    second = slice_sweep.rerun("overthinking", again)
    assert second.returncode == 0, (second.stdout + second.stderr)[-3000:]
    return out, run_stats(out), run_stats(again)


@pytest.mark.slow
@pytest.mark.xdist_group("slice")
def test_tables_follow_the_contract(runs):
    out, first, _ = runs
    prefixes = pd.read_parquet(out / "prefixes.parquet")
    traces = pd.read_parquet(out / "traces.parquet")
    utterances = pd.read_parquet(out / "utterances.parquet")
    # the one declaration of the contract (metrics.overthinking), column for column
    # answer_logprobs: the transformers backend declares them
    optional = [c for c in PREFIX_OPTIONAL if c in prefixes.columns]
    assert list(prefixes.columns) == list(PREFIX_COLUMNS) + optional and list(traces.columns) == list(TRACE_COLUMNS)
    assert list(utterances.columns) == list(UTTERANCE_COLUMNS)
    assert set(prefixes["format"]) == {"ff", "mc"} and set(prefixes["template"]) == {"stop_now", "time_up"}
    assert set(prefixes["extractor"]) == {"rules", "llm:smollm2-135m"}
    assert set(prefixes["extraction_method"]) <= {"rules", "llm", "none"}
    assert not prefixes.loc[prefixes.prediction.isna(), "correct"].any()  # no answer is never correct
    failed = prefixes["probe_status"].isin(["error", "extractor_error"])
    # a failure is no answer
    assert prefixes.loc[failed, "correct"].isna().all() and prefixes.loc[~failed, "correct"].notna().all()
    assert (out / "failed_probes.csv").is_file() and first["failed_probes"]["policy"] == "exclude"
    # every trajectory has exactly the prefixes 0..N, and N and the token budgets agree with the utterance table
    assert set(prefixes["granularity"]) == {"utterance", "tokens:32"}
    for key, group in prefixes.groupby(["item_id", "template", "extractor", "granularity"]):
        n = group.n_utterances.iloc[0]
        assert sorted(group.prefix_index) == list(range(n + 1))
        tokens = utterances[utterances.item_id == key[0]].sort_values("utterance_index").tokens.cumsum().tolist()
        # the last chunk: the rest
        cuts = [0] + tokens if key[3] == "utterance" else [0] + list(range(32, tokens[-1], 32)) + [tokens[-1]]
        assert group.sort_values("prefix_index").prefix_tokens.tolist() == cuts
    # the probes both granularities share (the empty prefix, the whole trace) are one stored generation: the same forced answer
    shared = prefixes.pivot_table(
        index=["item_id", "template", "extractor", "prefix_tokens"],
        columns="granularity",
        values="forced_answer",
        aggfunc="first",
    ).dropna()
    assert len(shared) >= 2 * 4 and (shared["utterance"] == shared["tokens:32"]).all()
    if "answer_logprobs" in prefixes.columns:  # a list of token log-probabilities per probe that ran
        ran = prefixes[prefixes.probe_status != "error"]
        assert all(len(lp) > 0 and max(lp) <= 0 for lp in ran["answer_logprobs"])
    # the main tables: the first granularity alone
    assert "granularity" not in pd.read_csv(out / "strategies.csv").columns
    assert set(pd.read_csv(out / "strategies_by_granularity.csv")["granularity"]) == {"utterance", "tokens:32"}
    # KV reuse: prompt + trace once + suffixes
    assert first["probe_prefill_tokens"] == first["probe_prefill_lower_bound"]
    # issue 31: every headline number with its 95 % interval over questions, the paired comparisons, the small-n caption
    for name, metrics in INTERVALS.items():
        table = pd.read_csv(out / f"{name}.csv")
        assert {"n_units", *(f"{m}_{end}" for m in metrics for end in ("lo", "hi"))} <= set(table.columns), name
        bounded = table[metrics[0]].notna() & table[f"{metrics[0]}_lo"].notna()
        assert (table.loc[bounded, f"{metrics[0]}_lo"] <= table.loc[bounded, metrics[0]] + 1e-9).all(), name
    comparisons = pd.read_parquet(out / "comparisons.parquet")
    assert (
        "Optimal − Actual" in set(comparisons["comparison"]) and comparisons["pairing"].str.startswith("the same").all()
    )
    assert {"difference", "lo", "hi", "p_value", "n_units", "excludes_zero"} <= set(comparisons.columns)
    assert "fewer than 10 questions" in (out / "summary.md").read_text()  # the CPU slice has a handful of questions
    assert " [" in (out / "table1_results.md").read_text() and (out / "comparisons.md").is_file()


@pytest.mark.slow
@pytest.mark.xdist_group("slice")
def test_every_supported_figure_is_drawn(runs):
    out, first, _ = runs
    made, skipped = set(first["figures"]), first["skipped_figures"]
    assert ALWAYS_DRAWN <= made
    for name in (
        f"fig6_robustness_{MODEL}_champ",
        f"fig6_robustness_{MODEL}_mmlu-sample",
    ):  # 2 templates x 2 extractors
        # a pair of conditions has a correlation only over two shared items or more; with none, only the diagonal's
        # 1s would show, so the figure is not drawn and says why
        assert name in made or "no pair of conditions has a defined" in skipped.get(name, ""), (name, skipped)
    drawn_or_said = made | {name.removesuffix("_figure") for name in made} | set(skipped)
    assert drawn_or_said >= ALWAYS_DRAWN | NEED_MORE_DATA  # every other figure is drawn or says why not
    assert not made & set(skipped)
    for name in made:
        assert (out / "figures" / f"{name}.png").is_file() and (out / "figures" / f"{name}.pdf").is_file()
    for table in (
        "strategies.csv",
        "overthinking_by_format.csv",
        "stopping_at_k.csv",
        "transitions.csv",
        "summary.md",
        "table1_results.md",
        "table2_stopping.md",
        "trajectories.parquet",
        "generations.parquet",
    ):
        assert (out / table).is_file(), table
    assert (out / "tables" / "table3_results.md").is_file()  # the report section's copy (language-only: Table 3)


@pytest.mark.slow
@pytest.mark.xdist_group("slice")
def test_rerun_reuses_stored_generations(runs):
    _, first, second = runs
    prefixes = pd.read_parquet(runs[0] / "prefixes.parquet")
    one = prefixes[prefixes.extractor == "rules"]
    shared = int(one.duplicated(["item_id", "template", "prefix_tokens"]).sum())  # probed once for both granularities
    assert first["new_generations"] > 0 and first["probes_generated"] == first["probes"] - shared > 0
    assert second["new_generations"] == 0 and second["probes_generated"] == 0 and second["probe_prefill_tokens"] == 0
    assert second["stored_generations"] == first["stored_generations"]
    assert second["figures"] == first["figures"]


def parameter_check(params: dict):
    "What the notebook's first cell does with its parameters, in-process: the config, then the plan of its models' engines."
    model_plan(config_from(OverthinkingConfig, params, where="notebook parameters"))


@pytest.mark.parametrize(
    "params, message",
    [
        ({"templates": "please_stop"}, "'templates'"),
        ({"templates": ["please_stop"]}, "'please_stop' is not one of"),
        ({"benchmarks": ["champ", "ai2d"]}, "benchmarks ['ai2d'] show the model an image"),
        ({"benchmarks": ["champ", "ai2d"]}, "qwen2.5-vl-7b-instruct"),  # the error names the multimodal presets
        (
            {
                "preset": "qwen3-8b-overthinking",
                "judge": "qwen3-judge",
                "backend_options": {"gpu_memory_utilization": 0.6},
                "judge_options": {"gpu_memory_utilization": 0.5},
            },
            "add up to 1.10",
        ),  # two vLLM engines that cannot share one GPU
        (
            {"preset": "qwen3-8b-overthinking", "backend_options": {"gpu_mem": 0.5}},
            "unknown option(s) ['gpu_mem'] for the vllm backend",
        ),
        (
            {"judge": "qwen3-tiny-random", "judge_options": {"batch_sise": 2}},
            "unknown option(s) ['batch_sise'] for the transformers backend",
        ),
        (
            {
                "extractors": ["rules", "llm:qwen3-4b-extractor"],
                "judge": "qwen3-4b-extractor",
                "extractor_options": {"max_model_len": 4096},
                "judge_options": {"max_model_len": 8192},
            },
            "same weights",
        ),  # one engine, two contexts
        (
            {
                "preset": "qwen2.5-vl-7b-instruct",
                "benchmarks": ["ai2d"],
                "extractors": ["rules"],
                "judge": "qwen3-judge",
            },
            "judge 'qwen3-judge' is text-only",
        ),  # issue 30 point 5: the judge of an image question must see the figure
        ({"llm_extraction": "every"}, "'llm_extraction'"),
        ({"extractors": ["rules"], "llm_extraction": "all"}, 'llm_extraction="all" needs an "llm:<preset>" extractor'),
        ({"extractor_input": "question"}, "'extractor_input'"),
        ({"n_items": 0}, "'n_items' must be >= 1"),
    ],
)
def test_bad_parameters_and_models_are_refused_before_any_model_loads(tmp_path, params, message):
    "Values, benchmarks a text-only preset cannot see, engine options and budgets: refused by the parameter check, in-process."
    out = tmp_path / "run"
    with pytest.raises(ValueError) as refused:
        parameter_check({**SLICE, **params, "out_dir": str(out)})
    assert message in str(refused.value), str(refused.value)
    assert not out.exists()


# --- what the extractor and the judge are shown (issue 41, points 5 and 6): the study's stages, no model ---


def harmful_trace():
    "A multiple-choice trace that had B (Jupiter) after two utterances and ended with C, and its probe table."
    from reasoning_study.probing.trace import split_trace
    from reasoning_study.studies.overthinking.run import Trace
    from reasoning_study.tasks.qa import choice_item

    item = choice_item("mmlu-sample/7", "mmlu-sample", "Which planet is largest?", ["Mars", "Jupiter", "Venus"], "B")
    split = split_trace(
        "Jupiter is the largest.\nSo B.\nWait, Venus looks bigger.", encode=lambda s: [ord(c) for c in s]
    )
    trace = Trace(item, 0, completion=None, split=split, prompt_ids=[])
    rows = [
        dict(
            model=MODEL,
            benchmark="mmlu-sample",
            item_id=item.id,
            format="mc",
            seed=0,
            sample_index=0,
            template="stop_now",
            extractor="rules",
            prefix_index=i,
            n_utterances=len(split),
            prefix_tokens=split.prefix_tokens(i),
            trace_tokens=len(split.token_ids),
            prediction=prediction,
            extraction_method="rules",
            correct=prediction == "B",
            probe_status="answered",
            forced_answer=f"Final answer: \\boxed{{{prediction}}}",
            finish_reason="stop",
            cached_prompt_tokens=0,
            granularity="utterance",
        )
        for i, prediction in enumerate(["A", "B", "B", "C"])
    ]
    return trace, pd.DataFrame(rows, columns=list(PREFIX_COLUMNS)).astype({"correct": "boolean"})


def test_the_judge_reads_the_ground_truth_when_asked():
    "Point 6: with judge_ground_truth a multiple-choice case's request lists every option, the gold letter and text."
    from reasoning_study.probing.judge import as_cases, judge_request
    from reasoning_study.studies.overthinking.run import judge_cases

    trace, prefixes = harmful_trace()
    told = judge_cases(OverthinkingConfig(extractors=["rules"], judge_ground_truth=True), prefixes, [trace])
    bare = judge_cases(OverthinkingConfig(extractors=["rules"]), prefixes, [trace])  # the CPU default
    assert len(told) == len(bare) == 1
    assert (told[0]["format"], told[0]["options"], told[0]["gold_letter"]) == ("mc", ["Mars", "Jupiter", "Venus"], "B")
    assert not {"format", "options", "gold_letter"} & set(bare[0])
    user = judge_request(as_cases(told)[0]).messages[-1]["content"]
    assert "A. Mars\nB. Jupiter\nC. Venus" in user and "Correct answer: B. Jupiter" in user
    assert "Benchmark: mmlu-sample" in user and "Format: multiple choice" in user
    assert (told[0]["final_answer"], told[0]["gold"]) == ("C", "Jupiter")
    assert "Ground truth" not in judge_request(as_cases(bare)[0]).messages[-1]["content"]


class RecordingExtractor:
    "A stand-in LLM extractor that answers B and keeps every request (pure logic, no model)."

    name, model_id, revision = "recording", "recording-extractor", "v1"

    def __init__(self):
        self.requests = []

    def generate(self, requests):
        self.requests += requests
        return [[make_completion("B", "stop")] for _ in requests]


@pytest.mark.parametrize("extractor_input, shows_question", [("trace", False), ("question_and_trace", True)])
def test_the_extraction_stage_passes_the_extractor_input_on(tmp_path, extractor_input, shows_question):
    "Point 5: what extract_all sends the LLM extractor follows `extractor_input`, for the probes and the traces alike."
    from types import SimpleNamespace

    from reasoning_study.store import GenerationStore
    from reasoning_study.studies.overthinking.run import Probed, TraceRun, extract_all

    trace, _ = harmful_trace()
    trace.completion = make_completion("I think it is the big one.", "stop")
    config = OverthinkingConfig(
        extractors=["llm:smollm2-135m"], llm_extraction="all", extractor_input=extractor_input, judge=None
    )
    probed = [Probed(trace, "stop_now", SimpleNamespace(), [make_completion("B}", "stop")] * 2)]
    extractor = RecordingExtractor()
    with GenerationStore(tmp_path / "g.sqlite") as store:
        out = extract_all(
            config, {"extractor:smollm2-135m": extractor}, store, TraceRun([trace], None, None, False), probed
        )
    assert [e.answer for e in out["llm:smollm2-135m"][0]] == ["B", "B"]
    assert extractor.requests and all(
        ("Which planet is largest?" in r.messages[-1]["content"]) is shows_question for r in extractor.requests
    )


@pytest.mark.slow
def test_a_bad_combination_of_models_stops_the_notebook_before_any_model_loads(tmp_path):
    "In the notebook: a judge that cannot load beside the model fails in the parameter cell, before the traces, not after."
    out = tmp_path / "run"
    done = papermill(
        out,
        "bad.ipynb",
        {
            **SLICE,
            "preset": "qwen3-8b-overthinking",
            "judge": "qwen3-judge",
            "out_dir": str(out),
            "backend_options": {"gpu_memory_utilization": 0.6},
            "judge_options": {"gpu_memory_utilization": 0.5},
        },
    )
    assert done.returncode != 0 and "add up to 1.10" in done.stdout + done.stderr, (done.stdout + done.stderr)[-2000:]
    assert not out.exists()  # the run folder comes after the checks
    executed = json.loads((tmp_path / "bad.ipynb").read_text())["cells"]
    ran = [c for c in executed if c["cell_type"] == "code" and c.get("execution_count")]
    assert "model_plan" in "".join(ran[-1]["source"])  # it stopped in the config checks


@pytest.mark.slow
@pytest.mark.xdist_group("slice")
def test_musobench_recall_trajectories_come_from_the_library(runs):
    out, first, _ = runs
    prefixes = pd.read_parquet(out / "musobench_prefixes.parquet")
    recall = pd.read_csv(out / "musobench_recall_trajectories.csv")
    assert set(prefixes["task"]) == set(recall["task"]) == {"subsetsum", "timetabling"}
    assert {"first_complete_index", "best_recall", "final_recall", "solutions_found", "solutions_lost"} <= set(
        recall.columns
    )
    for key, group in prefixes.groupby(["task", "question_id"]):
        assert sorted(group.prefix_index) == list(range(group.n_utterances.iloc[0] + 1))
        row = recall[(recall.task == key[0]) & (recall.question_id == key[1])].iloc[0]
        assert (
            row["best_recall"] == group.recall.max()
            and row["final_recall"] == group.sort_values("prefix_index").recall.iloc[-1]
        )
    assert "musobench_recall_trajectories" in first["figures"]


def test_parameters_cell_is_the_config():
    "The notebook's parameters cell is the config's defaults and docs, line for line (one declaration)."
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    tagged = [c for c in cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(tagged) == 1 and "".join(tagged[0]["source"]) == parameters_source(OverthinkingConfig)


@pytest.mark.slow
@pytest.mark.xdist_group("slice")
def test_rescore_reproduces_the_stored_tables(runs):
    "The raw tables and run.json of the folder alone give every stored results table again, exactly."
    out, first, _ = runs
    record = json.loads((out / "run.json").read_text())
    assert (
        record["study"] == "overthinking"
        and record["config"]["n_items"] == SLICE["n_items"]
        and "model" in record["backends"]
    )
    results = rescore(out)
    assert {
        "strategies",
        "stopping_at_k",
        "failed_probes",
        "musobench_recall_trajectories",
        "strategies_by_granularity",
    } <= set(results)
    for name, table in results.items():
        if name in RESULT_FILES:
            pd.testing.assert_frame_equal(table, pd.read_parquet(out / RESULT_FILES[name]))
        else:
            assert table.to_csv(index=False) == (out / f"{name}.csv").read_text(), name  # the intervals too


@pytest.mark.slow
def test_failed_probes_are_a_status_not_a_wrong_answer(tmp_path):
    "A context too small for the probes of the multiple-choice trace: they fail, and its trajectory leaves every table, counted."
    out = tmp_path / "run"
    done = papermill(
        out,
        "small_context.ipynb",
        {
            **SLICE,
            "out_dir": str(out),
            "backend_options": {"max_model_len": 250},
            "extractors": ["rules"],
            "templates": ["stop_now"],
            "judge": None,
            "musobench_tasks": [],
        },
    )  # mmlu-sample's prompt has 227 tokens, champ's 83
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    prefixes = pd.read_parquet(out / "prefixes.parquet")
    failed = prefixes["probe_status"] == "error"
    assert (
        failed.any() and prefixes.loc[failed, "correct"].isna().all() and prefixes.loc[~failed, "correct"].notna().all()
    )
    counts = pd.read_csv(out / "failed_probes.csv").set_index("benchmark")
    assert counts.loc["mmlu-sample", "n_excluded"] == counts.loc["mmlu-sample", "n_trajectories"] == 1
    assert counts.loc["champ", "n_with_failed_probes"] == 0
    # the failed trace is in no table
    assert set(pd.read_parquet(out / "trajectories.parquet")["benchmark"]) == {"champ"}
    strategies = pd.read_csv(out / "strategies.csv")
    assert set(strategies.loc[strategies.strategy.isin(["No-CoT", "Actual", "Optimal"]), "benchmark"]) == {"champ"}
    stats = json.loads((out / "run_stats.json").read_text())
    assert stats["failed_probes"] == {
        "policy": "exclude",
        "n_trajectories": 2,
        "n_with_failed_probes": 1,
        "n_failed_probes": int(failed.sum()),
        "n_excluded": 1,
        "n_cut": 0,
    }
    assert ALWAYS_DRAWN <= set(stats["figures"])

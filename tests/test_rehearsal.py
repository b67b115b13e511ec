"""`rs-sweep GRID --rehearse` on one cell of each distinct path of the two paper grids (in `make test-vllm`).

The cells are the grids' own (`nbs/sweeps/*.yaml`), rehearsed by `sweep.rehearsal.rehearse`: vLLM text with
thinking on and off (the hybrid Qwen3-8B pair of MuSoBench), the DeepSeek-shaped API pair (the reasoning in its
own field, prefix mode) and the o-series-shaped cell (no reasoning returned, `max_completion_tokens`) against
vLLM servers on 127.0.0.1 through the real `openai` client, the overthinking study's engine trio on a multimodal cell
(the Qwen2.5-VL model, the text extractor and the Qwen3-VL judge: co-resident vLLM engines in one kernel, planned
together) with one record of each image benchmark's schema, and one cell that is not the grid's: NoveltyBench with a
hosted judge, a role that no parameter name announces, which gets its stand-in server all the same. Each rehearsal is
one sweep of real papermill runs; the report compiles over its run folders.

The multimodal cell is the acceptance of the multimodal half (issue 44): each image reaches the model (the vision
tokens vLLM put in each trace's and probe's prompt ids are those the stand-in's own processor makes of that figure),
the extractor reads text only, and the judge, which the cell loads only for a harmful trajectory (a random stand-in is
never right, so never harmful), is run by the study's own judge stage on the cell's traces with their figures.
Skipped without vLLM; `make test-vllm` runs it with the CPU build (about six minutes on two cores)."""

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
from conftest import need_vllm

from reasoning_study.sweep.rehearsal import PRESETS_FILE, REHEARSAL_FILE, rehearse
from reasoning_study.sweep.spec import experiment_cells, load_sweep

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.xdist_group("rehearsal")  # one rehearsal at a time: each holds vLLM engines

# the DeepSeek pair runs as two cells (each model its own budget: issue 30, point 2)
MUSOBENCH = [
    "qwen3-8b__tasks=subsetsum",
    "api__deepseek-r1__tasks=subsetsum",
    "api__deepseek-v3__tasks=subsetsum",
    "api__o4-mini__tasks=subsetsum",
]
MULTIMODAL = "multimodal__instruct"  # the Instruct baseline: Qwen2.5-VL, the family of five of the seven models
IMAGE_BENCHMARKS = {"mathvista", "mathvision", "mathverse", "mmstar", "ai2d", "vmcbench"}
NOVELTY = "novelty-judge"  # NoveltyBench on deepseek-v3, judged by gpt-4o-mini: both hosted, both stood in for


def with_a_hosted_judge(sweep):
    "The grid and one NoveltyBench cell whose judge is a hosted model (`novelty_judge`: a role of the study's own)."
    cells, problems = experiment_cells(
        {
            "notebook": "musobench",
            "label": NOVELTY,
            "parameters": {
                "tasks": ["noveltybench"],
                "paradigms": ["short"],
                "short_preset": "deepseek-v3",
                "long_preset": "deepseek-r1",
                "novelty_judge": "gpt-4o-mini",
                "novelty_rater": "constant",
                "novelty_prompts": 1,
                "novelty_k": 2,
                "novelty_mode": "independent",
                "max_tokens": 32,
                "reply_openings": [],
                "reflection_ks": [],
                "exploration": False,
            },
        },
        0,
    )
    assert not problems, problems
    return replace(sweep, cells=sweep.cells + cells)


@pytest.fixture(scope="module")
def musobench(tmp_path_factory):
    need_vllm()
    out = tmp_path_factory.mktemp("rehearsal")
    grid = with_a_hosted_judge(load_sweep("nbs/sweeps/musobench.yaml"))
    table = rehearse(grid, out, only=[*MUSOBENCH, NOVELTY], progress=False)
    return table.set_index("cell"), out / "musobench-paper"


@pytest.fixture(scope="module")
def overthinking(tmp_path_factory):
    need_vllm()
    out = tmp_path_factory.mktemp("rehearsal")
    table = rehearse(load_sweep("nbs/sweeps/overthinking.yaml"), out, only=[MULTIMODAL], progress=False)
    return table.set_index("cell"), out / "overthinking-paper"


def turns(folder):
    return pd.read_parquet(folder / "turns.parquet")


def test_every_musobench_path_runs(musobench):
    table, _ = musobench
    assert table.loc[MUSOBENCH, "status"].tolist() == ["ran"] * 4, table[["status", "stage", "error"]]


def test_the_hybrid_runs_thinking_off_and_on_through_every_turn_of_short_cot(musobench):
    table, folder = musobench
    run = json.loads((folder / MUSOBENCH[0] / "run.json").read_text())
    assert {r["backend"] for r in run["backends"].values()} == {"vllm"}
    assert all(r["revision"].startswith("stand-in:qwen3-tiny-ending-") for r in run["backends"].values())
    t = turns(folder / MUSOBENCH[0])
    assert set(t["paradigm"]) == {"short", "long"}
    assert set(t.loc[t.paradigm == "long", "condition"]) >= {"base", "sc_sample", "reflection_k0", "reflection_k16"}
    assert set(t.loc[t.paradigm == "short", "turn"]) == {1, 2, 3}  # the stand-in ends its replies: turns 2 and 3
    assert table.loc[MUSOBENCH[0], "plan H200"] == "short+long 0.9"  # one engine for both paradigms


def test_the_deepseek_cells_get_the_reasoning_in_its_own_field(musobench):
    table, folder = musobench
    long, short = turns(folder / MUSOBENCH[1]), turns(folder / MUSOBENCH[2])
    assert set(long["paradigm"]) == {"long"} and set(short["paradigm"]) == {"short"}
    assert (long["reasoning"].fillna("").str.len() > 0).all()  # the server's reasoning parser filled the field
    assert (short["reasoning"].fillna("") == "").all() and set(short["turn"]) == {1, 2, 3}
    # the provider's rules, applied before sending: deepseek-reasoner gets no temperature, deepseek-chat does
    assert 'long: {"max_tokens": 48}' in table.loc[MUSOBENCH[1], "requests"]
    assert '"temperature": 0.2' in table.loc[MUSOBENCH[2], "requests"]
    record = json.loads((folder / MUSOBENCH[1] / "sweep_cell.json").read_text())
    assert record["parameters"]["backend_options"] == {"prefill_mode": "prefix"}  # the real base_url is dropped


def test_the_o_series_cell_returns_no_reasoning_and_sends_max_completion_tokens(musobench):
    table, folder = musobench
    t = turns(folder / MUSOBENCH[3])
    assert set(t["paradigm"]) == {"long"} and (t["reasoning"].fillna("") == "").all()
    requests = table.loc[MUSOBENCH[3], "requests"]
    assert '"max_completion_tokens": 48' in requests and "temperature" not in requests and "top_p" not in requests


def test_the_rehearsal_writes_its_record_and_the_presets_it_ran(musobench):
    _, folder = musobench
    text = (folder / REHEARSAL_FILE).read_text()
    assert "5 ran" in text and "## Stand-ins" in text and "reasoning field" in text
    presets = json.loads((folder / PRESETS_FILE).read_text())
    assert set(presets) == {"qwen3-8b", "deepseek-r1", "deepseek-v3", "o4-mini", "gpt-4o-mini"}
    assert presets["deepseek-r1"]["options"]["base_url"].startswith("http://127.0.0.1:")


def test_the_overthinking_trio_runs_on_a_multimodal_cell(overthinking):
    table, folder = overthinking
    assert table.loc[MULTIMODAL, "status"] == "ran", table[["status", "stage", "error"]]
    run = json.loads((folder / MULTIMODAL / "run.json").read_text())
    # the model and the extractor ran on vLLM; the judge loads only for a harmful trace (a stand-in is never right)
    assert {"model", "extractor:qwen3-4b-extractor"} <= set(run["backends"])
    assert {r["backend"] for r in run["backends"].values()} == {"vllm"}
    assert run["backends"]["model"]["revision"].startswith("stand-in:qwen2.5-vl-tiny-ending-")
    assert "judge" in table.loc[MULTIMODAL, "plan H200"]  # planned with the judge all the same
    assert table.loc[MULTIMODAL, "plan H100 80GB"].startswith("does not fit")
    assert "not rehearsed" not in (folder / REHEARSAL_FILE).read_text()


# the study's judge stage on the multimodal cell's traces, in a process with the torchvision overlay (vLLM's Qwen3-VL
# model file imports torchvision), the rehearsal's presets (its stand-ins) and the engine in that process
JUDGE = r"""
import json, sys
from dataclasses import fields
from pathlib import Path

if __name__ == "__main__":
    import pandas as pd
    from transformers import AutoImageProcessor

    from reasoning_study.backends.presets import get_preset
    from reasoning_study.config import config_from
    from reasoning_study.store import GenerationStore
    from reasoning_study.studies.overthinking.config import OverthinkingConfig
    from reasoning_study.studies.overthinking.run import ground_truth_fields, judge_harmful, load_backends, load_items

    run, store = Path(sys.argv[1]), Path(sys.argv[2])
    recorded = json.loads((run / "params.json").read_text())  # the config's values and what the run planned
    config = config_from(OverthinkingConfig, {f.name: recorded[f.name] for f in fields(OverthinkingConfig)})
    items = {item.id: item for item in load_items(config)}

    def vision_tokens(preset):  # what the stand-in's own image processor makes of each figure
        processor = AutoImageProcessor.from_pretrained(dict(get_preset(preset).options)["model_dir"])
        grids = {i: processor(images=[item.image])["image_grid_thw"][0] for i, item in items.items()}
        return {i: int(g.prod()) // processor.merge_size**2 for i, g in grids.items()}

    written = pd.read_parquet(run / "generations.parquet").set_index("tag")["text"]
    cases = [
        dict(
            case_id=f"{config.preset}/{i}/0", model=config.preset, benchmark=item.benchmark, question=item.question,
            gold=item.answer, final_answer="?", correct_prefix="", final_trace=written[f"trace:{i}"],
            image=item.image, **ground_truth_fields(item),
        )
        for i, item in items.items()
    ]
    with GenerationStore(store) as kept:
        verdicts = judge_harmful(config, load_backends(config), kept, cases)
        judged = kept.to_pandas()
    print("RESULT " + json.dumps(dict(
        model=vision_tokens(config.preset), judge=vision_tokens(config.judge),
        verdicts=verdicts.to_dict("records") if not isinstance(verdicts, str) else verdicts,
        judged=judged[["tag", "model_id", "image_tokens", "status"]].astype(object).where(judged.notna(), None)
        .to_dict("records"),
    ), default=str), flush=True)
"""


@pytest.fixture(scope="module")
def judged(overthinking, tmp_path_factory):
    from reasoning_study.backends.presets import PRESETS_FILE_ENV
    from reasoning_study.backends.weights import vl_environment
    from reasoning_study.sweep.rehearsal import PRESETS_FILE as PRESETS

    _, folder = overthinking
    work = tmp_path_factory.mktemp("judge")
    (work / "judge.py").write_text(JUDGE)
    env = (
        os.environ
        | vl_environment()
        | {
            PRESETS_FILE_ENV: str(folder / PRESETS),
            "VLLM_ENABLE_V1_MULTIPROCESSING": "0",  # the engine core in that process: no second process to start
            "VLLM_CPU_KVCACHE_SPACE": "1",
        }
    )
    done = subprocess.run(
        [sys.executable, str(work / "judge.py"), str(folder / MULTIMODAL), str(work / "judge.sqlite")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    [line] = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
    return json.loads(line.removeprefix("RESULT "))


def test_each_image_benchmark_reaches_the_model_through_its_processor(overthinking, judged):
    "Every trace and probe of the cell carries its figure's vision tokens in vLLM's prompt ids; the extractor none."
    _, folder = overthinking
    traces = pd.read_parquet(folder / MULTIMODAL / "traces.parquet")
    assert set(traces.benchmark) == IMAGE_BENCHMARKS and (traces.trace_status != "error").all()
    prefixes = pd.read_parquet(folder / MULTIMODAL / "prefixes.parquet")
    assert set(prefixes.benchmark) == IMAGE_BENCHMARKS  # every trace probed and its probes extracted
    assert prefixes.probe_status.notna().all() and (prefixes.extraction_method == "llm").all()
    rows = pd.read_parquet(folder / MULTIMODAL / "generations.parquet")
    rows["item"] = rows.tag.str.split(":").str[1]
    model = rows[rows.model_id == "Qwen/Qwen2.5-VL-7B-Instruct"]
    assert set(model.tag.str.split(":").str[0]) == {"trace", "probe"}
    expected = model.item.map(judged["model"])
    assert (expected > 0).all() and (model.image_tokens == expected).all(), model[["tag", "image_tokens"]]
    extractor = rows[rows.model_id == "Qwen/Qwen3-4B-Instruct-2507"]  # reads the text only (extractor_input: trace)
    assert len(extractor) and extractor.image_tokens.isna().all()


def test_the_judge_sees_each_figure(judged):
    "The study's judge stage on the cell's six traces: the Qwen3-VL stand-in got each figure, each reply recorded."
    judge = [r for r in judged["judged"] if r["tag"].startswith("judge:")]
    assert len(judge) == 6 and {r["model_id"] for r in judge} == {"Qwen/Qwen3-VL-30B-A3B-Instruct"}
    for r in judge:
        item = r["tag"].split("/", 1)[1].rsplit("/", 1)[0]
        assert r["image_tokens"] == judged["judge"][item] > 0, r
    verdicts = pd.DataFrame(judged["verdicts"])
    assert len(verdicts) == 6 and verdicts.status.notna().all()  # a random judge's reply: a recorded status


def test_the_report_compiles_over_the_rehearsal(musobench):
    from reasoning_study.cli import compile_report

    _, folder = musobench
    assert compile_report(folder, progress=False).is_file()


def test_a_hosted_novelty_judge_is_a_role_with_its_stand_in(musobench):
    "NoveltyBench's judge on gpt-4o-mini: listed, its request after OpenAI's rules, answered by its stand-in server."
    table, folder = musobench
    assert table.loc[NOVELTY, "status"] == "ran", table.loc[NOVELTY, ["stage", "error"]]
    assert "novelty_judge: gpt-4o-mini (openai)" in table.loc[NOVELTY, "presets"]
    judge = table.loc[NOVELTY, "requests"].split("novelty_judge: ")[1]  # as OpenAI takes it: max_completion_tokens
    assert judge.startswith('{"temperature": 0.0') and '"max_completion_tokens": 8' in judge, judge
    run = json.loads((folder / NOVELTY / "run.json").read_text())
    assert run["backends"]["novelty_judge"]["backend"] == "openai"
    assert run["backends"]["novelty_judge"]["model"] == "gpt-4o-mini-2024-07-18"  # the stand-in serves the API name
    judgements = pd.read_parquet(folder / NOVELTY / "novelty_judgements.parquet")
    assert len(judgements) == 1 and judgements["judge"].str.startswith("llm:").all()

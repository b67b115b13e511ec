"""Every figure function the report draws, built on small synthetic tables, reads cleanly: no two texts overlap
(titles, legends, notes, tick labels: `figures.core.text_overlaps`), no text prints nan/None, and the small-data
note stamped under it covers nothing."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from test_figures_overthinking import judge_table

from reasoning_study.figures import attention as fa
from reasoning_study.figures import musobench as fm
from reasoning_study.figures import overthinking as fo
from reasoning_study.figures.core import add_notes, figure_note, figure_problems, plot_table
from reasoning_study.figures.stopping import plot_policy_pareto
from reasoning_study.metrics import attention as ma
from reasoning_study.metrics import musobench as mm
from reasoning_study.metrics import overthinking as mo
from reasoning_study.metrics.stopping import default_policies, policy_table


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


@pytest.fixture(scope="module")
def muso():
    results = mm.synthetic_results(n_questions=10, seed=4)
    base = results[(results["condition"] == "base") & (results["temperature"] == 0.2)].assign(family="Toy")
    return results, base


@pytest.fixture(scope="module")
def over():
    synth = mo.synthetic_tables(
        n_items=12, models=("model-a", "model-b"), seeds=(0, 1), templates=("stop_now", "time_up")
    )
    traj = mo.trajectories(synth["prefixes"])
    one = traj[(traj.seed == 0) & (traj.template == "stop_now")]
    prefixes = synth["prefixes"].query("seed == 0 and template == 'stop_now'")
    strategies = mo.strategy_table(one)
    return dict(synth=synth, traj=traj, one=one, prefixes=prefixes, strategies=strategies)


def musobench_figures(muso):
    results, base = muso
    at = results[results["temperature"] == 0.2]
    long_runs = results[(results["paradigm"] == "long") & ~results["condition"].str.startswith("sc_")]
    sweep = results[(results["paradigm"] == "short") & (results["condition"] == "base")]
    by = ["model", "paradigm", "task"]
    return {
        "solution_counts": lambda: fm.plot_solution_counts(
            results.drop_duplicates(["task", "question_id"])[["task", "level", "answer_count"]]
        ),
        "recall_confidence": lambda: fm.plot_recall_confidence(base, task="timetabling"),
        "recall_confidence_family": lambda: fm.plot_recall_confidence(base, panel="family", task="subsetsum"),
        "calibration": lambda: fm.plot_calibration(
            mm.reliability_bins(base, by), mm.summary_table(base, by), task="timetabling"
        ),
        "movement": lambda: fm.plot_movement(
            mm.movement_pairs(base, family={"toy-instruct": "Toy", "toy-thinker": "Toy"}), task="timetabling"
        ),
        "factors": lambda: fm.plot_factors(
            lengths=mm.length_bins(long_runs, by=["paradigm", "task"]),
            length_fit=mm.length_confidence(long_runs, by=["paradigm", "task"]),
            levels=mm.by_level(base, by=["paradigm", "task"]),
            temperatures=mm.temperature_sweep(sweep, by=["paradigm", "task"]),
            task="subsetsum",
        ),
        "mitigations": lambda: fm.plot_mitigations(
            reflections=mm.reflection_sweep(at, by=["paradigm", "task"]),
            exploration=mm.mitigation_table(at[at["paradigm"] == "short"], by=["paradigm", "condition", "task"]),
            self_consistency=mm.reliability_bins(
                at[(at["paradigm"] == "long") & at["condition"].isin(["base", "sc_median", "sc_voting"])],
                by=["paradigm", "condition", "task"],
            ),
            task="subsetsum",
        ),
        "exploration_calibration": lambda: fm.plot_exploration_calibration(
            mm.reliability_bins(at[at["paradigm"] == "short"], by=["paradigm", "condition", "task"])
        ),
        "table1": lambda: plot_table(
            fm.table_reconsideration(mm.reconsideration_rates(base, by=by)), title="Table 1", decimals=2
        ),
    }


def overthinking_figures(s):
    synth, traj, one, prefixes = s["synth"], s["traj"], s["one"], s["prefixes"]
    judge = judge_table()  # the figure tests' judged cases
    table1, table4 = fo.results_table(s["strategies"]), fo.taxonomy_results_table(judge)
    stop_now = traj[traj.template == "stop_now"]
    return {
        "fig1_strategies": lambda: fo.plot_strategy_accuracy(s["strategies"]),
        "fig2_lengths": lambda: fo.plot_length_histograms(mo.length_distribution(one)),
        "fig3_formats": lambda: fo.plot_format_breakdown(
            mo.overthinking_table(one.query("model == 'model-a'"), by=["model", "format"])
        ),
        "fig4_stability": lambda: fo.plot_stability_curve(mo.stability_curve(prefixes.query("model == 'model-a'"))),
        "fig6_robustness": lambda: fo.plot_robustness(
            mo.robustness(traj).query("model == 'model-a' and benchmark == 'mc-bench'")
        ),
        "fig7_cross_model": lambda: fo.plot_cross_model(mo.cross_model_spearman(traj)),
        "fig8_scaling": lambda: fo.plot_test_time_scaling(
            mo.optimal_vs_test_time_scaling(stop_now, traces=synth["traces"].query("template == 'stop_now'"))
        ),
        "fig9_transitions": lambda: fo.plot_transition_matrix(mo.transition_matrix(prefixes)),
        "fig10_tokens": lambda: fo.plot_token_statistics(
            synth["utterances"], mo.length_distribution(one, unit="tokens")
        ),
        "fig11_wasted": lambda: fo.plot_wasted_budget(mo.wasted_budget_table(one)),
        "table1": lambda: plot_table(table1, fo.best_strategy_mask(table1), "Accuracy, length and H per strategy"),
        "table2": lambda: plot_table(
            fo.stopping_table(
                mo.stopping_at_k(prefixes.query("model == 'model-a' and benchmark == 'mc-bench'")),
                mo.strategy_table(one, by=["model"]),
            ),
            title="Stopping@K",
        ),
        "table4": lambda: plot_table(
            table4, fo.largest_in_group_mask(table4), "Failure modes of harmful overthinking (%)"
        ),
        "trace_strips": lambda: fo.plot_trace_strips(
            prefixes.query("model == 'model-a' and benchmark == 'mixed-bench'")
        ),
        "pareto": lambda: plot_policy_pareto(policy_table(prefixes, default_policies())),
        "recall_trajectories": lambda: fo.plot_recall_trajectories(
            pd.DataFrame(
                {
                    "task": "subsetsum",
                    "question_id": np.repeat([0, 1, 2], 4),
                    "prefix_index": np.tile(range(4), 3),
                    "recall": np.linspace(0, 1, 12),
                    "answer_count": 3,
                }
            )
        ),
    }


def attention_figures():
    entropies = ma.synthetic_entropies(layers=tuple(range(8)), question_ids=(0, 1))
    relative = ma.relative_position_curves(entropies, bins=5)
    absolute = ma.absolute_step_curves(entropies, step_width=2)
    summary = ma.layer_phase_summary(entropies)
    return {
        "fig7_layers": lambda: fa.plot_entropy_layers(relative, absolute),
        "fig14_heatmap": lambda: fa.plot_entropy_heatmap(relative, ma.paradigm_difference(relative)),
        "fig14_grid": lambda: fa.plot_entropy_layer_grid(relative),
        "by_depth": lambda: fa.plot_entropy_by_depth(summary),
    }


def problems(build) -> list[str]:
    "The figure's problems with the small-data note stamped under it, as the report saves it."
    fig = build()
    with figure_note("small data: n = 2 per condition at least once (< 5); illustrative only"):
        [note] = add_notes(fig)
    assert note.get_text().startswith("small data")
    return figure_problems(fig)


def test_musobench_figures_read_cleanly(muso):
    found = {name: p for name, build in musobench_figures(muso).items() if (p := problems(build))}
    assert found == {}


def test_overthinking_figures_read_cleanly(over):
    found = {name: p for name, build in overthinking_figures(over).items() if (p := problems(build))}
    assert found == {}


def test_attention_figures_read_cleanly():
    found = {name: p for name, build in attention_figures().items() if (p := problems(build))}
    assert found == {}

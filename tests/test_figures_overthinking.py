"""Every figure and table of `figures.overthinking` renders from the metric tables of a realistic
synthetic study, saves as PNG, and refuses inputs it would silently misdraw."""

import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd
import pytest

from reasoning_study.figures.core import save_figure
from reasoning_study.figures.overthinking import (
    best_strategy_mask,
    largest_in_group_mask,
    plot_cross_model,
    plot_format_breakdown,
    plot_length_histograms,
    plot_robustness,
    plot_stability_curve,
    plot_strategy_accuracy,
    plot_table,
    plot_test_time_scaling,
    plot_token_statistics,
    plot_trace_strips,
    plot_transition_matrix,
    plot_wasted_budget,
    results_table,
    stopping_table,
    table_markdown,
    taxonomy_results_table,
    trace_strips,
)
from reasoning_study.metrics.overthinking import (
    cross_model_spearman,
    length_distribution,
    optimal_vs_test_time_scaling,
    overthinking_table,
    robustness,
    stability_curve,
    stopping_at_k,
    strategy_table,
    synthetic_tables,
    trajectories,
    transition_matrix,
    wasted_budget_table,
)

MODELS = ("model-a", "model-b", "model-c")


@pytest.fixture(scope="module")
def study():
    synth = synthetic_tables(n_items=25, models=MODELS, seeds=(0, 1), templates=("stop_now", "time_up"))
    traj = trajectories(synth["prefixes"])
    one = traj[(traj.seed == 0) & (traj.template == "stop_now")]
    prefixes = synth["prefixes"].query("seed == 0 and template == 'stop_now'")
    strategies = strategy_table(one, instruct=synth["instruct"], instruct_of={m: f"{m}-instruct" for m in MODELS})
    return dict(synth=synth, traj=traj, one=one, prefixes=prefixes, strategies=strategies)


def judge_table() -> pd.DataFrame:
    "Judged cases per model and benchmark, as `probing.judge.taxonomy_table` writes them."
    return pd.DataFrame(
        {
            "model": ["model-a", "model-b"],
            "benchmark": "mc-bench",
            "n_cases": [6, 3],
            "n_valid": [6, 2],
            "n_parse_error": [0, 1],
            "n_error": 0,
            "visual": [50.0, 50.0],
            "calculation": [100 / 6, 0.0],
            "logical": [100 / 3, 50.0],
        }
    )


def figures(s):
    "Every figure of the paper that this module draws, from the study's metric tables."
    synth, traj, one, prefixes = s["synth"], s["traj"], s["one"], s["prefixes"]
    judge = judge_table()
    table1, table4 = results_table(s["strategies"]), taxonomy_results_table(judge)
    stop_now = traj[traj.template == "stop_now"]
    return {
        "fig1_strategies": lambda: plot_strategy_accuracy(s["strategies"]),
        "fig2_lengths": lambda: plot_length_histograms(length_distribution(one), row="model"),
        "fig3_formats": lambda: plot_format_breakdown(overthinking_table(one, by=["format"])),
        "fig4_stability": lambda: plot_stability_curve(stability_curve(prefixes)),
        "fig6_robustness": lambda: plot_robustness(
            robustness(traj).query("model == 'model-a' and benchmark == 'mc-bench'")
        ),
        "fig7_cross_model": lambda: plot_cross_model(cross_model_spearman(traj)),
        "fig8_scaling": lambda: plot_test_time_scaling(
            optimal_vs_test_time_scaling(stop_now, traces=synth["traces"].query("template == 'stop_now'"))
        ),
        "fig9_transitions": lambda: plot_transition_matrix(transition_matrix(prefixes)),
        "fig10_tokens": lambda: plot_token_statistics(synth["utterances"], length_distribution(one, unit="tokens")),
        "fig11_wasted": lambda: plot_wasted_budget(wasted_budget_table(one)),
        "fig12_lengths_by_benchmark": lambda: plot_length_histograms(length_distribution(one)),
        "fig13_formats_by_model": lambda: plot_format_breakdown(
            overthinking_table(one, by=["model", "format"]), col="model"
        ),
        "table1": lambda: plot_table(table1, best_strategy_mask(table1), "Table 1"),
        "table2": lambda: plot_table(
            stopping_table(stopping_at_k(prefixes), strategy_table(one, by=["model"])), title="Table 2"
        ),
        "table4": lambda: plot_table(table4, largest_in_group_mask(table4), "Table 4"),
        "trace_strips": lambda: plot_trace_strips(prefixes.query("model == 'model-a' and benchmark == 'mixed-bench'")),
    }


NAMES = [
    "fig1_strategies",
    "fig2_lengths",
    "fig3_formats",
    "fig4_stability",
    "fig6_robustness",
    "fig7_cross_model",
    "fig8_scaling",
    "fig9_transitions",
    "fig10_tokens",
    "fig11_wasted",
    "fig12_lengths_by_benchmark",
    "fig13_formats_by_model",
    "table1",
    "table2",
    "table4",
    "trace_strips",
]


@pytest.mark.parametrize("name", NAMES)
def test_figure_renders_and_saves_png(study, name, tmp_path):
    fig = figures(study)[name]()
    try:
        assert isinstance(fig, plt.Figure) and fig.axes
        paths = save_figure(fig, tmp_path / name, formats=("png",))
        assert paths[0].stat().st_size > 5_000  # a real image, not an empty canvas
    finally:
        plt.close(fig)


def test_every_listed_figure_is_covered(study):
    assert sorted(figures(study)) == sorted(NAMES)


def test_results_table_layout_and_bold(study):
    table = results_table(study["strategies"])
    assert table.shape == (3 * 3, 2 * 3)
    assert list(table.index.get_level_values(1)[:3]) == ["No-CoT", "Actual", "Optimal"]
    mask = best_strategy_mask(table)
    assert not mask.xs("No-CoT", level=1).to_numpy().any()  # No-CoT is never bolded
    assert mask.xs("Optimal", level=1).loc[:, (slice(None), "acc ↑")].to_numpy().all()  # Optimal >= Actual always
    md = table_markdown(table, mask)
    assert "**" in md and "mc-bench / acc ↑" in md


def test_stopping_table_rows(study):
    table = stopping_table(stopping_at_k(study["prefixes"], ks=(2, math.inf)))
    assert list(table.index) == ["Stopping@∞", "Stopping@2"]
    actual = study["strategies"].query("strategy == 'Actual'")
    pooled = study["one"]["actual_correct"].mean() * 100
    assert table.loc["Stopping@∞", "Acc ↑"] == pytest.approx(round(pooled, 1))
    assert len(actual) == 3 * 2


def test_taxonomy_table_from_the_judge_table():
    judge = pd.DataFrame(
        {
            "model": ["m1", "m1", "m2"],
            "benchmark": ["b1", "b2", "b1"],
            "n_cases": [4, 2, 1],
            "n_valid": [4, 0, 1],
            "visual": [25.0, float("nan"), 0.0],
            "calculation": [25.0, float("nan"), 100.0],
            "logical": [50.0, float("nan"), 0.0],
        }
    )
    table = taxonomy_results_table(judge)
    assert table.shape == (2, 6) and list(table.index) == ["m1", "m2"]
    assert table.loc["m1", ("b1", "Logical")] == 50.0 and table.loc["m2", ("b1", "Calculation")] == 100.0
    assert table.loc["m1", "b2"].isna().all() and table.loc["m2", "b2"].isna().all()  # no valid verdict / not judged
    mask = largest_in_group_mask(table)
    assert mask.loc["m1", ("b1", "Logical")] and mask.loc["m2", ("b1", "Calculation")] and mask.to_numpy().sum() == 2


def test_taxonomy_table_from_counts_and_percents():
    counts = pd.DataFrame(
        {
            "model": "m",
            "benchmark": ["b1"] * 3 + ["b2"] * 2,
            "category": [
                "visual_hallucination_or_perception",
                "calculation_error",
                "logical_error",
                "logical_error",
                "other",
            ],
            "count": [2, 1, 1, 3, 1],
        }
    )
    table = taxonomy_results_table(counts)
    assert (
        table.loc["m", ("b1", "Visual")] == 50.0
        and table.loc["m", ("b2", "Logical")] == 75.0
        and table.loc["m", ("b2", "Other")] == 25.0
    )
    assert table.loc["m", ("b2", "Visual")] == 0.0  # judged, none found
    # the failure modes named in words (the paper's V / C / L)
    assert list(table.columns.get_level_values(1)[:4]) == ["Visual", "Calculation", "Logical", "Other"]
    assert largest_in_group_mask(table).sum().sum() == 2


def test_figures_refuse_inputs_they_would_misdraw(study):
    with pytest.raises(ValueError, match="missing \\['accuracy'\\]"):
        plot_strategy_accuracy(study["strategies"].drop(columns="accuracy"))
    with pytest.raises(ValueError, match="filter the table"):
        plot_robustness(robustness(study["traj"]))
    with pytest.raises(ValueError, match="filter the table"):
        plot_format_breakdown(overthinking_table(study["one"], by=["model", "format"]))
    with pytest.raises(ValueError, match="filter the table"):
        stopping_table(stopping_at_k(study["prefixes"], by=["model"]))
    with pytest.raises(ValueError, match="2x2"):
        plot_transition_matrix(pd.DataFrame([[1, 2, 3]]))
    with pytest.raises(ValueError, match="square"):
        plot_cross_model(pd.DataFrame([[1.0, 0.5]], index=["a"], columns=["a", "b"]))
    with pytest.raises(ValueError, match="one row per"):
        results_table(pd.concat([study["strategies"], study["strategies"]]))
    with pytest.raises(ValueError, match="draws one group"):
        plot_trace_strips(study["prefixes"])  # several models and benchmarks: one condition per figure
    with pytest.raises(ValueError, match="`percent` or a `count`"):
        taxonomy_results_table(pd.DataFrame({"model": ["m"], "benchmark": ["b"], "category": ["visual"]}))


def test_trace_strips_sorted_by_tau_with_failed_probes_marked():
    synth = synthetic_tables(n_items=20, models=("model-a",), failure_rate=0.15, random_state=3)
    prefixes = synth["prefixes"].query("benchmark == 'mixed-bench'")
    strips = trace_strips(prefixes)
    taus = strips["first_correct_index"]
    solved = taus.dropna()
    assert list(solved) == sorted(solved) and taus.iloc[len(solved) :].isna().all()  # by τ, the unsolved last
    assert (strips["states"].map(len) == strips["n_utterances"] + 1).all()  # z_0..z_N
    failed = sum(s.count("failed probe") for s in strips["states"])
    assert failed > 0
    clean = trajectories(prefixes[~prefixes.item_id.isin(strips.loc[strips.n_failed > 0, "item_id"])])
    both = strips.merge(clean, on=["model", "benchmark", "item_id", "seed"], suffixes=("", "_metric"))
    assert len(both) == len(clean) > 0  # τ and κ̂ as the metrics define them, on the traces they keep
    assert both["first_correct_index"].fillna(-1).tolist() == both["first_correct_index_metric"].fillna(-1).tolist()
    assert both["kappa_tokens"].fillna(-1).tolist() == both["difficulty_tokens"].fillna(-1).tolist()
    fig = plot_trace_strips(prefixes)
    try:
        ax = fig.axes[0]
        assert ax.collections[0].get_array().shape[0] == len(strips)  # one strip per trace
        assert len(ax.collections[1].get_offsets()) == failed  # a cross per failed probe
        assert len(ax.collections[2].get_offsets()) == len(solved)  # a τ marker per solved trace
        assert len(ax.texts) == len(strips) and sum(t.get_text() == "κ̂ = ∞" for t in ax.texts) == taus.isna().sum()
    finally:
        plt.close(fig)


def test_taxonomy_table_without_a_valid_verdict_is_refused():
    judge = pd.DataFrame(
        {
            "model": ["m"],
            "benchmark": ["b"],
            "n_cases": [2],
            "n_valid": [0],
            "visual": [math.nan],
            "calculation": [math.nan],
            "logical": [math.nan],
        }
    )  # both judged cases failed to parse: every cell would be blank
    with pytest.raises(ValueError, match="no valid judge verdict"):
        taxonomy_results_table(judge)
    with pytest.raises(ValueError, match="no values to draw"):
        plot_table(pd.DataFrame({("b", "Visual"): [math.nan]}, index=["m"]), title="Table 4")


def test_trace_strips_title_counts_the_strips_drawn_and_names_the_probe():
    synth = synthetic_tables(n_items=6, models=("model-a",), seeds=(0, 1, 2), random_state=2)
    prefixes = synth["prefixes"].query("benchmark == 'mixed-bench'")
    fig = plot_trace_strips(prefixes)
    try:
        title, drawn = fig.axes[0].get_title(), len(fig.axes[0].get_yticks())
        assert drawn == len(trace_strips(prefixes)) == 18  # 6 questions x 3 seeds
        assert f"{drawn} traces of 6 questions" in title and "template stop_now" in title and "extractor rules" in title
    finally:
        plt.close(fig)
    thinned = plot_trace_strips(prefixes, max_traces=5)
    try:
        assert "5 of 18 traces" in thinned.axes[0].get_title() and len(thinned.axes[0].get_yticks()) == 5
    finally:
        plt.close(thinned)

"""Tests of `figures.musobench`: every figure and table renders from a small realistic table (the
synthetic results, passed through the metric functions), has the right panels and artists, and saves
as PNG; bad input fails with a clear message."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd
import pytest
from matplotlib.collections import PathCollection
from matplotlib.quiver import Quiver

from reasoning_study.figures.core import save_figure
from reasoning_study.figures.musobench import (
    EXPLORATION_METRICS,
    plot_calibration,
    plot_exploration_calibration,
    plot_factors,
    plot_mitigations,
    plot_movement,
    plot_recall_confidence,
    plot_reliability,
    plot_solution_counts,
    plot_table,
    run_label,
    table_reconsideration,
    table_self_consistency,
)
from reasoning_study.metrics.musobench import (
    by_level,
    length_bins,
    length_confidence,
    mitigation_table,
    movement_grid,
    movement_pairs,
    reconsideration_rates,
    reflection_sweep,
    reliability_bins,
    summary_table,
    synthetic_results,
    temperature_sweep,
    under_both_policies,
)

FAMILY = {"toy-instruct": "Toy", "toy-thinker": "Toy"}


@pytest.fixture(scope="module")
def results():
    return synthetic_results(n_questions=20, seed=4)


@pytest.fixture(scope="module")
def base(results):
    return results[(results["condition"] == "base") & (results["temperature"] == 0.2)].assign(family="Toy")


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def saved(fig, tmp_path, name) -> bool:
    (png,) = save_figure(fig, tmp_path / name, formats=("png",))
    return png.stat().st_size > 1000


def test_solution_counts_unchanged(tmp_path, results):
    table = results.drop_duplicates(["task", "question_id"])[["task", "level", "answer_count"]]
    fig = plot_solution_counts(table)
    assert len(fig.axes) == 2 and saved(fig, tmp_path, "counts")


def test_recall_confidence_figure_2(tmp_path, base):
    fig = plot_recall_confidence(base, task="timetabling")
    assert len(fig.axes) == 2  # one panel per model
    for ax in fig.axes:
        assert sum(isinstance(c, PathCollection) for c in ax.collections) == 1  # one paradigm per model here
        assert ax.get_xlabel() == "Confidence" and ax.get_ylabel() == "Recall"
    one_panel = plot_recall_confidence(base, panel="family", task="subsetsum")  # Figure 8: both paradigms in one panel
    assert len(one_panel.axes) == 1
    assert sum(isinstance(c, PathCollection) for c in one_panel.axes[0].collections) == 2
    assert saved(fig, tmp_path, "fig2")


def test_recall_confidence_needs_a_task_and_columns(base):
    with pytest.raises(ValueError, match="pass task="):
        plot_recall_confidence(base)
    with pytest.raises(ValueError, match=r"missing \['confidence'\]"):
        plot_recall_confidence(base.drop(columns="confidence"), task="subsetsum")


def test_calibration_figure_3(tmp_path, base):
    bins = reliability_bins(base, by=["family", "paradigm", "task"])
    summary = summary_table(base, by=["family", "paradigm", "task"])
    fig = plot_calibration(bins, summary, panel="family", task="timetabling")
    assert len(fig.axes) == 2
    shown = bins[(bins["task"] == "timetabling") & (bins["count"] > 0)]
    assert len(fig.axes[0].patches) == len(shown)  # empty bins have no bar
    assert len(fig.axes[1].patches) == 2
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert {label.split(" (ECE")[0] for label in legend} == {"Short-CoT", "Long-CoT"}
    assert saved(fig, tmp_path, "fig3")


def test_reliability_bars_sit_on_the_fixed_bins(base):
    bins = reliability_bins(base, by=["family", "paradigm", "task"])
    fig = plot_reliability(bins, panel="family", task="subsetsum")
    lefts = sorted(round(p.get_x(), 6) for p in fig.axes[0].patches)
    allowed = {round(k / 10 + j * 0.05, 6) for k in range(10) for j in (0, 1)}  # two paradigms share each 0.1 bin
    assert set(lefts) <= allowed


def test_movement_figure_4(tmp_path, base):
    pairs = movement_pairs(base, family=FAMILY)
    fig = plot_movement(pairs, task="timetabling")
    arrows = sum(len(q.U) for q in fig.axes[0].collections if isinstance(q, Quiver))
    assert len(fig.axes) == 1 and arrows == int((pairs["task"] == "timetabling").sum())
    grid = plot_movement(movement_grid(pairs), task="subsetsum")  # the reference's grid-averaged arrows
    assert sum(len(q.U) for q in grid.axes[0].collections if isinstance(q, Quiver)) == len(
        movement_grid(pairs).query("task == 'subsetsum'")
    )
    assert saved(fig, tmp_path, "fig4")


def test_factors_figure_5(tmp_path, results, base):
    long_runs = results[(results["paradigm"] == "long") & ~results["condition"].str.startswith("sc_")]
    sweep = results[(results["paradigm"] == "short") & (results["condition"] == "base")]
    fig = plot_factors(
        lengths=length_bins(long_runs, by=["paradigm", "task"]),
        length_fit=length_confidence(long_runs, by=["paradigm", "task"]),
        levels=by_level(base, by=["paradigm", "task"]),
        temperatures=temperature_sweep(sweep, by=["paradigm", "task"]),
        task="subsetsum",
    )
    assert len(fig.axes) == 3
    assert fig.axes[0].get_xscale() == "log" and len(fig.axes[0].get_lines()) == 2  # binned means + fitted line
    assert len(fig.axes[1].get_lines()) == 4 and len(fig.axes[2].get_lines()) == 2
    assert saved(fig, tmp_path, "fig5")
    assert len(plot_factors(temperatures=temperature_sweep(sweep, by=["paradigm", "task"]), task="subsetsum").axes) == 1


def test_factors_give_each_line_of_another_hue_its_own_colour(results):
    base = results[(results["condition"] == "base") & (results["paradigm"] == "short")]
    two = pd.concat([base.assign(model="model-a"), base.assign(model="model-b")])
    fig = plot_factors(levels=by_level(two, by=["model", "task"]), hue="model", task="subsetsum")
    colours = {matplotlib.colors.to_hex(line.get_color()) for line in fig.axes[0].get_lines()}
    assert len(colours) == 2


def test_factors_refuses_ambiguous_lines(results):
    with pytest.raises(ValueError, match="several rows per"):
        plot_factors(levels=by_level(results, by=["paradigm", "condition", "task"]), task="subsetsum")
    with pytest.raises(ValueError, match="at least one"):
        plot_factors()


def test_mitigations_figure_6(tmp_path, results):
    at = results[results["temperature"] == 0.2]
    explore = mitigation_table(at[at["paradigm"] == "short"], by=["paradigm", "condition", "task"])
    sc = reliability_bins(
        at[(at["paradigm"] == "long") & at["condition"].isin(["base", "sc_median", "sc_voting"])],
        by=["paradigm", "condition", "task"],
    )
    fig = plot_mitigations(
        reflections=reflection_sweep(at, by=["paradigm", "task"]),
        exploration=explore,
        self_consistency=sc,
        task="subsetsum",
    )
    assert len(fig.axes) == 3
    assert len(fig.axes[0].get_lines()) == 3
    assert len(fig.axes[1].patches) == 2 * len(EXPLORATION_METRICS)
    assert {t.get_text().split(" (ECE")[0] for t in fig.axes[2].get_legend().get_texts()} == {
        "Long-CoT",
        "w/ Median Conf",
        "w/ Voting",
    }
    assert saved(fig, tmp_path, "fig6")
    assert len(plot_mitigations(exploration=explore, task="subsetsum").axes) == 1


def test_exploration_calibration_figure_13(tmp_path, results):
    at = results[(results["temperature"] == 0.2) & (results["paradigm"] == "short")]
    fig = plot_exploration_calibration(reliability_bins(at, by=["paradigm", "condition", "task"]))
    assert len(fig.axes) == 2 and saved(fig, tmp_path, "fig13")


def test_table_1(tmp_path, base):
    table = table_reconsideration(reconsideration_rates(base, by=["model", "paradigm", "task"]))
    assert table.shape == (2, 6)
    assert list(table.index.get_level_values("Paradigm")) == [
        "Short-CoT",
        "Long-CoT",
    ]  # models sorted: toy-instruct, toy-thinker
    assert table.to_numpy().max() <= 100 and table.to_numpy().min() >= 0
    assert saved(plot_table(table, title="Table 1", decimals=2), tmp_path, "table1")


def test_table_2(tmp_path, results):
    long = results[(results["paradigm"] == "long") & (results["temperature"] == 0.2)]
    summary = summary_table(long, by=["task", "condition"])
    table = table_self_consistency(summary, conditions=("base", "sc_median", "sc_voting"))
    assert table.shape == (6, 3) and list(table.columns) == ["Precision (%)", "Recall (%)", "ECE (r)"]
    assert list(table.index.get_level_values("Method")[:3]) == ["Long-CoT", "w/ Median Conf", "w/ Voting"]
    row = summary.set_index(["task", "condition"]).loc[("subsetsum", "sc_voting")]
    assert table.loc[("SubsetSum", "w/ Voting"), "Recall (%)"] == round(row["recall"] * 100, 2)
    assert saved(plot_table(table), tmp_path, "table2")
    with pytest.raises(ValueError, match="one row per"):
        table_self_consistency(pd.concat([summary, summary]))


def test_run_labels():
    assert [
        run_label("short"),
        run_label("long"),
        run_label("short", "exploration"),
        run_label("long", "sc_voting"),
        run_label("long", "sc_threshold"),
        run_label("long", "reflection_k2"),
    ] == ["Short-CoT", "Long-CoT", "w/ Exploration", "w/ Voting", "Threshold vote (ours)", "2 reflections"]
    # results written before the names were separated: the union was `sc_union`, the threshold vote `sc_vote`
    assert [run_label("long", "sc_union"), run_label("long", "sc_vote")] == ["w/ Voting", "Threshold vote (ours)"]


def test_tables_1_and_2_put_both_unscored_policies_side_by_side(tmp_path, results):
    # one Long-CoT reply on SubsetSum is cut off before a solution: it is in the table only under "zero", as an empty answer
    long = results[(results["paradigm"] == "long") & (results["temperature"] == 0.2)].reset_index(drop=True)
    first = long.index[(long["condition"] == "base") & (long["task"] == "subsetsum") & (long["status"] == "answered")][
        0
    ]
    cut = long.copy()
    cut.loc[first, ["status", "precision", "recall", "n_listed", "n_correct", "confidence", "decision"]] = [
        "truncated",
        None,
        None,
        None,
        None,
        None,
        None,
    ]
    summary = under_both_policies(summary_table, cut, by=["task", "condition"])
    table = table_self_consistency(summary)
    scored, zeroed = (
        summary[(summary["task"] == "subsetsum") & (summary["condition"] == "base") & (summary["unscored"] == u)].iloc[
            0
        ]
        for u in ("exclude", "zero")
    )
    row = table.loc[("SubsetSum", "Long-CoT")]
    # no error rows here: "zero" scores every row of the group (the cut one, and the synthetic table's own truncated ones)
    assert scored["n_unscored"] >= 1 and scored["n_error"] == 0 and zeroed["n_zeroed"] == scored["n_unscored"]
    assert (row[("Rows", "scored only")], row[("Rows", "unscored = 0")]) == (scored["n_scored"], scored["n_rows"])
    # by hand: each zeroed row adds 0 to the sum of recalls and one row to the count
    assert row[("Recall (%)", "unscored = 0")] == round(
        scored["recall"] * scored["n_scored"] / scored["n_rows"] * 100, 2
    )
    # no stated confidence: ECE does not move
    assert row[("ECE (r)", "unscored = 0")] == row[("ECE (r)", "scored only")]
    voting = table.loc[("SubsetSum", "w/ Voting")]  # the other rows have nothing unscored: the two columns agree
    assert voting[("Recall (%)", "scored only")] == voting[("Recall (%)", "unscored = 0")]
    assert list(table.index.get_level_values("Method")[:4]) == [
        "Long-CoT",
        "w/ Median Conf",
        "w/ Voting",
        "Threshold vote (ours)",
    ]
    assert saved(plot_table(table, title="Table 2", decimals=2), tmp_path, "table2_both")
    base = cut[cut["condition"] == "base"]
    table1 = table_reconsideration(under_both_policies(reconsideration_rates, base, by=["model", "paradigm", "task"]))
    assert table1.columns.nlevels == 3 and set(table1.columns.get_level_values(2)) == {"scored only", "unscored = 0"}
    rows = table1.loc[("toy-thinker", "Long-CoT"), ("SubsetSum", "Rows")]
    assert rows["unscored = 0"] == rows["scored only"] + scored["n_unscored"]
    for metric in (
        "CSR (%)",
        "ESC (%)",
    ):  # an empty round 1 has no correct and no wrong solution: undefined, nothing moves
        pair = table1.loc[("toy-thinker", "Long-CoT"), ("SubsetSum", metric)]
        assert pair["scored only"] == pair["unscored = 0"], metric
    # NSD: the synthetic table's own truncated rows carry a (made-up) reconsideration, so they enter it under "zero",
    # every correct round-2 solution new; the reply cut here has none and stays out
    rates = under_both_policies(reconsideration_rates, base, by=["model", "paradigm", "task"]).set_index(
        ["model", "task", "unscored"]
    )
    decided = base[
        (base["model"] == "toy-thinker")
        & (base["task"] == "subsetsum")
        & (base["status"] == "truncated")
        & base["decision"].notna()
        & base["decision"].ne("unparsable")
    ]
    assert rates.loc[("toy-thinker", "subsetsum", "zero"), "n_nsd"] == rates.loc[
        ("toy-thinker", "subsetsum", "exclude"), "n_nsd"
    ] + len(decided)
    assert saved(plot_table(table1, title="Table 1", decimals=2), tmp_path, "table1_both")


def test_recall_confidence_legend_counts_the_points_drawn(base):
    # one Long-CoT row without a stated confidence: it is not drawn, and the legend says how many were
    rows = base[base["task"] == "subsetsum"].copy()
    first = rows.index[rows["paradigm"] == "long"][0]
    rows.loc[first, "confidence"] = None
    fig = plot_recall_confidence(rows, panel="family", task="subsetsum")
    ax = fig.axes[0]
    points = [c for c in ax.collections if isinstance(c, PathCollection)]
    labels = {c.get_label().split(" (")[0]: c.get_label() for c in points}
    for c in points:
        n = int(c.get_label().split("(n=")[1].split()[0].rstrip(")"))
        assert n == len(c.get_offsets())  # the n printed is the number of points in that colour
    long = rows[rows["paradigm"] == "long"]
    drawn = int((long["confidence"].notna() & long["recall"].notna()).sum())
    assert drawn < len(long) and labels["Long-CoT"] == f"Long-CoT (n={drawn} of {len(long)})"
    with pytest.raises(ValueError, match="no instance with both a confidence and a recall"):
        plot_recall_confidence(rows.assign(confidence=None), panel="family", task="subsetsum")


def test_calibration_says_ece_na_and_draws_no_bar_for_missing_recall(base):
    bins = reliability_bins(base, by=["family", "paradigm", "task"])
    summary = summary_table(base, by=["family", "paradigm", "task"])
    bins.loc[bins["paradigm"] == "short", "ece"] = float("nan")
    summary.loc[(summary["paradigm"] == "short") & (summary["task"] == "timetabling"), "recall"] = float("nan")
    fig = plot_calibration(bins, summary, panel="family", task="timetabling")
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert "Short-CoT (ECE n/a)" in legend and not any("nan" in t for t in legend)
    assert len(fig.axes[1].patches) == 1  # Long-CoT's bar only: the missing recall is no bar of 0
    assert [t.get_text() for t in fig.axes[1].texts if t.get_text() == "no data"] == ["no data"]
    assert not any("nan" in t.get_text() for t in fig.axes[1].texts)
    with pytest.raises(ValueError, match="no recall to draw"):
        plot_calibration(bins, summary.assign(recall=float("nan")), panel="family", task="timetabling")
    with pytest.raises(ValueError, match="no instance with a stated confidence"):
        plot_calibration(bins.assign(count=0), summary, panel="family", task="timetabling")


def test_factors_say_r_na_where_the_fit_has_no_correlation(results):
    long_runs = results[(results["paradigm"] == "long") & ~results["condition"].str.startswith("sc_")]
    fit = length_confidence(long_runs, by=["paradigm", "task"]).assign(r=float("nan"))
    fig = plot_factors(lengths=length_bins(long_runs, by=["paradigm", "task"]), length_fit=fit, task="subsetsum")
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert legend == ["Long-CoT (r n/a)"]
    from reasoning_study.figures.core import figure_text_problems

    assert figure_text_problems(fig) == []

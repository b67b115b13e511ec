"""Failed probes are a status, not a wrong answer (issue 13, points 9 and 10).

A probe that errored (backend or extractor) has `correct` missing. Every reduction of
`metrics.overthinking` reads the per-prefix table through `apply_failed_probes`: with
`failed_probes="exclude"` a trajectory with a failed probe leaves every table, with `"cut"` it ends at
its last good prefix. Both are checked against tables built by hand without the failed probes (random
trajectories by hypothesis), and Fig. 8's K = 1 point against Table 1's Actual.
"""

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reasoning_study.metrics.overthinking import (
    FAILED_PROBE_STATUSES,
    apply_failed_probes,
    check_prefix_table,
    failed_probe_table,
    is_harmful,
    optimal_vs_test_time_scaling,
    prefix_rows,
    stability_curve,
    stopping_at_k,
    strategy_table,
    synthetic_tables,
    trajectories,
)

GOLD, ERR = "y", "ERR"  # ERR: the probe failed
KEYS = dict(model="m", benchmark="b", seed=0, template="stop_now", extractor="rules")


def table_of(named_lists: dict[str, list]) -> pd.DataFrame:
    "One trajectory per named list of forced answers (ERR: a failed probe, correct <NA>, status 'error')."
    parts = []
    for item, preds in named_lists.items():
        z = [None if p == ERR else p == GOLD for p in preds]
        parts.append(
            prefix_rows(
                z,
                [None if p == ERR else p for p in preds],
                [3 + k for k in range(len(preds) - 1)],
                item_id=item,
                format="mc" if sum(map(ord, item)) % 2 else "ff",
                **KEYS,
            )
        )
    return pd.concat(parts, ignore_index=True)


def by_hand(named_lists: dict[str, list], policy: str) -> dict[str, list]:
    "The lists a policy leaves: without the trajectories that failed (exclude), or each cut before its first failure."
    out = {}
    for item, preds in named_lists.items():
        if ERR not in preds:
            out[item] = preds
        elif policy == "cut" and preds.index(ERR) > 0:
            out[item] = preds[: preds.index(ERR)]
    return out


answers = st.sampled_from([GOLD, "a", "b", None, ERR])
named = st.lists(st.lists(answers, min_size=1, max_size=9), min_size=1, max_size=8).map(
    lambda lists: {f"i{j}": preds for j, preds in enumerate(lists)}
)
fast = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def reductions(table: pd.DataFrame, policy: str | None = None) -> dict:
    kw = {} if policy is None else dict(failed_probes=policy)
    traj = trajectories(table, **kw)
    answers = traj["actual_prediction"].astype(object)
    return {
        # (NaN or None: no answer) "strategies": strategy_table(traj, by=[]), "transitions": transition_matrix(table, **kw),
        "trajectories": traj.assign(actual_prediction=answers.where(answers.notna(), None)),
        "stopping": stopping_at_k(table, ks=(1, 2, math.inf), **kw),
        "stability": stability_curve(table, **kw),
    }


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(named, st.sampled_from(["exclude", "cut"]))
def test_every_reduction_equals_the_table_without_the_failed_probes(lists, policy):
    kept = by_hand(lists, policy)
    table = table_of(lists)
    if not kept:
        with pytest.raises(ValueError, match="no trajectory left"):
            trajectories(table, failed_probes=policy)
        return
    got, expected = reductions(table, policy), reductions(table_of(kept))
    for name in got:
        pd.testing.assert_frame_equal(got[name], expected[name], check_dtype=False, obj=name)


@fast
@given(named)
def test_an_error_is_never_read_as_wrong(lists):
    kept = by_hand(lists, "exclude")
    if not kept:
        return
    s = strategy_table(trajectories(table_of(lists)), by=[]).set_index("strategy")
    z = {item: [p == GOLD for p in preds] for item, preds in kept.items()}
    harmful = [is_harmful(z[item], preds) for item, preds in kept.items()]  # a final None is no answer, not wrong
    unanswered = np.mean([any(z[item]) and preds[-1] is None for item, preds in kept.items()])
    assert s.loc["Actual", "n"] == len(kept)  # only the trajectories without a failed probe
    assert s.loc["Actual", "harmful_rate"] == pytest.approx(np.mean(harmful))
    assert s.loc["Actual", "accuracy"] == pytest.approx(np.mean([zs[-1] for zs in z.values()]))
    assert s.loc["Optimal", "accuracy"] == pytest.approx(
        s.loc["Actual", "accuracy"] + s.loc["Actual", "harmful_rate"] + unanswered
    )


@fast
@given(named, st.sampled_from(["exclude", "cut"]))
def test_failed_probe_table_counts_what_was_done(lists, policy):
    table = table_of(lists)
    row = failed_probe_table(table, policy, by=[]).iloc[0]
    failing = [preds for preds in lists.values() if ERR in preds]
    cut = [preds for preds in failing if policy == "cut" and preds.index(ERR) > 0]
    assert row["n_trajectories"] == len(lists) and row["n_with_failed_probes"] == len(failing)
    assert row["n_failed_probes"] == sum(preds.count(ERR) for preds in failing)
    assert (row["n_cut"], row["n_excluded"]) == (len(cut), len(failing) - len(cut))
    _, outcome = apply_failed_probes(table, policy)
    assert sorted(outcome["item_id"]) == sorted(item for item, preds in lists.items() if ERR in preds)


def test_the_issue_examples_by_hand():
    "z = [F, T, T, error] is not harmful, and a trace whose probes all failed is not wrong under any strategy."
    lists = {"ok_wrong": ["a", "a"], "late_error": ["a", GOLD, GOLD, ERR], "all_failed": [ERR, ERR, ERR]}
    s = strategy_table(trajectories(table_of(lists)), by=[]).set_index("strategy")
    assert s.loc[["No-CoT", "Actual", "Optimal"], "n"].tolist() == [1, 1, 1]  # only ok_wrong is left
    assert s.loc[["No-CoT", "Actual", "Optimal"], "accuracy"].tolist() == [0.0, 0.0, 0.0]
    assert s.loc["Actual", "harmful_rate"] == 0.0
    cut = trajectories(table_of(lists), failed_probes="cut").set_index("item_id")
    assert cut.loc["late_error", ["n_utterances", "actual_correct", "verbose", "harmful"]].tolist() == [
        2,
        True,
        True,
        False,
    ]
    assert "all_failed" not in cut.index
    # an older table wrote correct=False for an errored probe: its probe_status still marks it
    old = table_of(lists).assign(correct=lambda t: t["correct"].fillna(False))
    assert set(trajectories(old)["item_id"]) == {"ok_wrong"}
    assert set(FAILED_PROBE_STATUSES) == {"error", "extractor_error"}
    with pytest.raises(ValueError, match="failed_probes must be one of"):
        check_prefix_table(old, failed_probes="zero")


def test_synthetic_failures_and_the_identities():
    synth = synthetic_tables(n_items=15, seeds=(0, 1, 2), failure_rate=0.3)
    prefixes = synth["prefixes"]
    failed = prefixes["probe_status"] == "error"
    assert (
        failed.any() and prefixes.loc[failed, "correct"].isna().all() and prefixes.loc[~failed, "correct"].notna().all()
    )
    assert prefixes.loc[failed, "prediction"].isna().all()
    counts = failed_probe_table(prefixes, by=[]).iloc[0]
    assert 0.15 < counts["n_with_failed_probes"] / counts["n_trajectories"] < 0.45
    for policy in ("exclude", "cut"):
        traj = trajectories(prefixes, failed_probes=policy)
        counts = failed_probe_table(prefixes, policy, by=[]).iloc[0]
        assert len(traj) == counts["n_trajectories"] - counts["n_excluded"]
        wide = strategy_table(traj).pivot_table(
            index=["model", "benchmark"], columns="strategy", values=["accuracy", "harmful_rate"], observed=True
        )
        unanswered = traj.groupby(["model", "benchmark"])["ended_unanswered"].mean()  # solved, then no answer at N
        assert wide[("accuracy", "Optimal")].to_numpy() == pytest.approx(
            (wide[("accuracy", "Actual")] + wide[("harmful_rate", "Actual")] + unanswered).to_numpy()
        )
        k_inf = stopping_at_k(prefixes, ks=(math.inf,), by=["model", "benchmark"], failed_probes=policy).set_index(
            ["model", "benchmark"]
        )
        actual = strategy_table(traj).query("strategy == 'Actual'").set_index(["model", "benchmark"])
        assert k_inf["accuracy"].to_numpy() == pytest.approx(actual["accuracy"].to_numpy())  # Stopping@∞ is Actual
        assert k_inf["harmful_rate"].to_numpy() == pytest.approx(actual["harmful_rate"].to_numpy())
    assert synthetic_tables(n_items=5)["prefixes"]["probe_status"].ne("error").all()  # failure_rate=0: no failure


def test_k1_of_the_scaling_curves_is_table1_actual():
    "Fig. 8's Actual Length and Pass@K at K = 1 are Table 1's Actual accuracy, on the same trajectories."
    synth = synthetic_tables(n_items=12, models=("model-a", "model-b"), seeds=(0, 1, 2, 3))
    traj = trajectories(synth["prefixes"])
    scaling = optimal_vs_test_time_scaling(traj, by=["model", "benchmark"])
    k1 = scaling[scaling.k == 1].pivot_table(
        index=["model", "benchmark"], columns="strategy", values="accuracy", observed=True
    )
    table1 = strategy_table(traj).pivot_table(
        index=["model", "benchmark"], columns="strategy", values="accuracy", observed=True
    )
    for curve in ("Actual Length", "Pass@K"):
        assert k1[curve].to_numpy() == pytest.approx(table1["Actual"].to_numpy())
    assert k1["Optimal Length"].to_numpy() == pytest.approx(table1["Optimal"].to_numpy())
    # the own answer differs from the probed z_N: its curves are labelled, and the probed ones do not move
    traces = synth["traces"].assign(final_correct=~synth["traces"]["final_correct"])
    both = optimal_vs_test_time_scaling(traj, by=["model", "benchmark"], traces=traces)
    assert set(both["strategy"]) == {
        "Pass@K",
        "Actual Length",
        "Optimal Length",
        "Pass@K (own answer)",
        "Actual Length (own answer)",
    }
    pd.testing.assert_frame_equal(
        both[both.strategy.isin(["Pass@K", "Actual Length", "Optimal Length"])].reset_index(drop=True),
        scaling.reset_index(drop=True),
    )
    own_k1 = both[(both.k == 1) & (both.strategy == "Pass@K (own answer)")].set_index(["model", "benchmark"])[
        "accuracy"
    ]
    assert own_k1.to_numpy() == pytest.approx(1 - table1["Actual"].to_numpy())

"""Attention entropy: every per-layer and per-phase mean of a study's score has its cluster-bootstrap interval over
runs, re-scored exactly; no model (synthetic entropy tables)."""

import numpy as np
import pandas as pd

from reasoning_study.metrics import attention
from reasoning_study.studies.attention import study


def _raw(question_ids=range(5), layers=(0, 1, 2)):
    entropies = attention.synthetic_entropies(question_ids=list(question_ids), layers=list(layers))
    return {"entropies": entropies, "runs": attention.synthetic_runs(entropies)}


def test_score_tables_have_their_intervals_and_are_reproduced_exactly():
    raw, config = _raw(), study.AttentionConfig(tasks=["subsetsum"], layers=[0, 1, 2], resamples=300)
    results = study.score(raw, config)
    summary, comparisons = results["summary"], results["comparisons"]
    assert {"mean_lo", "mean_hi", "n_units"} <= set(summary.columns) and set(summary["n_units"]) == {5}
    assert len(summary) == 2 * 3 * 4 and summary[["mean_lo", "mean_hi"]].notna().all().all()
    assert ((summary["mean_lo"] <= summary["mean"] + 1e-12) & (summary["mean"] <= summary["mean_hi"] + 1e-12)).all()
    plain = attention.layer_phase_summary(raw["entropies"])
    pd.testing.assert_frame_equal(summary[plain.columns], plain)  # the intervals leave the means as they were
    assert len(comparisons) == 3 * 4 and set(comparisons["n_units"]) == {5} and set(comparisons["n_unpaired"]) == {0}
    assert comparisons["p_value"].between(0, 1).all()
    again = study.score(raw, config)  # what rs-rescore --check compares: bit for bit
    for name in study.RESULT_FILES:
        pd.testing.assert_frame_equal(again[name], results[name])
    markdown = study.summary_markdown(results)
    assert "Intervals over fewer than 10 runs say little" in markdown and " [" in markdown


def test_runs_that_agree_give_zero_width_intervals_and_identical_paradigms_a_zero_difference():
    raw = _raw(question_ids=range(4), layers=(0,))
    entropies = raw["entropies"]
    constant = [np.full(len(a), 1.5, np.float32) for a in entropies[attention.ENTROPY]]
    flat = entropies.assign(**{attention.ENTROPY: constant})
    summary = attention.layer_phase_summary(flat, resamples=200)
    assert np.allclose(summary["mean_lo"], 1.5) and np.allclose(summary["mean_hi"], 1.5)
    short = entropies[entropies.paradigm == "short"]
    same = pd.concat([short, short.assign(paradigm="long")], ignore_index=True)
    d = attention.paradigm_comparisons(same, resamples=200)
    assert (d["difference"] == 0).all() and (d["p_value"] == 1).all() and not d["excludes_zero"].any()

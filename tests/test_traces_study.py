"""The traces study (issue #45): traces you already have, studied through the registry's one door. Its config refuses a
bad parameter before anything is read or loaded; a record that cannot be read is listed in the run folder, never dropped
silently; a run folder gives the report's section (the stated strips, the summary with intervals, the reason the two
lenses are not drawn without a prober), its samples and the same tables again on re-scoring; and with the embedded
model as prober, the forced-answer lens runs on the same real traces and the two lenses' agreement is reported, each
trace's stated τ against its probed τ (reported, not assumed: it is data)."""

import json
from pathlib import Path

import pandas as pd
import pytest

from reasoning_study.config import ConfigError, config_from
from reasoning_study.studies import registry
from reasoning_study.studies.runner import execute
from reasoning_study.studies.traces import study
from reasoning_study.studies.traces.run import RAW_FILES
from reasoning_study.tasks.traces import REAL_TRACES_FILE, TraceImportError, real_traces_dir


def test_the_contract_is_clean():
    entry = registry.STUDIES["traces"]
    assert registry.contract_problems(entry.load(), entry) == []
    assert registry.sample_kinds()["traces"].view in registry.SAMPLE_VIEWS
    rows = [f for f in registry.paper_figures() if f.experiment == "traces"]
    assert len(rows) == 3 and {f.paper for f in rows} == {registry.BEYOND}
    assert study.roles(study.TracesConfig()) == []  # the default reads traces without any model


@pytest.mark.parametrize(
    "values, says",
    [
        ({"prober": "gpt-4o-mini"}, "token-exact"),  # a hosted model cannot take token-exact probes
        ({"prober": "no-such-model"}, "prober"),
        ({"threshold": 1.5}, "threshold"),
        ({"max_prefixes": 0}, "max_prefixes"),
        ({"mapping": {"gold": "answer"}}, "real traces"),
        ({"n_trace": 2}, "n_trace"),
    ],
)
def test_a_bad_parameter_fails_before_anything_loads(values, says, monkeypatch):
    import reasoning_study.backends.presets as presets

    monkeypatch.setattr(presets, "load_backend", lambda *a, **k: pytest.fail("a model was loaded"))
    with pytest.raises(ConfigError, match=says):
        config_from(study.TracesConfig, values)


def test_import_errors_are_recorded(tmp_path):
    source = tmp_path / "mine.jsonl"
    good = {"id": "a", "question": "What is 1+1?", "gold": "2", "reasoning": "1+1 is 2.\nSo the answer is 2."}
    source.write_text(
        "\n".join(
            [
                json.dumps(good),
                "{not json",
                json.dumps({"id": "b", "question": "What is 2+2?", "gold": "4"}),  # no reasoning
                json.dumps({"id": "c", "question": "What is 3+3?", "reasoning": "6", "gold": None}),  # no gold
            ]
        )
        + "\n"
    )
    config = study.TracesConfig(source=str(source), out_dir=str(tmp_path / "run"))
    done = execute("traces", config, progress=False)
    assert done.record["status"] == "finished" and done.record["counts"]["left_out"] == 3
    errors = pd.read_csv(tmp_path / "run" / RAW_FILES["import_errors"])
    assert list(errors.columns) == ["file", "record", "field", "problem"]
    assert sorted(errors["field"]) == ["(json)", "gold", "reasoning"]
    assert errors["record"].str.contains("line 2").any() and errors["record"].str.contains("'b'").any()
    assert list(done.raw["traces"]["id"]) == ["a"]
    with pytest.raises(TraceImportError, match="line 2"):
        study.run(study.TracesConfig(source=str(source), bad_records="fail"), progress=False)


def test_the_section_renders_from_a_run_folder(tmp_path):
    from reasoning_study.cli import rescore_folder

    folder = tmp_path / "traces"
    done = execute("traces", study.TracesConfig(out_dir=str(folder)), progress=False)
    assert done.record["status"] == "finished" and done.record["counts"]["traces"] == 20
    made: dict = {}
    study.section([folder], tmp_path / "report", made)
    strips, summary = made["traces/stated_strips"], made["traces/stated_summary"]
    assert any(str(p).endswith(".png") and Path(p).is_file() for p in strips)
    text = Path(next(p for p in summary if str(p).endswith(".md"))).read_text()
    assert "20 traces of one model" in text and "no claim beyond them" in text
    assert "abandoned right" in text and "outcome efficiency" in text and "continuation accuracy ≥ 0.5" in text
    assert "(20 of 20)" in text  # the last stated answer agrees with the data's own verdict on every shipped trace
    assert "nan" not in text.replace("nanc", "") and "None" not in text
    assert "no prober ran" in made["traces/lens_agreement"]  # not drawn, and why
    assert set(rescore_folder(folder, check=True).values()) == {"unchanged"}
    samples = study.samples(folder)
    assert len(samples) == 20 and {s["kind"] for s in samples} == {"traces"}
    assert all(len(s["prefixes"]) == s["strip"]["n"] + 1 for s in samples)


def test_two_lenses_on_the_embedded_model(tmp_path):
    "The forced-answer probe of the embedded model on two real traces, cut to three prefixes each, beside the stated lens."
    lines = (real_traces_dir() / REAL_TRACES_FILE).read_text().splitlines()
    shortest = sorted(lines, key=lambda line: len(json.loads(line)["trace"]))[:2]
    source = tmp_path / "two.jsonl"
    source.write_text("\n".join(shortest) + "\n")
    config = study.TracesConfig(
        source=str(source), prober="smollm2-135m", max_prefixes=3, probe_max_tokens=6, out_dir=str(tmp_path / "run")
    )
    assert [r.name for r in study.roles(config)] == ["prober"]
    done = execute("traces", config, progress=False)
    assert done.record["status"] == "finished" and done.record["counts"]["probe_rows"] == 2 * 4
    probed = done.raw["probed_prefixes"]
    assert set(probed.groupby("trace_id")["n_utterances"].first()) == {3}
    assert probed["probe_status"].isin(["answered", "no_answer", "truncated"]).all()
    agreement = done.results["agreement"]
    assert len(agreement) == 1 and int(agreement["n_traces"].iloc[0]) == 2
    assert {"tau_lower_bound", "tau_lower_bound_lo", "tau_lower_bound_hi", "harmful_agree_lo", "n_units"} <= set(
        agreement.columns
    )
    pairs = done.results["lens_pairs"]
    assert sorted(pairs["trace_id"]) == sorted(json.loads(line)["id"] for line in shortest)
    table = (tmp_path / "run" / "tables" / "lens_agreement.md").read_text()
    rows = [line for line in table.splitlines() if any(t in line for t in pairs["trace_id"])]
    assert len(rows) == 2 and all(("| yes" in r) or ("| no (stated earlier)" in r) for r in rows), table
    assert "stated τ ≥ probed τ" in table and "[" in table  # the share, with its interval

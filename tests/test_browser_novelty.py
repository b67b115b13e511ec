"""The NoveltyBench browser says what Table 4 says (issue #43, point 9), and the browser's filters say what they would
show: each option's count follows the other filters, and a link naming a value the page does not have says so.

The NoveltyBench run folder here is written the way the study writes it (`generate_novelty`'s columns, the judge's
and rater's table, `apply_judgements` computing Utility and Distinct), with the rows that broke the page: a Long-CoT
row whose reply status is "short", a scored row, a row whose rater failed though its confidence parsed. The cards are
checked field by field against the drawn Table 4 (`studies.musobench.report.novelty_table`) of the same rows; the
Chromium tests open small pages (`write_browser`) with a probe script appended, the way `test_browser.py` does, and
read what a reader sees.
"""

import html
import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from reasoning_study.browser import write_browser
from reasoning_study.studies.musobench.noveltybench import (
    GENERATION_COLUMNS,
    JUDGEMENT_COLUMNS,
    JUDGEMENT_KEYS,
    apply_judgements,
)
from reasoning_study.studies.musobench.report import NOVELTY_BY, novelty_table
from reasoning_study.studies.musobench.run import RUN_FILES
from reasoning_study.studies.musobench.samples import SAMPLE_KINDS, novelty_samples
from reasoning_study.studies.samples import sample_record

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None,
    reason="headless Chromium not found: `make test` installs Debian's chromium package when run as root",
)

NAN = float("nan")
# (paradigm, prompt, status, answers, confidence, confidence_status, classes, opener scores, rater statuses)
ROWS = [
    # the rater could not read the opener's score: no Utility, so unscored, though the confidence parsed (0.99)
    ("short", "p1", "short", ["a", "b"], 0.99, "parsed", [0, 1], [NAN, 8.0], ["unparsable", "parsed"]),
    ("short", "p2", "complete", ["a", "b", "c"], 0.8, "parsed", [0, 0, 1], [7.0, 5.0], ["parsed", "parsed"]),
    ("short", "p3", "unnumbered", ["blob"], NAN, "unparsable", [0], [9.0], ["parsed"]),
    # Long-CoT with fewer answers than k: scored, and its reply status is the word "short"
    ("long", "p1", "short", ["a"], NAN, "missing", [0], [10.0], ["parsed"]),
    ("long", "p2", "truncated", [], NAN, "missing", None, None, None),  # cut before an answer: nothing to judge
    ("long", "p3", "complete", ["x", "y", "z"], 0.6, "parsed", [0, 1, 2], [6.0, 7.0, 8.0], ["parsed"] * 3),
]


def novelty_run(folder: Path) -> pd.DataFrame:
    "A NoveltyBench run folder as the study leaves it (novelty.parquet, novelty_judgements.parquet); its results."
    generations, judgements = [], []
    for paradigm, prompt, status, answers, confidence, parsed, classes, scores, rated in ROWS:
        generations.append(
            dict(
                paradigm=paradigm,
                mode="independent",
                prompt_id=prompt,
                category="Random",
                k=3,
                status=status,
                answers=json.dumps(answers),
                n_answers=len(answers),
                from_truncated=False,
                reply_status="answered" if answers else "truncated",
                confidence=confidence,
                confidence_status=parsed,
                reasoning_tokens=NAN,
                completion_tokens=40,
                model="m",
            )
        )
        judgements.append(
            dict(
                model="m",
                paradigm=paradigm,
                mode="independent",
                prompt_id=prompt,
                judge="llm:judge",
                classes=None if classes is None else json.dumps(classes),
                judge_failures=0,
                rater="llm:rater",
                opener_scores=None if scores is None else json.dumps(scores),
                rater_statuses=None if rated is None else json.dumps(rated),
            )
        )
    generations = pd.DataFrame(generations, columns=[*GENERATION_COLUMNS, "model"])
    judgements = pd.DataFrame(judgements, columns=[*JUDGEMENT_KEYS, *JUDGEMENT_COLUMNS])
    results = apply_judgements(generations, judgements)
    folder.mkdir(parents=True, exist_ok=True)
    results.to_parquet(folder / RUN_FILES["novelty"])
    judgements.to_parquet(folder / RUN_FILES["novelty_judgements"])
    return results


def drawn_table4(results: pd.DataFrame) -> pd.DataFrame:
    "This study's rows of Table 4 as the report draws it, by paradigm (one model, mode, judge and rater here)."
    table = novelty_table(results)
    table = table[table["source"] == "this study"]
    assert len(table) == 2 and set(NOVELTY_BY) <= set(table.columns)
    return table.set_index("paradigm")


def test_novelty_cards_agree_with_table4(tmp_path):
    results = novelty_run(tmp_path / "run")
    table = drawn_table4(results)
    cards = novelty_samples(tmp_path / "run")
    assert len(cards) == len(ROWS)
    by_paradigm = {p: [c for c in cards if c["facets"]["paradigm"] == p] for p in ("short", "long")}
    for paradigm, mine in by_paradigm.items():
        t = table.loc[paradigm]
        scored = [c for c in mine if c["outcome"] == "scored"]
        counted = [c for c in mine if c["scores"]["confidence"] == "counted in Table 4"]
        # scored / unscored and the confidence counted exactly as Table 4 counts them
        assert len(scored) == t["n_scored"] and len(mine) - len(scored) == t["n_rows"] - t["n_scored"], paradigm
        assert all(c["outcome"] == "unscored" and c["scores"]["Table 4"] == "unscored" for c in mine if c not in scored)
        assert len(counted) == t["n_confidence"], paradigm
        # Utility and Distinct on the table's scale (percent), each card its row's number: their mean is the table's
        for field, column in (("utility %", "utility"), ("distinct %", "distinct")):
            assert np.isclose(np.mean([float(c["scores"][field]) for c in scored]), t[column], atol=0.01), field
            assert all(c["scores"][field] is None for c in mine if c not in scored)  # an unscored card has none
        assert np.isclose(np.mean([float(c["scores"]["confidence %"]) for c in counted]), t["confidence"], atol=0.01)
        # the paradigm is the record's own; no field of a card says the other paradigm's word
        other = {"short": "long", "long": "short"}[paradigm]
        for c in mine:
            shown = [c["status"], c["outcome"], c["title"], *c["tags"], *map(str, c["scores"].values())]
            assert other not in shown and paradigm not in shown, shown
            assert c["title"].endswith({"short": "Short-CoT", "long": "Long-CoT"}[paradigm]), c["title"]
    # the rows that broke the page (issue #43): utility 7.377 shown for 73.77, a parsed confidence Table 4 does not count
    card = {c["id"].split("/", 1)[1]: c for c in cards}
    row = results.set_index(["prompt_id", "paradigm"]).loc[("p2", "short")]
    assert card["p2/short/independent"]["scores"]["utility %"] == f"{100 * row['utility_pct']:.2f}" == "41.80"
    assert row["utility"] == pytest.approx(4.18, abs=0.01)  # the 1-10 scale the card no longer shows
    rater_failed = card["p1/short/independent"]
    assert rater_failed["outcome"] == "unscored" and rater_failed["scores"]["confidence %"] == "99.00"
    assert rater_failed["scores"]["confidence"] == "parsed, not counted: the row is unscored"
    assert card["p1/long/independent"]["outcome"] == "scored"  # a Long-CoT row with fewer answers than k still counts
    assert card["p1/long/independent"]["status"] == "fewer answers than k"


# --- what the page shows, in headless Chromium ----------------------------------------------------------------------

# runs `steps` one after another (pick a select's value, type a search, or follow a link's fragment) and records after
# each what a reader sees: the notice, the count, every select's options, the cards' badges and score cells
PROBE = """
window.addEventListener("load", () => {
  const steps = %s, seen = [];
  const wait = f => setTimeout(f, 300);
  function look() {
    const notice = document.getElementById("notice");
    seen.push({count: document.getElementById("count").textContent, hash: location.hash,
      notice: !notice || notice.hidden ? "" : notice.innerText,
      options: Object.fromEntries([...document.querySelectorAll("#filters select")].map(s =>
        [s.id, [...s.options].map(o => [o.value, o.textContent])])),
      cards: [...document.querySelectorAll(".card")].map(c => {
        const t = c.querySelector("table.scores"), heads = t ? [...t.rows[0].cells].map(x => x.textContent) : [];
        return {id: c.id, badges: [...c.querySelectorAll(":scope > div > .badge")].map(b => b.textContent),
          scores: t ? Object.fromEntries(heads.map((h, i) => [h, t.rows[1].cells[i].textContent])) : {}};
      })});
  }
  function next(i) {
    look();
    if (i === steps.length) {
      const out = document.createElement("pre"); out.id = "probe"; out.textContent = JSON.stringify(seen);
      return document.body.appendChild(out);
    }
    const [how, a, b] = steps[i];
    if (how === "hash") location.hash = a;
    else { const f = document.getElementById(a); f.value = b; f.dispatchEvent(new Event("change")); }
    wait(() => next(i + 1));
  }
  wait(() => next(0));
});
"""


def probe(page: Path, steps=(), fragment: str = "") -> list[dict]:
    "What the page shows at first and after each step, in headless Chromium (a copy of the page beside its data)."
    checked = page.with_name(f"probed-{page.name}")
    checked.write_text(
        page.read_text().replace("</body>", f"<script>{PROBE % json.dumps(list(steps))}</script></body>")
    )
    done = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=20000", "--dump-dom"]
        + [checked.as_uri() + fragment],
        capture_output=True,
        text=True,
        timeout=120,
    )
    found = re.search(r'<pre id="probe">(.*?)</pre>', done.stdout, re.S)
    assert found, f"Chromium did not run the probe (exit {done.returncode}): {done.stderr[-2000:]}"
    return json.loads(html.unescape(found.group(1)))


@needs_chromium
def test_novelty_page_shows_table4s_numbers(tmp_path):
    results = novelty_run(tmp_path / "run")
    table = drawn_table4(results)
    samples = [s | {"view": SAMPLE_KINDS[s["kind"]].view} for s in novelty_samples(tmp_path / "run")]
    (seen,) = probe(write_browser(samples, tmp_path / "site" / "novelty.html"))
    assert len(seen["cards"]) == len(ROWS)
    for paradigm, name in (("short", "Short-CoT"), ("long", "Long-CoT")):
        mine = [c for c in seen["cards"] if f"/{paradigm}/" in c["id"]]
        assert all(c["badges"][0] == name and paradigm not in c["badges"] for c in mine), mine  # never the other word
        scored = [c for c in mine if "scored" in c["badges"]]
        assert len(scored) == table.loc[paradigm, "n_scored"]
        assert all(c["scores"]["Table 4"] == ("scored" if c in scored else "unscored") for c in mine)
        if len(scored) == 1:  # one scored prompt: the card prints the table's number as the table prints it
            assert scored[0]["scores"]["utility %"] == f"{table.loc[paradigm, 'utility']:.2f}", scored
    shown = {c["id"].split("/", 1)[1]: c["scores"] for c in seen["cards"]}
    assert shown["p2/short/independent"]["utility %"] == "41.80"  # (7 + 0.8·0 + 0.64·5) / 2.44 / 10, in percent
    assert shown["p1/short/independent"]["confidence"].startswith("parsed, not counted")


def grid() -> list[dict]:
    "Samples over two runs, two paradigms, statuses, outcomes and tags: the counts of every combination differ."
    out = []
    for i in range(24):
        run, paradigm = ("r1", "r2")[i % 2], ("short", "long")[i % 3 == 0]
        outcome = ("correct", "incorrect", "unscored")[i % 4 % 3]
        tags = ["emulated"] if i % 5 == 0 else []
        record = sample_record(
            f"{run}/{i}",
            "demo",
            dict(run=run, model="m", paradigm=paradigm, condition="base", task="t", level=""),
            ("answered", "truncated")[i % 7 == 0],
            outcome,
            f"sample {i}",
            tags=tags,
            texts=[dict(label="reply", text=str(i))],
        )
        out.append(record | {"view": "texts"})
    return out


def expected_counts(samples: list[dict], state: dict, name: str) -> dict[str, int]:
    "What a select should say: per value of `name`, the samples the other filters in `state` leave with that value."

    def value(s, f):
        return s["tags"] if f == "tag" else [s["facets"][f] if f in s["facets"] else s[f]]

    others = [s for s in samples if all(not v or v in value(s, f) for f, v in state.items() if f != name)]
    counts = {"": len(others)}
    for s in samples:
        for v in value(s, name):
            counts.setdefault(v, 0)
    for s in others:
        for v in value(s, name):
            counts[v] += 1
    return counts


def shown_counts(options: list[list[str]]) -> dict[str, int]:
    "A select's options as value -> the count its text ends with ('' is 'all (n)'; an option without a count: absent)."
    found = {value: re.search(r"\((\d+)\)$", text) for value, text in options}
    return {value: int(m.group(1)) for value, m in found.items() if m}


@needs_chromium
def test_each_option_counts_what_it_would_show_and_a_bad_link_says_so(tmp_path):
    samples = grid()
    page = write_browser(samples, tmp_path / "site" / "grid.html")
    steps = [
        ("pick", "f-outcome", "correct"),  # a row filter narrows the facets' counts too
        ("pick", "f-q", "sample 1"),  # a search: counted over the loaded samples that match it
        ("hash", "#run=nope&paradigm=long&colour=red"),  # a link naming a run that does not exist
    ]
    first, picked, searched, linked = probe(page, steps, fragment="#paradigm=long")
    states = [
        {"paradigm": "long"},
        {"paradigm": "long", "outcome": "correct"},
        {"paradigm": "long", "outcome": "correct", "q": "sample 1"},
    ]
    for seen, state in zip((first, picked, searched), states):
        assert seen["notice"] == "", seen["notice"]
        matching = [s for s in samples if "q" not in state or state["q"] in s["title"]]
        for name in ("run", "paradigm", "status", "outcome", "tag"):
            want = expected_counts(matching, {k: v for k, v in state.items() if k != "q"}, name)
            assert shown_counts(seen["options"][f"f-{name}"]) == want, (name, state, seen["options"][f"f-{name}"])
        shown = expected_counts(matching, {k: v for k, v in state.items() if k != "q"}, "run")[""]  # no run picked
        assert seen["count"].startswith(f"{shown} samples") and shown, (seen["count"], shown)
    # the counts differ from the unfiltered ones: they do follow the filters
    assert shown_counts(first["options"]["f-run"]) != {"": 24, "r1": 12, "r2": 12}
    # an unknown run: said on the page, the filter dropped (all runs shown), the rest of the link kept
    assert "no run named “nope”" in linked["notice"] and "showing all" in linked["notice"], linked["notice"]
    assert "“colour” is not a filter of this page" in linked["notice"]
    n_long = sum(s["facets"]["paradigm"] == "long" for s in samples)
    assert linked["count"].startswith(f"{n_long} samples") and "run=" not in linked["hash"], linked

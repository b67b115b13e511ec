"""The sample browser as a reader uses it: the pages of the slice sweep (`conftest.SLICE`), opened in headless Chromium.

Each run folder of a study with samples gets `browser.html` from its experiment notebook; the sweep's report gets one page per kind of
sample in `report/browser/`, linked from `report.html`. The Chromium tests load a copy of a page with a small script
appended that picks filters the way a reader does (selects and the search box), waits for the data files to load, and
writes what the page then shows into a `<pre>`: a known dialogue and its highlighted candidates, the trace strips.
Without Chromium they skip, saying so (`make test` installs Debian's chromium when run as root).
"""

import html
import json
import re
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from reasoning_study.browser import RUN_BROWSER, browser_size, write_browser
from reasoning_study.studies.musobench.report import novelty_table
from reasoning_study.studies.musobench.samples import candidate_rows
from reasoning_study.studies.overthinking.samples import trace_strip
from reasoning_study.tasks.musobench import read_jsonl

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None,
    reason="headless Chromium not found: `make test` installs Debian's chromium "
    "package when run as root (apt-get install chromium)",
)
on_slice = [pytest.mark.slow, pytest.mark.xdist_group("slice")]  # they read the slice sweep (conftest)

# picks filters one after another as a reader does (each pick re-renders the filter bar), then reports what is shown
PICK = """
window.addEventListener("load", () => {
  const steps = %s;
  const wait = f => setTimeout(f, 400);
  function next(i) {
    if (i === steps.length) return wait(done);
    const [id, value] = steps[i], field = document.getElementById(id);
    if (!field) return wait(() => next(i + 1));
    field.value = value; field.dispatchEvent(new Event("change"));
    wait(() => next(i + 1));
  }
  function done() {
    const cards = [...document.querySelectorAll(".card")];
    const out = document.createElement("pre"); out.id = "page-check";
    out.textContent = JSON.stringify({
      count: document.getElementById("count").textContent, hash: location.hash,
      cards: cards.map(c => ({id: c.id, title: c.querySelector("h2").textContent,
        candidates: [...c.querySelectorAll("li.cand")].map(li => ({cls: li.className, text: li.textContent})),
        marks: [...c.querySelectorAll("pre.reply mark")].map(m => ({cls: m.className, text: m.textContent})),
        strip: [...c.querySelectorAll(".strip .cell")].map(s => s.className), answers: c.querySelectorAll("li.answer").length,
        badges: [...c.querySelectorAll(":scope > div > .badge")].map(b => b.textContent)})),
      notice: document.getElementById("notice").hidden ? "" : document.getElementById("notice").innerText,
      overview: [...document.querySelectorAll("#overview .row")].map(r => [...r.querySelectorAll(".cell")].map(s => s.className)),
      images: document.images.length, scripts: document.scripts.length, text: document.body.innerText});
    document.body.appendChild(out);
  }
  next(0);
});
"""


def browse(page: Path, tmp: Path, steps=(), fragment: str = "") -> dict:
    "A copy of the page and its data files, with the picking script, in headless Chromium; what the page then shows."
    copy = tmp / "pages"
    if not copy.exists():
        shutil.copytree(page.parent, copy)
    probe = copy / f"checked-{page.name}"  # beside the page's data folder: its relative links resolve
    probe.write_text(
        page.read_text().replace("</body>", f"<script>{PICK % json.dumps([list(s) for s in steps])}</script></body>")
    )
    done = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--virtual-time-budget=20000",
            "--dump-dom",
            probe.as_uri() + fragment,
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    found = re.search(r'<pre id="page-check">(.*?)</pre>', done.stdout, re.S)
    assert found, f"Chromium did not run the page check (exit {done.returncode}): {done.stderr[-2000:]}"
    return json.loads(html.unescape(found.group(1)))


def known_dialogue(run: Path) -> tuple[dict, list[dict]]:
    "A short-CoT base dialogue of the run whose first reply has parsed candidates, and those candidates (read in Python)."
    turns = pd.read_parquet(run / "turns.parquet")
    items = {(it.task, it.question_id): it for f in (run / "instances").glob("*.jsonl") for it in read_jsonl(f)}
    for row in (
        turns[(turns.turn == 1) & (turns.condition == "base")]
        .sort_values(["paradigm", "question_id"], ascending=[False, True])
        .to_dict("records")
    ):
        found = candidate_rows(
            items[(row["task"], row["question_id"])], row["answer"], truncated=row["status"] == "truncated"
        )
        if found:
            return row, found
    pytest.fail("no base dialogue of the slice lists a candidate")


# --- the pages are written where a reader looks ------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.xdist_group("slice")
def test_each_run_folder_and_the_report_have_their_browsers(slice_sweep):
    for cell in ("musobench", "musobench-novelty", "overthinking"):
        page = slice_sweep.run(cell) / RUN_BROWSER
        assert page.is_file() and (slice_sweep.run(cell) / "browser").is_dir(), cell
        assert "http://" not in page.read_text() and "https://" not in page.read_text()  # offline: nothing fetched
    for cell in ("musobench_build", "attention_entropy"):  # no samples to show
        assert not (slice_sweep.run(cell) / RUN_BROWSER).exists(), cell
    report = (slice_sweep.report / "report.html").read_text()
    for kind in ("musobench", "novelty", "overthinking"):
        assert f'href="browser/{kind}.html"' in report, kind
        assert (slice_sweep.report / "browser" / f"{kind}.html").is_file(), kind
    size = browser_size(slice_sweep.report / "browser" / "musobench.html")
    assert size < 2_000_000, size


# --- MuSoBench: filter to a known dialogue, see its candidates highlighted --------------------------------------


@needs_chromium
@pytest.mark.slow
@pytest.mark.xdist_group("slice")
def test_musobench_browser_shows_a_known_dialogue_and_its_candidates(slice_sweep, tmp_path):
    row, expected = known_dialogue(slice_sweep.run("musobench"))
    sample = f"musobench/{row['task']}/{row['question_id']}/{row['paradigm']}/base/{row['sample_index']}"
    steps = [("f-paradigm", row["paradigm"]), ("f-condition", "base"), ("f-level", str(row["level"])), ("f-q", sample)]
    seen = browse(slice_sweep.report / "browser" / "musobench.html", tmp_path, steps)
    assert seen["count"].startswith("1 samples"), seen["count"]
    assert f"paradigm={row['paradigm']}" in seen["hash"] and "condition=base" in seen["hash"]  # the view can be linked
    (card,) = seen["cards"]
    assert card["title"].startswith(f"{row['task']} question {row['question_id']} "), card["title"]
    shown = card["candidates"][: len(expected)]  # turn 1's candidates come first
    assert [c["cls"] for c in shown] == [
        f"cand v-{'cut' if e['verdict'] == 'cut off' else e['verdict']}" for e in expected
    ], shown
    for c, e in zip(shown, expected):
        assert e["text"].strip() in c["text"] and (not e["reason"] or e["reason"] in c["text"]), (
            c,
            e,
        )  # the broken constraint
    # the candidates are marked in the reply
    assert card["marks"] and all(m["cls"].startswith("v-") for m in card["marks"])
    assert seen["images"] == 0  # model output never becomes markup


@needs_chromium
@pytest.mark.slow
@pytest.mark.xdist_group("slice")
def test_a_linked_view_opens_filtered(slice_sweep, tmp_path):
    results = pd.read_parquet(slice_sweep.run("musobench") / "results.parquet")
    n = int(((results.paradigm == "short") & (results.condition == "base")).sum())
    seen = browse(slice_sweep.run("musobench") / RUN_BROWSER, tmp_path, fragment="#paradigm=short&condition=base")
    assert seen["count"].startswith(f"{n} samples"), seen["count"]
    assert len(seen["cards"]) == n and all("/short/base/" in c["id"] for c in seen["cards"])


# --- Overthinking: one strip per trajectory, τ where the prefixes say -------------------------------------------


@needs_chromium
@pytest.mark.slow
@pytest.mark.xdist_group("slice")
def test_overthinking_browser_draws_the_trace_strips(slice_sweep, tmp_path):
    prefixes = pd.read_parquet(slice_sweep.run("overthinking") / "prefixes.parquet")
    keys = ["item_id", "sample_index", "template", "extractor", "granularity"]
    strips = [trace_strip(g) for _, g in prefixes.groupby(keys)]
    seen = browse(slice_sweep.report / "browser" / "overthinking.html", tmp_path)
    assert len(seen["overview"]) == len(strips) and "Trace strips" in seen["text"]
    assert sum(any("tau" in c.split() for c in r) for r in seen["overview"]) == sum(
        s["tau"] is not None for s in strips
    )
    assert sorted(len(r) for r in seen["overview"]) == sorted(len(s["cells"]) for s in strips)  # a cell per prefix
    assert all(r[-1].endswith("end") for r in seen["overview"])  # the end is marked
    failed = sum(c is None for s in strips for c in s["cells"])
    assert sum("failed" in c.split() for r in seen["overview"] for c in r) == failed
    assert all(c["strip"] for c in seen["cards"]) and "forced answer" in seen["text"] and "τ = " in seen["text"]


@needs_chromium
@pytest.mark.slow
@pytest.mark.xdist_group("slice")
def test_noveltybench_browser_shows_the_answers(slice_sweep, tmp_path):
    novelty = pd.read_parquet(slice_sweep.run("musobench-novelty") / "novelty.parquet")
    seen = browse(slice_sweep.report / "browser" / "novelty.html", tmp_path)
    assert len(seen["cards"]) == len(novelty)
    assert sum(c["answers"] for c in seen["cards"]) == int(novelty.n_answers.sum()) and "class 0" in seen["text"]


@needs_chromium
@pytest.mark.slow
@pytest.mark.xdist_group("slice")
def test_noveltybench_cards_say_what_table4_says(slice_sweep, tmp_path):
    "Issue #43: each card's paradigm is its row's, and as many cards read 'scored' as Table 4 counts scored prompts."
    novelty = pd.read_parquet(slice_sweep.run("musobench-novelty") / "novelty.parquet")
    table = novelty_table(novelty)
    table = table[table["source"] == "this study"].groupby("paradigm")["n_scored"].sum()
    seen = browse(slice_sweep.report / "browser" / "novelty.html", tmp_path)
    for paradigm, name in (("short", "Short-CoT"), ("long", "Long-CoT")):
        mine = [c for c in seen["cards"] if f"/{paradigm}/" in c["id"]]
        assert len(mine) == int((novelty.paradigm == paradigm).sum())
        assert all(c["badges"][0] == name and not {"short", "long"} & set(c["badges"]) for c in mine), mine
        assert sum("scored" in c["badges"] for c in mine) == table.get(paradigm, 0), (paradigm, mine)


@needs_chromium
@pytest.mark.slow
@pytest.mark.xdist_group("slice")
def test_a_link_to_a_missing_run_says_so(slice_sweep, tmp_path):
    "A fragment naming a run the page does not have: the page says so and shows every run, not 0 samples."
    results = pd.read_parquet(slice_sweep.run("musobench") / "results.parquet")
    n = int((results.paradigm == "short").sum())
    seen = browse(slice_sweep.report / "browser" / "musobench.html", tmp_path, fragment="#run=nope&paradigm=short")
    assert "no run named “nope”" in seen["notice"] and "showing all" in seen["notice"], seen["notice"]
    assert seen["count"].startswith(f"{n} samples") and n, seen["count"]


# --- untrusted text stays text ----------------------------------------------------------------------------------


@needs_chromium
def test_a_reply_that_is_markup_stays_text(tmp_path):
    evil = '</script><img src=x onerror="document.title=1"><script>document.title=2</script> <b>bold</b>'
    sample = dict(
        id="x/1",
        kind="novelty",
        view="answers",
        facets=dict(run="x", model=evil),
        status=evil,
        outcome="unscored",
        tags=[evil],
        title=evil,
        question=evil,
        scores={"judge": evil},
        answers=[dict(text=evil, cls=0, rating=None)],
    )
    page = write_browser([sample], tmp_path / "site" / "evil.html", title=evil, note=evil)
    seen = browse(page, tmp_path)
    assert seen["images"] == 0 and seen["scripts"] <= 4, seen  # the page's own scripts, its data file and the check
    assert evil in seen["text"] and len(seen["cards"]) == 1


# --- the page's own files, as shipped -----------------------------------------------------------------------------


def test_the_pages_script_and_style_ship_with_the_package():
    "The browser's script, style and frame are package data; the script parses (Node), and every view has a renderer."
    from reasoning_study.browser import page_asset
    from reasoning_study.studies.registry import SAMPLE_VIEWS

    js, css, frame = page_asset("page.js"), page_asset("page.css"), page_asset("page.html")
    assert "{css}" in frame and "{js}" in frame and "{manifest}" in frame and ".card" in css
    assert all(f"{view}: r =>" in js for view in SAMPLE_VIEWS), SAMPLE_VIEWS  # a view the registry allows, drawn
    node = shutil.which("node")
    if node is None:
        pytest.skip("node not found: the script's syntax is checked where Node is installed (the page test runs it)")
    done = subprocess.run([node, "--check", "-"], input=js, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr

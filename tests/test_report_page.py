"""The compiled report as a reader sees it: the report of a slice of every study, opened in headless Chromium.

The slice sweep (`conftest.SLICE`, built once per pytest run) runs each experiment notebook once on the embedded model
with tiny settings, as `make study` does, and compiles the report; this module loads `report.html` in Chromium with a small checking
script appended to a copy of the page: every image must decode, every table-of-contents link must
find its anchor, and the page must hold no code cell, no prompt, no stderr or error output, no
traceback and no warning. `make test` installs Debian's `chromium` where it can (as root); elsewhere
the browser test skips, saying so (the checks of the figures and of re-scoring need no browser).
"""

import json
import re
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("slice")]  # they read the slice sweep (conftest)
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None,
    reason="headless Chromium not found: `make test` installs Debian's chromium package "
    "when run as root (apt-get install chromium); install it to run the report page test",
)

CHECK = """
window.addEventListener("load", () => {
  const images = [...document.images];
  const broken = images.filter(i => !(i.complete && i.naturalWidth > 0)).map(i => (i.getAttribute("src") || "").slice(0, 40));
  const missing = [...document.querySelectorAll('a[href^="#"]')].map(a => decodeURIComponent(a.getAttribute("href").slice(1)))
    .filter(h => h && !document.getElementById(h) && document.getElementsByName(h).length === 0);
  const code = document.querySelectorAll(".jp-CodeCell .jp-InputArea, .jp-CodeCell .jp-InputPrompt, .jp-OutputPrompt, .input_area, .highlight.hl-ipython3").length;
  const errors = document.querySelectorAll('[data-mime-type="application/vnd.jupyter.stderr"], .jp-OutputArea-output.jp-mod-error, .output_error').length;
  const text = document.body.innerText;
  const out = document.createElement("pre"); out.id = "page-check";
  out.textContent = JSON.stringify({images: images.length, broken, missing, code, errors, traceback: text.includes("Traceback"),
    warnings: text.match(/\\b\\w+Warning\\b/g) || [], toc: document.querySelectorAll('a[href^="#"]').length, text});
  document.body.appendChild(out);
});
"""


def browse(page: Path, tmp: Path) -> dict:
    "Load a copy of the page with the checking script in headless Chromium; the script's findings."
    probe = tmp / f"checked-{page.name}"
    probe.write_text(page.read_text().replace("</body>", f"<script>{CHECK}</script></body>"))
    done = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--virtual-time-budget=20000",
            "--dump-dom",
            probe.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    found = re.search(r'<pre id="page-check">(.*?)</pre>', done.stdout, re.S)
    assert found, f"Chromium did not run the page check (exit {done.returncode}): {done.stderr[-2000:]}"
    import html

    return json.loads(html.unescape(found.group(1)))


@pytest.fixture(scope="module")
def report(slice_sweep) -> Path:
    return slice_sweep.report


@needs_chromium
def test_report_page_in_a_browser(report, tmp_path):
    page = report / "report.html"
    assert page.is_file() and (report / "sweep_report.ipynb").is_file()  # the executed notebook stays beside the page
    seen = browse(page, tmp_path)
    drawn = pd.read_csv(report / "figures.csv").query("status == 'drawn'")
    assert seen["images"] >= len(drawn) // 2 and seen["images"] >= 6, seen["images"]
    assert seen["broken"] == [], seen["broken"]
    assert seen["missing"] == [], seen["missing"]  # every link of the contents resolves
    assert seen["code"] == 0 and seen["errors"] == 0, seen
    assert not seen["traceback"] and seen["warnings"] == [], seen["warnings"]
    text = seen["text"]
    assert (
        "Report of sweep slice" in text
        and "5 finished runs" in text
        and "Contents" in text
        and seen["toc"] >= len(drawn)
    )
    for item in ["Figure 2", "Figure 7", "Table 1", "Table 4"]:
        assert item in text
    # captions: the runs and the instances behind them
    assert "From 2 runs: musobench, musobench-novelty." in text and "instance per condition" in text
    assert "small data: n = 1 per condition" in text  # one instance per paradigm and task: said in the caption
    assert "smollm2-135m" in text and "Runs and provenance" in text
    status = pd.read_csv(report / "figures.csv").set_index(["paper", "item"])["status"]
    # beside the paper's rows
    assert status[("MuSoBench", "Table 4")] == "drawn" and "paper (Qwen3-8B)" in text and "small data: n = " in text
    assert (
        status[("Beyond the papers", "Stopping Pareto")] == "drawn"
        and status[("Beyond the papers", "Stopping policies")] == "drawn"
    )
    assert status[("Beyond the papers", "Trace strips")] == "drawn"  # issue 32: one strip per probed trace, sorted by τ
    # issue 32: Table 4's caption counts NoveltyBench prompts, not the MuSoBench instances of its runs
    table4 = text[text.index("MuSoBench Table 4:") :][:600]  # its caption
    assert "prompts per condition" in table4 or "prompt per condition" in table4, table4
    # the sample browsers: linked from the page and its contents
    assert "Samples" in text and seen["toc"] >= len(drawn) + 1
    policies = pd.read_csv(report / "overthinking" / "tables" / "stopping_policies.csv")
    assert {"Actual", "Optimal", "Stopping@K", "Consistency", "Entropy", "Budget"} <= set(policies.policy)


def test_small_data_is_said_on_the_figures_face(report):
    "Every MuSoBench figure of the slice (one instance per condition) carries the firebrick small-data note below its axes."
    import numpy as np
    from PIL import Image

    pngs = sorted((report / "musobench" / "figures").glob("*.png"))
    assert pngs, "no MuSoBench figure drawn"
    for png in pngs:
        with Image.open(png) as im:
            pixels = np.asarray(im.convert("RGB")).astype(int)
        bottom = pixels[-max(12, len(pixels) // 12) :]
        red = (np.abs(bottom - np.array([178, 34, 34])) < 40).all(axis=-1)  # matplotlib's "firebrick"
        assert red.sum() > 20, f"{png.name}: no small-data note at the bottom"


def test_every_run_folder_of_the_slice_rescores_exactly(report):
    "Issue #14's acceptance: `rescore` of every run folder of a sweep reproduces its stored tables (an empty dict: nothing differs)."
    from reasoning_study.cli import rescore_sweep

    assert rescore_sweep(report.parent) == {}

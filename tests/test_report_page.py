"""The compiled report as a reader sees it: the report of a slice of every study, opened in headless Chromium.

The slice sweep (`conftest.SLICE`, built once per pytest run) runs each experiment notebook once on the embedded model
with tiny settings, as `make study` does, and compiles the report; this module loads `report.html` in Chromium with a small checking
script appended to a copy of the page: every image must decode, every table-of-contents link must
find its anchor, and the page must hold no code cell, no prompt, no stderr or error output, no
traceback and no warning. The page and the sample browsers the sweep wrote must also render with the network blocked
and ask it for nothing: every request they make, seen in Chromium's network log and in the page's own resource timing,
must stay on `file://` (or `data:`). `make test` installs Debian's `chromium` where it can (as root); elsewhere
the browser tests skip, saying so (the checks of the figures and of re-scoring need no browser).
"""

import html
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


def checked_dom(probe: Path, pre_id: str, what: str, *flags: str):
    "Load `probe` in headless Chromium (with `flags`); the JSON its script left in `<pre id=pre_id>`."
    done = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            *flags,
            "--virtual-time-budget=20000",
            "--dump-dom",
            probe.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    found = re.search(rf'<pre id="{pre_id}">(.*?)</pre>', done.stdout, re.S)
    assert found, f"Chromium did not run {what} (exit {done.returncode}): {done.stderr[-2000:]}"
    return json.loads(html.unescape(found.group(1)))


def browse(page: Path, tmp: Path) -> dict:
    "Load a copy of the page with the checking script in headless Chromium; the script's findings."
    probe = tmp / f"checked-{page.name}"
    probe.write_text(page.read_text().replace("</body>", f"<script>{CHECK}</script></body>"))
    return checked_dom(probe, "page-check", "the page check")


# --- no network: the page and the browsers are read offline, from file:// --------------------------------------------

# the network is cut two ways (every host name fails to resolve; every request goes to a proxy where nothing listens),
# so a page that needs a CDN renders as it would offline; the requests it tries are still logged
NO_NETWORK = ["--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-server=127.0.0.1:9", "--disable-background-networking"]

# after the page loaded and its scripts had virtual time to fetch what they fetch: every resource the page asked for
RESOURCES = """
window.addEventListener("load", () => setTimeout(() => {
  const out = document.createElement("pre"); out.id = "net-check";
  out.textContent = JSON.stringify(performance.getEntriesByType("resource").map(e => e.name));
  document.body.appendChild(out);
}, 3000));
"""


def page_requests(net_log: Path) -> set[str]:
    """The URLs the page asked the network stack for, from Chromium's `--log-net-log`: requests made for a `file://`
    frame (its network isolation key or initiator), not the browser's own background traffic (updates, time, sign-in)."""
    text = net_log.read_text()
    try:
        log = json.loads(text)
    except json.JSONDecodeError:  # a log Chromium did not close
        log = json.loads(text.rstrip().rstrip(",") + "]}")
    requested: dict[int, str] = {}
    from_page: set[int] = set()
    for event in log["events"]:
        params, source = event.get("params") or {}, event["source"]["id"]
        if "url" in params:
            requested.setdefault(source, params["url"])
        if "file://" in str(params.get("network_isolation_key", "")) or params.get("initiator") in ("null", "file://"):
            from_page.add(source)
    return {requested[s] for s in from_page if s in requested}


def requests_leaving_file(page: Path, tmp: Path) -> list[str]:
    """Open a copy of the page (its relative links still resolve against the page's folder) in headless Chromium with the
    network blocked; every URL it requested that is neither `file:` nor `data:`, from the network log and the page's own
    resource timing (either alone would do today; both, so a change in one cannot hide a request)."""
    probe, net_log = tmp / f"offline-{page.name}", tmp / f"net-{page.stem}.json"
    base = f'<base href="{page.parent.as_uri()}/"><script>performance.setResourceTimingBufferSize(100000)</script>'
    text = re.sub(r"<head[^>]*>", lambda m: m.group(0) + base, page.read_text(), count=1)
    probe.write_text(text.replace("</body>", f"<script>{RESOURCES}</script></body>"))
    found = checked_dom(
        probe, "net-check", f"the network check on {page.name}", *NO_NETWORK, f"--log-net-log={net_log}"
    )
    seen = set(found) | page_requests(net_log)
    return sorted(u for u in seen if not u.startswith(("file:", "data:")))


@needs_chromium
def test_the_network_check_sees_a_request_leaving_file(tmp_path):
    "The check itself: a page that asks a CDN for a script, an image and a fetch is caught on each, though all fail."
    page = tmp_path / "online.html"
    page.write_text(
        '<html><head><script src="https://cdn.example.org/lib.js"></script></head><body>'
        '<img src="http://img.example.org/a.png"><script>fetch("https://api.example.org/x").catch(() => 0)</script>'
        "</body></html>"
    )
    wanted = {"https://cdn.example.org/lib.js", "http://img.example.org/a.png", "https://api.example.org/x"}
    assert wanted <= set(requests_leaving_file(page, tmp_path))


@needs_chromium
def test_report_and_browsers_need_no_network(slice_sweep, tmp_path):
    "Issue #43: the report page and every sample browser of the slice sweep render from file:// with the network blocked."
    pages = [slice_sweep.report / "report.html", *sorted((slice_sweep.report / "browser").glob("*.html"))]
    pages += sorted(slice_sweep.folder.glob("*/browser.html"))  # each run folder's own browser
    # the report, its three browsers (musobench, novelty, overthinking), the runs' three
    assert len(pages) >= 1 + 3 + 3, pages
    leaving = {str(p.relative_to(slice_sweep.folder)): requests_leaving_file(p, tmp_path) for p in pages}
    assert not any(leaving.values()), {p: urls for p, urls in leaving.items() if urls}


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

"""The compiled report as a reader sees it: the report of a slice of every study, opened in headless Chromium.

The slice sweep (`conftest.SLICE`, built once per pytest run) runs each experiment notebook once on the embedded model
with tiny settings, as `make study` does, and compiles the report; this module loads `report.html` in Chromium with a small checking
script appended to a copy of the page: every image must decode, every table-of-contents link must
find its anchor, and the page must hold no code cell, no prompt, no stderr or error output, no
traceback and no warning. The page and the sample browsers the sweep wrote must also render with the network blocked
and ask it for nothing: every request they make, seen in Chromium's network log and in the page's own resource timing,
must stay on `file://` (or `data:`). The same offline launch (one per page) reads the page as issue #43's reader did, at
1,400 px (a sample browser after its cards rendered, page by page), and the acceptance fails, listing every offender, on:
nan / None / NaN or a Python repr in visible text, an interval printed with equal bounds (`x [a, a]`), a table wider than
the window without a sideways scroll of its own, an item figures.csv calls drawn with a blank table or an empty panel (the
figures' `.drawn.json` sidecars), and a catalogue count that differs between the page, figures.md, the README and
outputs/bench/study_figures.md. Each check is tried first on a hand-written page with its defect. `make test` installs
Debian's `chromium` where it can (as root); elsewhere
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


# --- what the reader sees: one offline launch per page, every check from one injected script ----------------------------

# The reader's window: 1,400 px wide (a laptop's browser), as issue #43 read the pages.
WINDOW = ["--window-size=1400,1000", "--hide-scrollbars"]

# In a sample browser the model's own words are quoted as written (a reply may well say "None of the above"): they are
# exempt from the raw-value check; every label, badge, score table and caption around them is not.
BROWSER_VERBATIM = "#samples pre, #samples mark, #samples .cands"

# The reader check. A sample browser (a page with `#count`, see reasoning_study/data/browser/page.js) loads its samples
# lazily: the check waits until the count line says "N samples · page p of q" (clicking "load them anyway" where the
# browser asks first), checks that page, then clicks "next ▶" through every page (up to MAX_PAGES) and checks each.
# Three checks, each a function over the page as rendered:
#   rawValues   visible text (table cells, captions, labels, dropdown options) holding nan / NaN / None / NaT / <NA> or
#               a Python repr (`Budget(utterances=None, ...)`, `np.float64(`, `{'`, `[np.`, `['`, `<object`, `Timestamp(`)
#   zeroWidth   an interval printed with equal bounds, `x [a, a]` (the honest forms are `x [all units equal]`, `x [n/a]`)
#   wideTables  a visible table reaching past the window's right edge with no sideways scroll of its own (the table or an
#               ancestor below <body> with overflow-x auto/scroll that fits the window)
# and the catalogue count sentence(s) of the page ("N of the papers' M figures and tables drawn").
READER = r"""
(() => {
  const VERBATIM = %(verbatim)s, MAX_PAGES = %(max_pages)d;
  const SKIP = "script, style, noscript, template, #reader-check, #net-check, #page-check";
  const visible = e => e.checkVisibility({visibilityProperty: true, opacityProperty: true, contentVisibilityAuto: true});
  const squash = s => s.replace(/\s+/g, " ").trim();
  const heads = () => [...document.querySelectorAll("h1, h2, h3, h4")];
  function under(node, hs) {  // the text of the last heading before `node`: where the offender is
    let at = "(page top)";
    for (const h of hs) if (h === node || h.compareDocumentPosition(node) & Node.DOCUMENT_POSITION_FOLLOWING) at = squash(h.textContent).slice(0, 80);
    return at;
  }
  function blocks() {  // every block (not inline) with its own visible text: its text nodes and its inline elements'
    const own = new Map(), walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
    for (let t = walk.nextNode(); t; t = walk.nextNode()) {
      const p = t.parentElement;
      if (!t.data.trim() || !p || p.closest(SKIP) || (VERBATIM && p.closest(VERBATIM)) || !visible(p)) continue;
      let b = p;
      while (b.parentElement && b !== document.body && /^(inline|contents)/.test(getComputedStyle(b).display)) b = b.parentElement;
      if (!own.has(b)) own.set(b, []);
      own.get(b).push(t.data);
    }
    const out = [...own].map(([b, parts]) => [b, squash(parts.join(""))]);
    for (const s of document.querySelectorAll("select")) if (visible(s)) out.push([s, [...s.options].map(o => o.text).join(" | ")]);
    return out;
  }
  const snippet = (text, i, n) => squash(text.slice(Math.max(0, i - 40), i + n + 40));
  const RAW = [
    [/\b(?:nan|NaN|NaT|None)\b|<NA>/g, "missing value"],
    [/\bnp\.\w+\(|\[np\./g, "numpy repr"],
    [/\{'/g, "dict repr"],
    [/\['[^'\]]*'(?:, |\])/g, "list repr"],
    [/<[\w.]*\s*object\b/g, "object repr"],
    [/\b(?:Timestamp|Timedelta|Decimal|PosixPath|array|dtype)\(/g, "pandas/numpy repr"],
    [/(?<![\w@])[A-Z]\w*\([a-z_]\w*=/g, "dataclass repr"],
  ];
  // "None of the runs failed.": the English word, at a sentence's start and followed by a lower-case word
  const english = (text, i) => /^None [a-z]/.test(text.slice(i, i + 6)) && /(^|[.!?:]\s+)$/.test(text.slice(0, i));
  function rawValues(units, hs) {
    const out = [];
    for (const [el, text] of units) for (const [re, kind] of RAW) for (const m of text.matchAll(re)) {
      if (m[0] === "None" && english(text, m.index)) continue;
      out.push({kind, match: m[0], text: snippet(text, m.index, m[0].length), under: under(el, hs)});
    }
    return out;
  }
  const NUM = "-?\\d+(?:\\.\\d+)?";
  const INTERVAL = new RegExp("(" + NUM + ")\\s*%%?\\s*\\[\\s*(" + NUM + ")\\s*%%?\\s*,\\s*(" + NUM + ")\\s*%%?\\s*\\]", "g");
  function zeroWidth(units, hs) {
    const out = [];
    for (const [el, text] of units) for (const m of text.matchAll(INTERVAL))
      if (parseFloat(m[2]) === parseFloat(m[3])) out.push({match: m[0], text: snippet(text, m.index, m[0].length), under: under(el, hs)});
    return out;
  }
  function wideTables(hs) {
    const page = document.documentElement.clientWidth, out = [];
    for (const t of document.querySelectorAll("table")) {
      if (!visible(t) || t.parentElement.closest("table")) continue;
      const r = t.getBoundingClientRect();
      if (r.right <= page + 1 && r.width <= page + 1) continue;
      let own = null;
      for (let e = t; e && e !== document.body && e !== document.documentElement; e = e.parentElement) {
        const x = getComputedStyle(e).overflowX;
        if ((x === "auto" || x === "scroll") && e.clientWidth <= page && e.getBoundingClientRect().right <= page + 1) { own = e; break; }
      }
      const found = {width: Math.round(r.width), right: Math.round(r.right), columns: t.rows.length ? t.rows[0].cells.length : 0,
        head: squash(t.rows.length ? t.rows[0].innerText : "").slice(0, 80), under: under(t, hs)};
      if (own) seen.scrolling.push({...found, scroller: own.tagName.toLowerCase() + (own.className ? "." + String(own.className).split(" ")[0] : "")});
      else out.push(found);
    }
    return out;
  }
  const seen = {width: 0, pages: 0, raw: [], zero_width: [], wide_tables: [], scrolling: [], counts: []};
  const key = o => JSON.stringify([o.match || o.head, o.text || o.width, o.under]);
  function add(list, items) {  // a browser's later pages repeat its filters and notes: what an earlier page showed is listed once
    const before = new Set(list.map(key));
    list.push(...items.filter(o => !before.has(key(o))));
  }
  function check() {
    const hs = heads(), units = blocks();
    add(seen.raw, rawValues(units, hs)); add(seen.zero_width, zeroWidth(units, hs)); add(seen.wide_tables, wideTables(hs));
    if (!seen.pages) for (const m of document.body.innerText.matchAll(/(\d+) of the papers' (\d+) figures and tables drawn/g)) seen.counts.push(m[0]);
    seen.pages += 1;
  }
  function finish(note) {
    seen.width = document.documentElement.clientWidth; if (note) seen.note = note;
    const out = document.createElement("pre"); out.id = "reader-check"; out.style.display = "none";
    out.textContent = JSON.stringify(seen); document.body.appendChild(out);
  }
  const count = document.getElementById("count");
  if (!count) return window.addEventListener("load", () => setTimeout(() => { check(); finish(); }, 500));
  let waited = 0;
  (function poll() {  // a sample browser: its cards render once their data files loaded
    const anyway = document.getElementById("load-anyway");
    if (anyway) anyway.click();
    if (!/ samples? · page \d+ of \d+/.test(count.textContent)) {
      if ((waited += 100) > 15000) return finish("the samples never rendered: " + count.textContent.slice(0, 200));
      return setTimeout(poll, 100);
    }
    for (let p = 0; p < MAX_PAGES; p++) {
      check();
      const next = [...count.querySelectorAll("button")].find(b => b.textContent.includes("next"));
      if (!next || next.disabled) return finish();
      next.click();
    }
    finish("checked the first " + MAX_PAGES + " pages only");
  })();
})();
"""


# the copy's head: its relative links resolve against the page's own folder; a fragment the page writes into its address
# (the sample browser keeps its filters there) stays on the copy's own address, not the base's, as it would on the page
BASE = """<base href="%s/"><script>performance.setResourceTimingBufferSize(100000);
const rsReplaceState = history.replaceState.bind(history);
history.replaceState = (s, t, u) => rsReplaceState(s, t, typeof u === "string" && u.startsWith("#") ? location.href.split("#")[0] + u : u);
</script>"""


def seen_offline(page: Path, tmp: Path, verbatim: str = "", max_pages: int = 200) -> dict:
    """Open a copy of the page (its relative links still resolve against the page's folder) in headless Chromium, 1,400 px
    wide, with the network blocked: one launch for every check. `leaving`: every URL it requested that is neither `file:`
    nor `data:`, from the network log and the page's own resource timing (either alone would do today; both, so a change
    in one cannot hide a request); `reader`: what the READER script found (quoted model text under `verbatim` exempt)."""
    probe, net_log = tmp / f"offline-{page.name}", tmp / f"net-{page.stem}.json"
    text = re.sub(r"<head[^>]*>", lambda m: m.group(0) + BASE % page.parent.as_uri(), page.read_text(), count=1)
    reader = READER % dict(verbatim=json.dumps(verbatim or None), max_pages=max_pages)
    probe.write_text(text.replace("</body>", f"<script>{RESOURCES}</script><script>{reader}</script></body>"))
    done = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", *WINDOW, *NO_NETWORK, f"--log-net-log={net_log}",
         "--virtual-time-budget=30000", "--dump-dom", probe.as_uri()],
        capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    found = {
        pre: re.search(rf'<pre id="{pre}"[^>]*>(.*?)</pre>', done.stdout, re.S) for pre in ("net-check", "reader-check")
    }
    for pre, hit in found.items():
        assert hit, (
            f"Chromium did not run the {pre} script on {page.name} (exit {done.returncode}): {done.stderr[-2000:]}"
        )
    seen = set(json.loads(html.unescape(found["net-check"].group(1)))) | page_requests(net_log)
    return {
        "leaving": sorted(u for u in seen if not u.startswith(("file:", "data:"))),
        "reader": json.loads(html.unescape(found["reader-check"].group(1))),
    }


def requests_leaving_file(page: Path, tmp: Path) -> list[str]:
    "Every URL the page, opened offline from a copy, asked for that is neither `file:` nor `data:` (`seen_offline`)."
    return seen_offline(page, tmp)["leaving"]


# --- the checks: each turns what a page showed (or what the report folder holds) into a list of offenders -------------


def unrendered(reader: dict) -> list[str]:
    "A sample browser whose samples never rendered (its checks would pass on an empty page): the browser's count line."
    return [reader["note"]] if reader.get("note", "").startswith("the samples never rendered") else []


def raw_values(reader: dict) -> list[str]:
    """Check a: visible text (a table cell, a caption, a label, a dropdown's options) that shows nan / NaN / None / NaT /
    <NA> or a Python repr (`Budget(utterances=None, share=0.25)`, `np.float64(`, `{'`, `[np.`, `<object`, `Timestamp(`)."""
    return [f"{o['under']}: {o['text']!r} ({o['kind']}: {o['match']!r})" for o in reader["raw"]]


def zero_width_intervals(reader: dict) -> list[str]:
    """Check b: an interval printed with equal bounds, `x [a, a]`, which reads as certainty; the project's honest forms
    are `x [all units equal]` and `x [n/a]` (`reasoning_study.metrics.intervals.format_interval`)."""
    return [f"{o['under']}: {o['text']!r}" for o in reader["zero_width"]]


def tables_off_the_page(reader: dict) -> list[str]:
    """Check c: a visible table that reaches past the 1,400 px window with no sideways scroll of its own (neither the table
    nor an ancestor below <body> with overflow-x auto/scroll that fits the window): the reader cannot see its right side."""
    return [
        f"{o['under']}: {o['columns']} columns, {o['width']} px wide, right edge at {o['right']} px ({o['head']!r})"
        for o in reader["wide_tables"]
    ]


def report_file(report: Path, name: str) -> Path:
    "A file figures.csv lists, in `report` (figures.csv keeps the absolute paths of the folder it was compiled in)."
    path = Path(name)
    if not path.is_absolute():
        return report / path
    if not path.exists() and "/report/" in name:  # a report folder that moved: its own copy of the file
        return report / name.rsplit("/report/", 1)[1]
    return path


def markdown_tables(text: str) -> list[list[list[str]]]:
    "The body rows (cells, stripped) of each pipe table in a markdown text: the header and its `|---|` line left out."
    tables, rows, header = [], None, False
    for line in text.splitlines() + [""]:
        if line.lstrip().startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if rows is None:
                rows, header = [], True
            elif header and all(re.fullmatch(r":?-+:?", c) for c in cells if c):
                header = False
            elif not header:
                rows.append(cells)
        elif rows is not None:
            tables.append(rows)
            rows = None
    return tables


BLANK = {"", "nan", "NaN", "None", "<NA>", "—", "-"}


def empty_table(path: Path) -> bool:
    """A table with no value: every cell of every row blank (its first column, the row labels, aside, unless it is the only
    one). A `.md` is read as its pipe tables (any one blank counts); a `.csv` as a frame whose first column labels rows."""
    if path.suffix == ".md":
        tables = markdown_tables(path.read_text())
        return not tables or any(all(c in BLANK for row in rows for c in row[len(row) > 1 :]) for rows in tables)
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    frame = frame.iloc[:, 1:] if frame.shape[1] > 1 else frame
    return frame.empty or frame.isin(BLANK).all(axis=None)


def sidecar(png: Path) -> Path:
    "The Drawer's record of what a figure holds: figures/<name>.png -> figures/<name>.drawn.json."
    return png.with_name(png.stem + ".drawn.json")


def empty_drawn_items(report: Path) -> tuple[list[str], list[str]]:
    """Check d: every item figures.csv calls drawn has data in each of its panels. A table (`.md`, or a `.csv` without a
    `.md` beside it) must hold a value; a figure's PNG must have its `.drawn.json` sidecar with no panel `"empty": true`.
    Returns (offenders, PNGs without a sidecar)."""
    offenders, no_sidecar = [], []
    for row in pd.read_csv(report / "figures.csv").query("status == 'drawn'").itertuples():
        what, files = f"{row.paper} {row.item}", [report_file(report, f) for f in json.loads(row.files)]
        if not files:
            offenders.append(f"{what}: drawn, but figures.csv lists no file")
        mds = {f.with_suffix(".csv") for f in files if f.suffix == ".md"}
        for f in files:
            if f.suffix in (".md", ".csv", ".png") and not f.is_file():
                offenders.append(f"{what}: {f.name} is missing")
            elif f.suffix == ".md" or (f.suffix == ".csv" and f not in mds):
                if empty_table(f):
                    offenders.append(f"{what}: every value cell of {f.name} is blank")
            elif f.suffix == ".png":
                if not sidecar(f).is_file():
                    no_sidecar.append(f"{what}: {f.name}")
                    continue
                panels = json.loads(sidecar(f).read_text()).get("panels")
                if not panels:
                    offenders.append(f"{what}: {sidecar(f).name} names no panel")
                for p in panels or []:
                    if p.get("empty"):
                        offenders.append(f"{what}: {f.name} panel {p.get('title')!r} is empty")
    return offenders, no_sidecar


# check e: the catalogue's count, one sentence produced by one function, quoted on the page, in figures.md and the README
COUNT = re.compile(r"(\d+) of the papers' (\d+) figures and tables drawn")
PAPER_ITEM = re.compile(r"^[-*] \*\*(.+?)\*\* \(.*\): (drawn|not drawn|no data)\b")


def catalogue_counts(figures_md: str) -> tuple[int, int]:
    """(drawn, listed): the items figures.md lists under the papers' sections (`## MuSoBench`, `## Overthinking`, not
    `## Beyond the papers` nor `## Also ...`), and how many of them it calls drawn."""
    drawn = listed = 0
    papers = False
    for line in figures_md.splitlines():
        if line.startswith("## "):
            papers = not re.match(r"## (Beyond the papers|Also)\b", line)
        elif papers and (item := PAPER_ITEM.match(line.strip())):
            listed += 1
            drawn += item.group(2) == "drawn"
    return drawn, listed


def count_disagreements(page: list[str], figures_md: str, readme: str, study_figures: str) -> list[str]:
    """Check e: every statement of the catalogue count agrees. The page's sentence(s) == the slice's figures.md sentence;
    each figures.md's sentence == the count of its own item list; the README's sentence appears verbatim in the default
    study's figures.md (outputs/bench/study_figures.md, copied there by `make study`)."""
    out = []
    for name, text in [("the slice's figures.md", figures_md), ("outputs/bench/study_figures.md", study_figures)]:
        if not text:
            continue  # a missing file: said by the caller
        said = {m.group(0) for m in COUNT.finditer(text)}
        if len(said) != 1:
            out.append(f"{name} states {len(said)} different count sentences: {sorted(said)}")
            continue
        m = COUNT.search(text)
        if (int(m.group(1)), int(m.group(2))) != catalogue_counts(text):
            drawn, listed = catalogue_counts(text)
            out.append(f"{name} says {m.group(0)!r} but lists {drawn} drawn of {listed} items")
    md = {m.group(0) for m in COUNT.finditer(figures_md)}
    if not page:
        out.append("the page states no count sentence")
    elif set(page) != md:
        out.append(f"the page says {sorted(set(page))}, the slice's figures.md {sorted(md)}")
    readme_says = [m.group(0) for m in COUNT.finditer(readme)]
    if not readme_says:
        out.append('README.md states no count sentence ("N of the papers\' M figures and tables drawn")')
    for sentence in readme_says:
        if sentence not in study_figures:
            out.append(f"README.md says {sentence!r}, outputs/bench/study_figures.md does not")
    return out


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


# --- the checks, tried on hand-written pages: each catches its defect and passes its honest form ----------------------

DEFECTS = """<html><head><style>td, th {padding: 2px 6px}</style></head><body>
<h2>Raw values</h2>
<table><tr><th>a</th><th>b</th></tr>
<tr><td>nan</td><td>None</td></tr><tr><td>Budget(utterances=None, share=0.25)</td><td>np.float64(0.5)</td></tr>
<tr><td>{'k': 1}</td><td>[np.int64(1)]</td></tr><tr><td>&lt;object object at 0x7f1&gt;</td><td>Timestamp('2024-01-01')</td></tr>
<tr><td>41.1 [38.2, 44.0]</td><td style="display: none">NaN</td></tr></table>
<p>None of the runs failed. Stopping@K(k=2) stops early.</p><p>ECE <b>NaN</b> beside the legend</p>
<details><summary>more</summary><p>None</p></details>
<h2>Intervals</h2>
<p>41.1 [41.1, 41.1] and 0.40 [0.4, 0.40] and 41.1 [38.2, 44.0] and 0.4 [all units equal] and 0.4 [n/a]</p>
<h2>Wide tables</h2>
<table id="t1" style="width: 2000px"><tr><td>runs off the page</td></tr></table>
<div style="overflow-x: auto"><table style="width: 2000px"><tr><td>scrolls in its own box</td></tr></table></div>
<div style="overflow-x: auto; width: 2100px"><table style="width: 2000px"><tr><td>its box runs off too</td></tr></table></div>
<table style="width: 900px"><tr><td>fits</td></tr></table>
<p>5 finished runs: 3 of the papers' 9 figures and tables drawn.</p>
</body></html>"""


@needs_chromium
def test_the_reader_checks_catch_each_defect(tmp_path):
    "Checks a-c on a page with each defect and each honest form beside it: every defect listed, nothing else."
    page = tmp_path / "defects.html"
    page.write_text(DEFECTS)
    reader = seen_offline(page, tmp_path)["reader"]
    assert (
        reader["width"] == 1400
        and reader["pages"] == 1
        and reader["counts"] == ["3 of the papers' 9 figures and tables drawn"]
    )
    raw = raw_values(reader)
    flagged = {o["text"] for o in reader["raw"]}
    assert flagged == {
        "nan",
        "None",
        "Budget(utterances=None, share=0.25)",
        "np.float64(0.5)",
        "{'k': 1}",
        "[np.int64(1)]",
        "<object object at 0x7f1>",
        "Timestamp('2024-01-01')",
        "ECE NaN beside the legend",  # the <b> is read with its line; the hidden cell, the closed <details> are not
    }, raw
    assert all(o["under"] == "Raw values" for o in reader["raw"]) and len(raw) == 10  # Budget(...): a repr and a None
    assert len(zero_width_intervals(reader)) == 2 and all(
        o.startswith("Intervals: ") for o in zero_width_intervals(reader)
    )
    assert [o["match"] for o in reader["zero_width"]] == ["41.1 [41.1, 41.1]", "0.40 [0.4, 0.40]"]
    wide = tables_off_the_page(reader)
    assert len(wide) == 2 and "2000 px wide" in wide[0] and "'runs off the page'" in wide[0], wide
    assert "'its box runs off too'" in wide[1]
    assert [o["head"] for o in reader["scrolling"]] == ["scrolls in its own box"]


BROWSER = """<html><body><h1>Samples</h1><div id="count"></div><div id="samples"></div><script>
const count = document.getElementById("count"), samples = document.getElementById("samples");
const PAGES = [
  '<h2>sample 1</h2><table><tr><td>0.5</td></tr></table><pre>None of the above, said the model</pre>',
  '<h2>sample 2</h2><table><tr><td>score None</td></tr></table><p>3.0 [3.0, 3.0]</p>',
];
function show(p) {
  samples.innerHTML = PAGES[p - 1];
  count.innerHTML = '2 samples · page ' + p + ' of 2 <span class="pager"><button>◀ previous</button>' +
    '<button id="next"' + (p === 2 ? ' disabled' : '') + '>next ▶</button></span>';
  count.querySelector("#next").onclick = () => show(p + 1);
}
count.innerHTML = 'pick a model first, or <button id="load-anyway">load them anyway</button>';
document.getElementById("load-anyway").onclick = () => { count.textContent = "loading 2 samples…"; setTimeout(() => show(1), 400); };
</script></body></html>"""


@needs_chromium
def test_the_reader_checks_wait_for_a_browser_and_read_every_page(tmp_path):
    """A browser that asks before loading and renders its cards late: the checks click "load them anyway", wait for the
    cards, read every page (the model's own words exempt); one that never renders is said."""
    page = tmp_path / "browser.html"
    page.write_text(BROWSER)
    reader = seen_offline(page, tmp_path, "#samples pre")["reader"]
    assert reader["pages"] == 2 and not unrendered(reader), reader
    assert raw_values(reader) == ["sample 2: 'score None' (missing value: 'None')"]
    assert zero_width_intervals(reader) == ["sample 2: '3.0 [3.0, 3.0]'"]
    never = tmp_path / "never.html"
    never.write_text(BROWSER.replace("setTimeout(() => show(1), 400)", "0"))
    reader = seen_offline(never, tmp_path, "#samples pre")["reader"]
    assert reader["pages"] == 0 and unrendered(reader) == ["the samples never rendered: loading 2 samples…"], reader


def test_the_empty_panel_check(tmp_path):
    "Check d on a hand-written report folder: a blank table, a figure with an empty panel, a figure with no sidecar."
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "full.md").write_text("| Model | V | C |\n|:--|:--|:--|\n| m | 1.0 | |\n")
    (tmp_path / "t" / "blank.md").write_text(
        "|    | b / V | b / C |\n|:---|:---|:---|\n| m  |   |   |\n| n | nan | |\n"
    )
    (tmp_path / "t" / "blank.csv").write_text("Model,V\nm,\n")  # beside its .md: the .md is read
    (tmp_path / "t" / "only.csv").write_text("Model,V,C\nm,,\n")
    (tmp_path / "t" / "one.md").write_text("| example |\n|:--|\n| - m / q: ✓C ✗D |\n")  # one column: its values
    for name, panels in [("ok", [False, False]), ("half", [False, True]), ("bare", None)]:
        (tmp_path / f"{name}.png").write_bytes(b"png")
        if panels is not None:
            sidecar(tmp_path / f"{name}.png").write_text(
                json.dumps({"panels": [{"title": f"({i})", "empty": e} for i, e in enumerate(panels)], "unit": "x"})
            )
    rows = [
        ("Table 1", ["t/full.md"]),
        ("Table 2", ["t/blank.csv", "t/blank.md"]),
        ("Table 3", ["t/only.csv"]),
        ("Table 5", ["t/one.md"]),
        ("Figure 1", ["ok.png", "ok.pdf"]),
        ("Figure 2", ["half.png"]),
        ("Figure 3", ["bare.png"]),
        ("Figure 4", ["gone.png"]),
    ]
    pd.DataFrame(
        [dict(paper="P", item=i, status="drawn", files=json.dumps(f)) for i, f in rows]
        + [dict(paper="P", item="Figure 5", status="not drawn", files=json.dumps(["half.png"]))]
    ).to_csv(tmp_path / "figures.csv", index=False)
    offenders, no_sidecar = empty_drawn_items(tmp_path)
    assert offenders == [
        "P Table 2: every value cell of blank.md is blank",
        "P Table 3: every value cell of only.csv is blank",
        "P Figure 2: half.png panel '(1)' is empty",
        "P Figure 4: gone.png is missing",
    ], offenders
    assert no_sidecar == ["P Figure 3: bare.png"]


def test_the_count_check():
    "Check e on hand-written texts: agreeing counts pass; each kind of disagreement is named."
    md = (
        "# Figures\n\n5 runs: 2 of the papers' 3 figures and tables drawn, and 1 beyond the papers.\n\n## MuSoBench\n\n"
        "- **Figure 1** (a): drawn; x\n- **Table 1** (b (c)): not drawn; why\n\n## Overthinking\n\n"
        "- **Figure 2** (d): drawn; y\n\n## Beyond the papers\n\n- **Stopping** (e): drawn; z\n\n## Also written\n\n- w\n"
    )
    sentence = "2 of the papers' 3 figures and tables drawn"
    readme = f"Its report draws {sentence} (see figures.md)."
    assert catalogue_counts(md) == (2, 3)
    assert count_disagreements([sentence], md, readme, md) == []
    assert count_disagreements([sentence, sentence], md, readme, md) == []  # stated twice, the same
    wrong = md.replace("Figure 2** (d): drawn", "Figure 2** (d): not drawn")
    assert count_disagreements([sentence], md, readme, wrong) == [
        f"outputs/bench/study_figures.md says {sentence!r} but lists 1 drawn of 3 items"
    ]
    assert count_disagreements(["3 of the papers' 3 figures and tables drawn"], md, readme, md) == [
        f"the page says [\"3 of the papers' 3 figures and tables drawn\"], the slice's figures.md [{sentence!r}]"
    ]
    assert count_disagreements([], md, "Its report draws 32 of the papers' figures and tables", md) == [
        "the page states no count sentence",
        'README.md states no count sentence ("N of the papers\' M figures and tables drawn")',
    ]
    other = md.replace(sentence, "1 of the papers' 3 figures and tables drawn").replace(
        "Figure 1** (a): drawn", "Figure 1** (a): no data"
    )
    assert count_disagreements([sentence], md, readme, other) == [
        f"README.md says {sentence!r}, outputs/bench/study_figures.md does not"
    ]


# --- the slice sweep's pages as a reader sees them: one offline launch per page, every check read from it ------------


@pytest.fixture(scope="module")
def offline_pages(slice_sweep, tmp_path_factory) -> dict[str, dict]:
    """The slice's report page, its sample browsers and each run folder's own browser, each opened once offline at 1,400 px
    (`seen_offline`): relative path -> {"leaving": [...], "reader": {...}}."""
    pages = [slice_sweep.report / "report.html", *sorted((slice_sweep.report / "browser").glob("*.html"))]
    pages += sorted(slice_sweep.folder.glob("*/browser.html"))  # each run folder's own browser
    # the report, its three browsers (musobench, novelty, overthinking), the runs' three
    assert len(pages) >= 1 + 3 + 3, pages
    tmp = tmp_path_factory.mktemp("offline")
    seen = {}
    for i, page in enumerate(pages):
        (tmp / str(i)).mkdir()
        verbatim = "" if page.name == "report.html" else BROWSER_VERBATIM
        seen[str(page.relative_to(slice_sweep.folder))] = seen_offline(page, tmp / str(i), verbatim)
    return seen


def offenders(offline_pages: dict, check) -> dict[str, list[str]]:
    "Each page's offenders under `check` (pages with none left out)."
    return {page: found for page, seen in offline_pages.items() if (found := check(seen["reader"]))}


@needs_chromium
def test_report_and_browsers_need_no_network(offline_pages):
    "Issue #43: the report page and every sample browser of the slice sweep render from file:// with the network blocked."
    leaving = {page: seen["leaving"] for page, seen in offline_pages.items() if seen["leaving"]}
    assert not leaving, leaving


@needs_chromium
def test_the_browsers_render_their_samples(offline_pages):
    "Every sample browser renders its cards offline (else the checks below would read an empty page), at 1,400 px."
    assert {seen["reader"]["width"] for seen in offline_pages.values()} == {1400}
    assert offenders(offline_pages, unrendered) == {}
    assert all(seen["reader"]["pages"] >= 1 for seen in offline_pages.values())


@needs_chromium
def test_no_raw_value_on_the_pages(offline_pages):
    "Issue #43 acceptance (a): no nan / None / NaN or Python repr in visible text of the report or a browser."
    assert offenders(offline_pages, raw_values) == {}


@needs_chromium
def test_no_zero_width_interval_on_the_pages(offline_pages):
    "Issue #43 acceptance (b): no interval printed as `x [a, a]`."
    assert offenders(offline_pages, zero_width_intervals) == {}


@needs_chromium
def test_no_table_wider_than_the_page_without_its_own_scroll(offline_pages):
    "Issue #43 acceptance (c): every table fits the 1,400 px window or scrolls sideways in a box that does."
    assert offenders(offline_pages, tables_off_the_page) == {}


def test_no_drawn_item_with_an_empty_panel(slice_sweep):
    "Issue #43 acceptance (d): each item figures.csv calls drawn has data in every panel (tables, and figures' sidecars)."
    found, no_sidecar = empty_drawn_items(slice_sweep.report)
    drawn_pngs = [
        f
        for files in pd.read_csv(slice_sweep.report / "figures.csv").query("status == 'drawn'").files
        for f in json.loads(files)
        if f.endswith(".png")
    ]
    if len(no_sidecar) < len(drawn_pngs):  # the Drawer writes sidecars: every drawn figure must have one
        found += [f"{item}: no .drawn.json sidecar" for item in no_sidecar]
    assert found == [], found
    if drawn_pngs and len(no_sidecar) == len(drawn_pngs):
        pytest.skip(
            f"tables checked; the {len(drawn_pngs)} drawn figures' panels not checked: no figure has its "
            "<name>.drawn.json sidecar yet (the Drawer writes it)"
        )


@needs_chromium
def test_the_counts_agree(offline_pages, slice_sweep):
    "Issue #43 acceptance (e): one catalogue count, quoted alike by the page, figures.md, the README and the study's figures.md."
    study = ROOT / "outputs" / "bench" / "study_figures.md"
    found = count_disagreements(
        offline_pages["report/report.html"]["reader"]["counts"],
        (slice_sweep.report / "figures.md").read_text(),
        (ROOT / "README.md").read_text(),
        study.read_text() if study.is_file() else "",
    )
    if not study.is_file():
        found.append(
            "outputs/bench/study_figures.md is missing (`make study` copies the default study's figures.md there)"
        )
    assert found == [], found


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

"""Screenshots of a report page (or a sample browser) as a reader sees it: headless Chromium, 1,400 px wide, offline.

    python tests/report_screens.py PAGE OUTDIR [--prefix report_after] [--height 1100] [--at NAME=LOCATOR ...]

takes one PNG per place, `OUTDIR/<prefix>_<NAME>.png`: by default the page's top and the regions around MuSoBench
Table 1, overthinking Figure 5, the stopping-policy table and the runs table (`PLACES`). A LOCATOR is heading texts
joined by `>`: the first heading (h1-h4) whose text contains the first piece, then the first heading after it that
contains the next piece, and so on (`MuSoBench>Table 1` is MuSoBench's Table 1, not overthinking's); `top` is the top.
The page is copied into a temporary folder with a `<base>` pointing back at its own folder (its relative links and
images still resolve) and a small script that scrolls the heading to the top of the window before the screenshot.
The network is blocked, as it is for the reader offline: a page that needs a CDN shows here what it shows offline.

Importable: `screenshot(page, out, locator)` for one picture, `find_headings(page, locators)` to see which
locators resolve, `take(page, outdir, prefix, places)` for a set.
"""

from __future__ import annotations

import argparse
import html
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
WIDTH = 1400
# every host name fails to resolve and every request goes to a proxy where nothing listens (as tests/test_report_page.py)
OFFLINE = ["--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-server=127.0.0.1:9", "--disable-background-networking"]

# the default places: file name part -> locator
PLACES = {
    "top": "top",
    "musobench_table1": "MuSoBench>Table 1",
    "overthinking_figure5": "overthinking>Figure 5",
    "stopping_policies": "Beyond the papers>Stopping policies",
    "runs": "Runs and provenance",
}

# the locator script: finds the heading, scrolls it (a little below the window's top) into view; says what it found
LOCATE = """
function rsLocate(locator) {
  if (locator === "top") return {found: true, text: ""};
  const heads = [...document.querySelectorAll("h1, h2, h3, h4")];
  let at = -1, last = null;
  for (const piece of locator.split(">").map(s => s.trim())) {
    const i = heads.findIndex((h, k) => k > at && h.textContent.includes(piece));
    if (i < 0) return {found: false, text: piece};
    at = i; last = heads[i];
  }
  return {found: true, text: last.textContent.trim().slice(0, 120), el: last};
}
"""

SCROLL = """
window.addEventListener("load", () => setTimeout(() => {
  const where = rsLocate(%s);
  if (!where.found) {
    const note = document.createElement("div");
    note.textContent = "report_screens: no heading contains " + JSON.stringify(where.text);
    note.style.cssText = "position:fixed;top:0;left:0;right:0;z-index:99999;background:#b22222;color:#fff;font:20px sans-serif;padding:8px";
    document.body.appendChild(note);
  } else if (where.el) {
    // shift the page up rather than scroll it (headless Chromium's --screenshot paints a scrolled page blank)
    const y = where.el.getBoundingClientRect().top + window.scrollY - 12;
    document.documentElement.style.marginTop = (-y) + "px";
  }
}, 500));
"""

REPORT = """
window.addEventListener("load", () => setTimeout(() => {
  const out = document.createElement("pre"); out.id = "screens-check";
  out.textContent = JSON.stringify(%s.map(l => { const w = rsLocate(l); return [l, w.found, w.text]; }));
  document.body.appendChild(out);
}, 500));
"""


def _probe(page: Path, folder: Path, script: str, name: str) -> Path:
    "A copy of `page` in `folder` whose relative links resolve against the page's own folder, with `script` appended."
    text = page.read_text()
    base = f'<base href="{page.resolve().parent.as_uri()}/">'
    text = re.sub(r"<head[^>]*>", lambda m: m.group(0) + base, text, count=1)
    probe = folder / name
    probe.write_text(text.replace("</body>", f"<script>{LOCATE}{script}</script></body>", 1))
    return probe


def _chromium(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    if CHROMIUM is None:
        raise RuntimeError("headless Chromium not found (apt-get install chromium)")
    return subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", *OFFLINE, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def find_headings(page: Path, locators: list[str]) -> dict[str, str | None]:
    "Each locator -> the text of the heading it finds on `page`, None where it finds none (one Chromium launch)."
    with tempfile.TemporaryDirectory() as tmp:
        probe = _probe(page, Path(tmp), REPORT % json.dumps(locators), "find.html")
        done = _chromium(f"--window-size={WIDTH},1000", "--virtual-time-budget=10000", "--dump-dom", probe.as_uri())
    found = re.search(r'<pre id="screens-check">(.*?)</pre>', done.stdout, re.S)
    if not found:
        raise RuntimeError(f"Chromium did not run the locator script (exit {done.returncode}): {done.stderr[-1500:]}")
    return {loc: (text if ok else None) for loc, ok, text in json.loads(html.unescape(found.group(1)))}


def screenshot(page: Path, out: Path, locator: str = "top", height: int = 1100) -> Path:
    "A 1,400 px wide, `height` px tall screenshot of `page` scrolled to `locator`'s heading, written to `out`."
    out = Path(out).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        probe = _probe(page, Path(tmp), SCROLL % json.dumps(locator), "shot.html")
        done = _chromium(
            f"--window-size={WIDTH},{height}", "--virtual-time-budget=10000", f"--screenshot={out}", probe.as_uri()
        )
    if not out.is_file():
        raise RuntimeError(f"Chromium wrote no screenshot (exit {done.returncode}): {done.stderr[-1500:]}")
    return out


def take(page: Path, outdir: Path, prefix: str, places: dict[str, str] = PLACES, height: int = 1100) -> dict:
    "One screenshot per place, `outdir/<prefix>_<name>.png`; name -> (path, heading text or None where not found)."
    found = find_headings(page, list(places.values()))
    return {
        name: (screenshot(page, Path(outdir) / f"{prefix}_{name}.png", loc, height), found[loc])
        for name, loc in places.items()
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("page", type=Path, help="report.html or a sample browser's page")
    ap.add_argument("outdir", type=Path)
    ap.add_argument("--prefix", default="report", help="file names: <prefix>_<name>.png (default: report)")
    ap.add_argument("--height", type=int, default=1100, help="window height in px (the width is 1,400)")
    ap.add_argument(
        "--at",
        action="append",
        default=[],
        metavar="NAME=LOCATOR",
        help="a place instead of the default ones (repeatable), e.g. table4='MuSoBench>Table 4'",
    )
    args = ap.parse_args(argv)
    places = dict(a.split("=", 1) for a in args.at) if args.at else PLACES
    missing = 0
    for name, (path, heading) in take(args.page, args.outdir, args.prefix, places, args.height).items():
        missing += heading is None
        print(f"{path}: {places[name]!r} -> {'NOT FOUND' if heading is None else repr(heading)}")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())

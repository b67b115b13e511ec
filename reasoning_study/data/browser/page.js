// The sample browser's script (reasoning_study.browser): inline in every page, no library, no network; every node is
// built with createElement and textContent, so model output is never parsed as HTML.
(function () {
  "use strict";
  const M = JSON.parse(document.getElementById("manifest").textContent);
  const loaded = {}, waiting = {};
  window.sampleBrowser = {add: function (i, rows) { loaded[i] = rows; (waiting[i] || []).forEach(f => f()); }};
  // every node is built with createElement and textContent: model output is never parsed as HTML
  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") e.className = v; else if (k === "text") e.textContent = String(v); else e.setAttribute(k, v);
    }
    for (const k of kids.flat(9)) {
      if (k === null || k === undefined || k === false) continue;
      e.appendChild(typeof k === "object" ? k : document.createTextNode(String(k)));
    }
    return e;
  }
  const FILTERS = [...M.facets, ...M.row_filters];
  const state = {q: "", page: 1, all: ""};
  // every combination of a data file's facets and row filters with its number of samples (`browser.chunk_entry`)
  const CELLS = M.chunks.flatMap(c => c.cells.map(([status, outcome, tags, n]) => ({facets: c.facets, status, outcome, tags, n})));
  const valuesOf = (cell, f) => f === "tag" ? cell.tags : [M.facets.includes(f) ? cell.facets[f] : cell[f]];
  const KNOWN = {};  // filter -> every value it has among the page's samples
  for (const f of FILTERS) KNOWN[f] = new Set(CELLS.flatMap(cell => valuesOf(cell, f)));
  let notices = [];  // what the address asked for that this page does not have: said on the page, not an empty list
  function readHash() {
    const p = new URLSearchParams(location.hash.slice(1));
    notices = [];
    for (const f of FILTERS) {
      const v = p.get(f) || "";
      state[f] = v && !KNOWN[f].has(v) ? "" : v;
      if (v && !state[f]) notices.push("no " + f + " named “" + v + "” among these samples: showing all");
    }
    for (const k of new Set(p.keys())) if (![...FILTERS, "q", "page", "all"].includes(k)) notices.push("“" + k + "” is not a filter of this page: ignored");
    state.q = p.get("q") || ""; state.page = Math.max(1, parseInt(p.get("page") || "1", 10) || 1);
    state.all = p.get("all") || "";
  }
  function showNotices() {
    const box = document.getElementById("notice");
    box.replaceChildren(...notices.map(n => el("div", {}, n)));
    box.hidden = !notices.length;
  }
  function writeHash() {
    const p = new URLSearchParams();
    for (const f of [...FILTERS, "q", "all"]) if (state[f]) p.set(f, state[f]);
    if (state.page > 1) p.set("page", state.page);
    history.replaceState(null, "", "#" + p.toString());
  }
  const chosen = () => M.chunks.map((c, i) => [c, i]).filter(([c]) => M.facets.every(f => !state[f] || c.facets[f] === state[f]));
  const everyChunk = () => M.chunks.map((c, i) => [c, i]);
  const found = r => (r.id + " " + r.title).toLowerCase().includes(state.q.toLowerCase());
  // with a search typed, its matches can only be counted once loaded: all of the page's samples are loaded when they
  // are few enough (`max_load`), else the counts say they are counted before the search
  const searchCounted = () => state.q && everyChunk().every(([, i]) => i in loaded);
  function cells() {
    if (!searchCounted()) return CELLS;
    return everyChunk().flatMap(([c, i]) => loaded[i].filter(found).map(r => ({facets: c.facets, status: r.status, outcome: r.outcome, tags: r.tags, n: 1})));
  }
  function fits(cell, except) {  // the cell passes every filter but `except`
    return FILTERS.every(f => f === except || !state[f] || valuesOf(cell, f).includes(state[f]));
  }
  // how many samples each value of a filter would show, the other filters as they are set (0 for those they exclude)
  function options(name) {
    const counts = {"": 0};
    for (const v of KNOWN[name]) counts[v] = 0;
    for (const cell of cells()) if (fits(cell, name)) {
      counts[""] += cell.n;
      for (const v of new Set(valuesOf(cell, name))) counts[v] += cell.n;
    }
    return counts;
  }
  function filterBar() {
    const bar = document.getElementById("filters");
    bar.replaceChildren();
    for (const f of FILTERS) {
      const counts = options(f), values = [...KNOWN[f]].sort();
      if (M.facets.includes(f) && values.length < 2 && !state[f]) continue;  // one value only: nothing to pick
      const sel = el("select", {id: "f-" + f}, el("option", {value: ""}, "all (" + counts[""] + ")"),
        values.map(v => el("option", {value: v}, (v || "—") + " (" + counts[v] + ")")));
      sel.value = state[f];
      sel.addEventListener("change", () => { state[f] = sel.value; state.page = 1; notices = []; update(); });
      bar.appendChild(el("label", {}, f, sel));
    }
    const q = el("input", {id: "f-q", type: "search", placeholder: "id or title contains", value: state.q});
    q.addEventListener("change", () => { state.q = q.value; state.page = 1; notices = []; update(); });
    bar.appendChild(el("label", {}, "search", q));
    if (state.q && !searchCounted()) bar.appendChild(el("span", {class: "counted"}, "counts before the search"));
  }
  function load(list, done) {
    let left = list.filter(([, i]) => !(i in loaded)).length;
    if (!left) return done();
    for (const [c, i] of list) {
      if (i in loaded) continue;
      (waiting[i] = waiting[i] || []).push(() => { if (--left === 0) done(); });
      if (waiting[i].length === 1) document.head.appendChild(el("script", {src: c.file}));
    }
  }
  function update() {
    writeHash(); filterBar(); showNotices();
    const list = chosen(), total = list.reduce((a, [c]) => a + c.n, 0), out = document.getElementById("samples");
    const count = document.getElementById("count");
    if (total > M.max_load && !state.all) {
      const go = el("button", {id: "load-anyway"}, "load them anyway");
      go.addEventListener("click", () => { state.all = "1"; update(); });
      count.replaceChildren(total + " samples in " + list.length + " files match: pick a model, paradigm or condition first, or ", go);
      out.replaceChildren(); document.getElementById("overview").replaceChildren();
      return;
    }
    count.textContent = "loading " + total + " samples…";
    const all = everyChunk(), searched = state.q && all.reduce((a, [c]) => a + c.n, 0) <= M.max_load;
    load(searched ? all : list, () => { if (searched) filterBar(); render(list); });
  }
  function keep(r) {
    if (state.status && r.status !== state.status) return false;
    if (state.outcome && r.outcome !== state.outcome) return false;
    if (state.tag && !r.tags.includes(state.tag)) return false;
    if (state.q && !found(r)) return false;
    return true;
  }
  function render(list) {
    const rows = list.flatMap(([, i]) => loaded[i]).filter(keep);
    const pages = Math.max(1, Math.ceil(rows.length / M.page_size));
    state.page = Math.min(state.page, pages); writeHash();
    const shown = rows.slice((state.page - 1) * M.page_size, state.page * M.page_size);
    const pager = el("span", {class: "pager"});
    const step = d => { const b = el("button", {disabled: (state.page + d < 1 || state.page + d > pages) ? "" : null}, d < 0 ? "◀ previous" : "next ▶");
      b.addEventListener("click", () => { state.page += d; update(); }); return b; };
    pager.append(step(-1), step(1));
    document.getElementById("count").replaceChildren(rows.length + " samples · page " + state.page + " of " + pages + " ", pager);
    overview(rows);
    document.getElementById("samples").replaceChildren(...shown.map(card));
  }
  const fmt = v => v === null || v === undefined ? "—" : typeof v === "number" ? String(Math.round(v * 1000) / 1000) : String(v);
  const PARADIGMS = {short: "Short-CoT", long: "Long-CoT"};  // the facet's values as the papers name them
  function badges(r) {
    const p = r.facets.paradigm;
    return [p ? el("span", {class: "badge paradigm", title: "paradigm"}, PARADIGMS[p] || "paradigm " + p) : null,
      el("span", {class: "badge status", title: "status"}, r.status), el("span", {class: "badge " + r.outcome, title: "outcome"}, r.outcome),
      r.tags.map(t => el("span", {class: "badge tag"}, t))];
  }
  function scoreTable(s) {
    const keys = Object.keys(s).filter(k => s[k] !== null && s[k] !== undefined);
    return el("table", {class: "scores"}, el("tr", {}, keys.map(k => el("th", {}, k))), el("tr", {}, keys.map(k => el("td", {}, fmt(s[k])))));
  }
  const verdictClass = v => "v-" + (v === "cut off" ? "cut" : v);
  function marked(text, spans, cands) {
    const pre = el("pre", {class: "reply"}); let at = 0;
    for (const [a, b, i] of spans) {
      if (a < at) continue;
      pre.append(text.slice(at, a), el("mark", {class: verdictClass(cands[i].verdict), title: cands[i].verdict + (cands[i].reason ? ": " + cands[i].reason : "")}, text.slice(a, b)));
      at = b;
    }
    pre.append(text.slice(at));
    return pre;
  }
  function candidates(cands) {
    if (!cands.length) return null;
    return el("ul", {class: "cands"}, cands.map(c => el("li", {class: "cand " + verdictClass(c.verdict)},
      el("b", {}, c.verdict), " ", c.text, c.reason ? el("span", {class: "why"}, "— " + c.reason) : null)));
  }
  function turn(t) {
    return el("div", {class: "turn"},
      el("div", {}, el("b", {}, "Turn " + t.turn + " (" + t.name + ")"), " · " + t.status + " · " + fmt(t.finish_reason) + " · " + fmt(t.tokens) + " tokens",
        t.decision ? " · decision: " + t.decision : null),
      el("details", {}, el("summary", {}, "prompt"), el("pre", {}, t.prompt)),
      t.thinking ? el("details", {}, el("summary", {}, "thinking (" + t.thinking.length + " characters)"), el("pre", {}, t.thinking)) : null,
      marked(t.reply, t.spans, t.candidates), candidates(t.candidates));
  }
  // a strip cell: 1 correct, 0 a wrong answer, -1 no answer (the probe ran and gave none: not correct, not wrong), null failed
  const NO_ANSWER = -1, NO_ANSWER_COLOR = "#f6c8b4";
  function noAnswerCell() { const c = el("span", {class: "cell none"}); c.style.background = NO_ANSWER_COLOR; return c; }
  function strip(s, label) {
    const width = Math.max(2, Math.min(12, Math.floor(640 / Math.max(1, s.cells.length))));
    const box = el("span", {class: "strip"});
    s.cells.forEach((c, i) => {
      const cls = ["cell", c === 1 ? "ok" : c === 0 ? "no" : c === NO_ANSWER ? "none" : "failed"];
      if (i === s.tau) cls.push("tau");
      if (i === s.cells.length - 1) cls.push("end");
      const said = c === 1 ? "correct" : c === 0 ? "wrong answer" : c === NO_ANSWER ? "no answer" : "probe failed";
      const cell = el("span", {class: cls.join(" "), title: "prefix " + i + ": " + said}, c === null && width >= 8 ? "×" : c === NO_ANSWER && width >= 8 ? "∅" : null);
      if (c === NO_ANSWER) cell.style.background = NO_ANSWER_COLOR;
      cell.style.width = width + "px"; box.appendChild(cell);
    });
    return el("span", {}, box, label === false ? null : el("span", {class: "striplabel"},
      "τ = " + (s.tau === null ? "∞" : s.tau) + " · κ̂ = " + (s.kappa === null ? "—" : s.kappa + " tokens") + " · N = " + s.n));
  }
  function overview(rows) {
    const box = document.getElementById("overview"), traces = rows.filter(r => r.view === "trajectory");
    if (!traces.length) return box.replaceChildren();
    const sorted = traces.slice().sort((a, b) => (a.strip.tau === null) - (b.strip.tau === null) || (a.strip.tau - b.strip.tau) || a.strip.n - b.strip.n).slice(0, 500);
    box.replaceChildren(el("h2", {}, "Trace strips (" + traces.length + (traces.length > 500 ? ", the first 500" : "") + ", sorted by τ)"),
      el("div", {class: "legend"}, el("span", {}, el("span", {class: "cell ok"}), " correct"), el("span", {}, el("span", {class: "cell no"}), " wrong answer"),
        el("span", {}, noAnswerCell(), " no answer"), el("span", {}, el("span", {class: "cell failed"}), " probe failed"), el("span", {}, "τ: first correct prefix, κ̂ = b_τ; the bar: the end (N)")),
      ...sorted.map(r => { const a = el("a", {href: "#"}, r.title + " · " + r.facets.condition);
        a.addEventListener("click", e => { e.preventDefault(); state.q = r.id; state.page = 1; update(); });
        return el("div", {class: "row"}, a, strip(r.strip)); }));
  }
  function prefixTable(r) {
    return el("table", {class: "scores prefixes"}, el("tr", {}, ["prefix", "tokens", r.granularity === "utterance" ? "its last utterance" : null, "forced answer", "prediction", "correct", "status"].filter(Boolean).map(h => el("th", {}, h))),
      r.prefixes.map((p, k) => el("tr", {class: (p.correct === true ? "p-ok" : r.strip.cells[k] === NO_ANSWER ? "p-none" : p.correct === false ? "p-no" : "p-failed") + (p.i === r.strip.tau ? " tau-row" : "")},
        el("td", {}, String(p.i)), el("td", {}, fmt(p.tokens)), r.granularity === "utterance" ? el("td", {}, p.i === 0 ? "(no reasoning)" : fmt(p.utterance)) : null,
        el("td", {}, fmt(p.forced)), el("td", {}, fmt(p.prediction)), el("td", {}, fmt(p.correct)), el("td", {}, fmt(p.status)))));
  }
  // the rater's quality score of an answer (1-10); the rater sees only the answer that opens a class
  const rating = (a, repeats) => a.rating !== null && a.rating !== undefined ? "rating " + fmt(a.rating) + " / 10"
    : repeats ? "not rated: an earlier answer opened its class" : "no rating";
  // one card per view (`studies.registry.SampleKind.view`): each study says how its samples are shown
  const VIEWS = {
    dialogue: r => [scoreTable(r.scores),
      r.question ? el("details", {}, el("summary", {}, "question"), el("pre", {}, r.question)) : null,
      r.turns.length ? r.turns.map(turn) : el("p", {}, "An aggregate of the self-consistency samples (no dialogue of its own).")],
    answers: r => [scoreTable(r.scores), el("pre", {}, r.question || "(the prompt text is not available here)"),
      el("ol", {class: "answers"}, r.answers.map((a, i) => el("li", {class: "answer"}, el("span", {class: "badge"}, "class " + fmt(a.cls)),
        el("span", {class: "badge"}, rating(a, r.answers.slice(0, i).some(b => b.cls === a.cls))), el("pre", {}, a.text))))],
    trajectory: r => [strip(r.strip),
      el("pre", {}, r.question), r.gold !== null && r.gold !== undefined ? el("div", {}, el("b", {}, "reference answer: "), r.gold) : null,
      el("details", {}, el("summary", {}, "utterances (" + r.utterances.length + ")"), el("ol", {}, r.utterances.map(u => el("li", {}, el("pre", {}, u))))),
      prefixTable(r)],
    texts: r => [scoreTable(r.scores), r.question ? el("pre", {}, r.question) : null,
      (r.texts || []).map(t => el("div", {class: "turn"}, el("b", {}, t.label), el("pre", {}, t.text)))],
  };
  function card(r) {
    const head = [el("h2", {}, r.title), el("div", {}, Object.entries(r.facets).filter(([, v]) => v).map(([k, v]) => k + ": " + v).join(" · ")), el("div", {}, badges(r))];
    return el("div", {class: "card " + r.kind, id: "s-" + r.id}, head, (VIEWS[r.view] || VIEWS.texts)(r));
  }
  readHash(); update();
  window.addEventListener("hashchange", () => { readHash(); update(); });
})();

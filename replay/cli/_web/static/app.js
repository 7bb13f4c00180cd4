// eventlog live view: renders the server's snapshots (server-sent events from /api/events), keeps a few minutes
// of history per stream for the charts (drawn here as small SVGs), and shows a time's records on a click.
// No library, nothing loaded from anywhere but this server.
"use strict";

const PARTS_SHOWN = 40;          // parts listed per stream before "show all"
const state = { streams: new Map(), history: new Map(), parts: new Map(), historyS: 300, showAll: new Set(), last: null };

// -- formatting: every number with its unit ---------------------------------------------------------------
function fmtDuration(s) {
  if (s === null || s === undefined) return "–";
  if (s < 1) return `${Math.round(s * 1000)} ms`;
  if (s < 60) return `${s.toFixed(s < 10 ? 1 : 0)} s`;
  const two = (a, ua, b, ub) => (b ? `${a} ${ua} ${b} ${ub}` : `${a} ${ua}`);
  if (s < 3600) return two(Math.floor(s / 60), "min", Math.floor(s % 60), "s");
  if (s < 86400) return two(Math.floor(s / 3600), "h", Math.floor((s % 3600) / 60), "min");
  return two(Math.floor(s / 86400), "d", Math.floor((s % 86400) / 3600), "h");
}
function fmtBytes(n) {
  if (n === null || n === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let v = n, i = 0;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return i === 0 ? `${Math.round(v)} B` : `${v.toFixed(v < 10 ? 2 : 1)} ${units[i]}`;
}
function fmtCount(n) {
  if (n === null || n === undefined) return "–";
  if (Math.abs(n) < 1000) return Number.isInteger(n) ? String(n) : n.toFixed(n < 10 ? 1 : 0);
  const units = ["", "k", "M", "G", "T"];
  let v = n, i = 0;
  while (Math.abs(v) >= 1000 && i < units.length - 1) { v /= 1000; i++; }
  return `${v.toFixed(v < 10 ? 2 : 1)} ${units[i]}`;
}
const fmtRate = (n, unit) => `${fmtCount(n)} ${unit}/s`;
const fmtBytesRate = (n) => `${fmtBytes(n)}/s`;
function timeText(t) { return Array.isArray(t) ? `(${t.join(", ")})` : String(t); }
function frontierText(f) {
  if (f === null || f === undefined) return "–";
  if (f.length === 0) return "finished";
  return f.map(timeText).join(" ");
}
function ago(ms, now) { return ms ? `${fmtDuration(Math.max(0, (now - ms) / 1000))} ago` : "never"; }
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else if (k === "text") e.textContent = v; else e.setAttribute(k, v);
  }
  for (const c of children) if (c !== null && c !== undefined) e.append(c);
  return e;
}
function setText(e, text) { if (e.textContent !== text) e.textContent = text; }

// -- the theme -----------------------------------------------------------------------------------------------
const THEMES = ["auto", "light", "dark"];
function applyTheme(theme) {
  if (theme === "auto") document.documentElement.removeAttribute("data-theme");
  else document.documentElement.setAttribute("data-theme", theme);
  document.getElementById("theme").textContent = `theme: ${theme}`;
}
document.getElementById("theme").addEventListener("click", () => {
  const cur = localStorage.getItem("eventlog-theme") || "auto";
  const next = THEMES[(THEMES.indexOf(cur) + 1) % THEMES.length];
  localStorage.setItem("eventlog-theme", next);
  applyTheme(next);
});
applyTheme(localStorage.getItem("eventlog-theme") || "auto");

// -- charts ------------------------------------------------------------------------------------------------
const SVGNS = "http://www.w3.org/2000/svg";
function svgEl(tag, attrs) {
  const e = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  return e;
}
// series: [{points: [[tMs, value]], cls}]; fmt: value -> label; the x axis spans the history window to now.
function drawChart(svg, series, fmt, nowMs, windowS, onClick) {
  const W = 320, H = 110, L = 62, R = 6, T = 8, B = 18;
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.setAttribute("preserveAspectRatio", "none");
  while (svg.firstChild) svg.removeChild(svg.firstChild);
  // while the history is shorter than the window, the x axis spans what there is (at least 30 s)
  const first = Math.min(...series.flatMap((s) => s.points.map((p) => p[0])), nowMs);
  windowS = Math.max(30, Math.min(windowS, Math.ceil((nowMs - first) / 10000) * 10));
  const x0 = nowMs - windowS * 1000;
  const vals = series.flatMap((s) => s.points.filter((p) => p[0] >= x0 && p[1] !== null).map((p) => p[1]));
  let lo = vals.length ? Math.min(...vals) : 0, hi = vals.length ? Math.max(...vals) : 1;
  if (lo > 0 && series.every((s) => s.zero)) lo = 0;
  if (hi === lo) { hi = lo + 1; }
  const X = (t) => L + ((t - x0) / (windowS * 1000)) * (W - L - R);
  const Y = (v) => T + (1 - (v - lo) / (hi - lo)) * (H - T - B);
  svg.append(svgEl("line", { x1: L, x2: W - R, y1: Y(hi), y2: Y(hi), class: "grid" }));
  svg.append(svgEl("line", { x1: L, x2: W - R, y1: Y(lo), y2: Y(lo), class: "grid" }));
  const label = (x, y, text, anchor) => {
    const t = svgEl("text", { x, y, "text-anchor": anchor || "end", "dominant-baseline": "middle" });
    t.textContent = text;
    svg.append(t);
  };
  label(L - 6, Y(hi), fmt(hi));
  label(L - 6, Y(lo), fmt(lo));
  label(L, H - 5, `−${fmtDuration(windowS)}`, "start");
  label(W - R, H - 5, "now", "end");
  for (const s of series) {
    const pts = s.points.filter((p) => p[0] >= x0 && p[1] !== null);
    if (!pts.length) continue;
    const d = [];
    pts.forEach((p, i) => {   // a step line: a value holds until the next sample
      if (i > 0) d.push(`L${X(p[0]).toFixed(1)},${Y(pts[i - 1][1]).toFixed(1)}`);
      d.push(`${i ? "L" : "M"}${X(p[0]).toFixed(1)},${Y(p[1]).toFixed(1)}`);
    });
    d.push(`L${X(nowMs).toFixed(1)},${Y(pts[pts.length - 1][1]).toFixed(1)}`);
    svg.append(svgEl("path", { d: d.join(" "), class: s.cls, "vector-effect": "non-scaling-stroke" }));
  }
  if (onClick) {   // a click on the chart shows the records of the frontier time nearest to it
    const hit = svgEl("rect", { x: L, y: T, width: W - L - R, height: H - T - B, class: "hit" });
    hit.addEventListener("click", (ev) => {
      const box = svg.getBoundingClientRect();
      const vx = ((ev.clientX - box.left) / box.width) * W;
      const t = x0 + ((vx - L) / (W - L - R)) * windowS * 1000;
      onClick(t);
    });
    svg.append(hit);
  }
}

// -- streams --------------------------------------------------------------------------------------------------
function streamCard(name) {
  const card = el("article", { class: "stream", id: `stream-${name}`, "data-stream": name });
  const head = el("div", { class: "stream-head" }, el("h2", { text: name }), el("span", { class: "badges" }),
                  el("span", { class: "muted meta" }));
  const facts = el("div", { class: "facts" });
  const charts = el("div", { class: "charts" });
  const mk = (title) => {
    const box = el("div", { class: "chart" }, el("div", { class: "title" }, el("span", { text: title }),
                                                   el("span", { class: "now" })), svgEl("svg", {}));
    charts.append(box);
    return box;
  };
  const cFrontier = mk("completed frontier (time)");
  const cLag = mk("lag of the oldest incomplete time");
  const cRate = mk("records written per second");
  const times = el("div", { class: "times" });
  const table = el("table", { class: "parts" });
  table.append(el("thead", {}, el("tr", {},
    ...[["part", ""], ["frontier", ""], ["state", ""], ["lag", "r"], ["records/s", "r"], ["bytes/s", "r"],
        ["records", "r"], ["events", "r"], ["stored", "r"], ["last write", "r"]]
      .map(([t, c]) => el("th", { class: c, text: t })))));
  table.append(el("tbody"));
  const more = el("div", { class: "more" });
  card.append(head, facts, charts, el("h3", { text: "Times with records (newest first) — click one for its records" }),
              times, el("h3", { text: "Parts" }), el("div", { class: "scroll" }, table), more);
  return { card, head, facts, cFrontier, cLag, cRate, times, tbody: table.querySelector("tbody"), more, rows: new Map(),
           factEls: new Map() };
}

function fact(ui, key, label, value, title) {
  let f = ui.factEls.get(key);
  if (!f) {
    f = el("div", { class: "fact", "data-fact": key }, el("div", { class: "label", text: label }),
           el("div", { class: "value num" }));
    ui.facts.append(f);
    ui.factEls.set(key, f);
  }
  setText(f.querySelector(".value"), value);
  if (title) f.title = title;
}

function badges(s) {
  const out = [];
  if (s.finished) out.push(["finished", "finished"]);
  else out.push(["running", "running"]);
  if (s.stalled_parts) out.push(["stalled", `${s.stalled_parts} stalled part${s.stalled_parts > 1 ? "s" : ""}`]);
  if (s.holding.length) out.push(["holding", `held back by part${s.holding.length > 1 ? "s" : ""} ${s.holding.join(", ")}`]);
  return out;
}

function partState(p) {
  if (p.error) return ["error", "error"];
  if (p.finished) return ["finished", "finished"];
  if (p.stalled) return ["stalled", "stalled"];
  if (p.holding) return ["holding", "holding back"];
  return ["running", "running"];
}

function timeButton(stream, t, text) {
  const b = el("button", { type: "button", class: "time", "data-stream": stream, "data-time": JSON.stringify(t),
                           title: `show the records at time ${timeText(t)}` });
  b.textContent = text === undefined ? timeText(t) : text;
  return b;
}

function renderStream(s, now) {
  let ui = state.streams.get(s.stream);
  if (!ui) {
    ui = streamCard(s.stream);
    state.streams.set(s.stream, ui);
    const list = document.getElementById("streams");
    const after = [...list.querySelectorAll("article.stream")].find((a) => a.dataset.stream > s.stream);
    list.insertBefore(ui.card, after || null);
  }
  const b = ui.head.querySelector(".badges");
  const want = badges(s).map(([c, t]) => `<span class="badge ${c}">${t}</span>`).join(" ");
  if (b.innerHTML !== want) b.innerHTML = want;
  setText(ui.head.querySelector(".meta"),
          `${s.peers} part${s.peers > 1 ? "s" : ""} · ${s.time_type} times · ${s.encoding} · created ${s.created}`);
  fact(ui, "frontier", "completed frontier", frontierText(s.frontier), "every time before it is complete");
  fact(ui, "lag", "lag", fmtDuration(s.lag_s), "since the first record of the oldest incomplete time was written");
  fact(ui, "clag", "completed-time lag", fmtDuration(s.completed_lag_s),
       "the last time that became complete: from its first record's write to its completion");
  fact(ui, "rps", "records/s", fmtRate(s.records_per_s, "rec"));
  fact(ui, "bps", "bytes/s", fmtBytesRate(s.bytes_per_s), "Arrow in-memory size of the records");
  fact(ui, "records", "records read", `${fmtCount(s.records)} rec`, "records this view has read (its look back included)");
  fact(ui, "stored", "stored", fmtBytes(s.stored_bytes), "bytes the stream occupies in the log");
  // charts
  const h = state.history.get(s.stream) || [];
  const win = state.historyS;
  const isInt = s.time_type === "int64";
  drawChart(ui.cFrontier.querySelector("svg"),
            [{ points: h.map((x) => [x.t, x.frontier]), cls: "s1" }, { points: h.map((x) => [x.t, x.max_frontier]), cls: "s2" }],
            (v) => `t=${fmtCount(Math.round(v))}`, now, win,
            isInt ? (tMs) => {
              const near = h.reduce((a, x) => (Math.abs(x.t - tMs) < Math.abs(a.t - tMs) ? x : a), h[0] || { t: 0 });
              if (near && near.frontier !== null && near.frontier !== undefined) showRecords(s.stream, near.frontier);
            } : null);
  setText(ui.cFrontier.querySelector(".now"), isInt ? frontierText(s.frontier) : "product times: see the parts");
  drawChart(ui.cLag.querySelector("svg"), [{ points: h.map((x) => [x.t, x.lag_s]), cls: "s1", zero: true }],
            fmtDuration, now, win);
  setText(ui.cLag.querySelector(".now"), fmtDuration(s.lag_s));
  drawChart(ui.cRate.querySelector("svg"), [{ points: h.map((x) => [x.t, x.records_per_s]), cls: "s1", zero: true }],
            (v) => `${fmtCount(v)}/s`, now, win);
  setText(ui.cRate.querySelector(".now"), fmtRate(s.records_per_s, "rec"));
  // times
  const key = JSON.stringify(s.recent_times.map((t) => [t.time, t.records, t.complete]));
  if (ui.times.dataset.key !== key) {
    ui.times.dataset.key = key;
    ui.times.replaceChildren(...(s.recent_times.length ? s.recent_times.map((t) => {
      const chip = el("button", { type: "button", class: `chip${t.complete ? "" : " open"}`, "data-stream": s.stream,
                                  "data-time": JSON.stringify(t.time),
                                  title: `${t.records} records in ${t.parts} part(s); ${t.complete ? "complete" : "not complete yet"}` });
      chip.append(`t=${timeText(t.time)}`, el("span", { class: "sub", text: `${fmtCount(t.records)} rec${t.complete ? "" : " · open"}` }));
      return chip;
    }) : [el("span", { class: "muted", text: "no records seen yet" })]));
  }
  renderParts(ui, s, now);
}

function renderParts(ui, s, now) {
  let parts = s.parts;
  const all = state.showAll.has(s.stream);
  if (!all && parts.length > PARTS_SHOWN) {   // the parts most behind first: errors, stalled, holding, lag
    const rank = (p) => (p.error ? 0 : p.stalled ? 1 : p.holding ? 2 : 3);
    parts = [...parts].sort((a, b) => rank(a) - rank(b) || b.lag_s - a.lag_s || a.part - b.part).slice(0, PARTS_SHOWN)
      .sort((a, b) => a.part - b.part);
  }
  const shown = new Set(parts.map((p) => p.part));
  for (const [n, row] of ui.rows) if (!shown.has(n)) { row.tr.remove(); ui.rows.delete(n); }
  let prev = null;
  for (const p of parts) {
    let row = ui.rows.get(p.part);
    if (!row) {
      const tds = Array.from({ length: 10 }, (_, i) => el("td", { class: i >= 3 ? "r num" : "num" }));
      const tr = el("tr", { "data-part": String(p.part) }, ...tds);
      row = { tr, tds, frontierKey: null };
      ui.rows.set(p.part, row);
    }
    const next = prev ? prev.nextSibling : ui.tbody.firstChild;
    if (row.tr !== next) ui.tbody.insertBefore(row.tr, next);
    prev = row.tr;
    const [cls, label] = partState(p);
    row.tr.className = cls === "running" || cls === "finished" ? "" : cls;
    const t = row.tds;
    setText(t[0], String(p.part));
    const fk = JSON.stringify(p.frontier);
    if (row.frontierKey !== fk) {
      row.frontierKey = fk;
      if (p.frontier && p.frontier.length) t[1].replaceChildren(...p.frontier.map((x) => timeButton(s.stream, x)));
      else t[1].replaceChildren(p.frontier ? "finished" : "–");
    }
    const badge = t[2].firstChild && t[2].firstChild.dataset && t[2].firstChild.dataset.state === label ? null
      : el("span", { class: `badge ${cls}`, "data-state": label, text: label });
    if (badge) t[2].replaceChildren(badge);
    t[2].title = p.error || (p.stalled && p.last_write_ms ? `no write for ${fmtDuration((now - p.last_write_ms) / 1000)}` : "");
    setText(t[3], p.finished ? "–" : fmtDuration(p.lag_s));
    setText(t[4], fmtRate(p.records_per_s, "rec"));
    setText(t[5], fmtBytesRate(p.bytes_per_s));
    setText(t[6], `${fmtCount(p.records)} rec`);
    setText(t[7], `${fmtCount(Math.max(0, p.next_seq - p.first_seq))} ev`);
    setText(t[8], fmtBytes(p.stored_bytes));
    setText(t[9], ago(p.last_write_ms, now));
  }
  const hidden = s.parts.length - parts.length;
  const want = hidden > 0 ? `show all ${s.parts.length} parts (${hidden} hidden, less behind)`
    : all && s.parts.length > PARTS_SHOWN ? `show the ${PARTS_SHOWN} parts most behind` : "";
  if (ui.more.dataset.want !== want) {
    ui.more.dataset.want = want;
    ui.more.replaceChildren(...(want ? [el("button", { type: "button", class: "toggle-parts", "data-stream": s.stream, text: want })] : []));
  }
}

// -- jobs -------------------------------------------------------------------------------------------------------
function renderJobs(jobs, now) {
  const box = document.getElementById("jobs");
  box.hidden = !jobs.length;
  if (!jobs.length) return;
  const list = document.getElementById("job-list");
  const key = JSON.stringify(jobs.map((j) => ({ ...j, age_s: j.stale ? Math.round(j.age_s) : 0, updated_ms: 0 })));
  if (list.dataset.key === key) return;
  list.dataset.key = key;
  const cards = jobs.map((j) => {
    const c = j.checkpoints || {};
    const st = j.stale ? ["stale", `no update for ${fmtDuration(j.age_s)}`] : [j.status === "running" ? "running" : j.status === "failed" ? "error" : "finished", j.status];
    const card = el("article", { class: "job", "data-job": j.job },
      el("div", { class: "stream-head" }, el("h2", { text: j.job }), el("span", { class: `badge ${st[0]}`, text: st[1] }),
         el("span", { class: "muted", text: `generation ${j.generation} · ${j.restart_count} restart${j.restart_count === 1 ? "" : "s"} · ${j.location}` })));
    card.append(el("div", { class: "kv" },
      ...[["last checkpoint", c.last_completed ? `#${c.last_completed}` : "none"],
          ["completed in this run", `${c.completed_in_run || 0}`],
          ["in flight", c.in_flight ? `#${c.in_flight}` : "none"],
          ["duration", fmtDuration(c.last_duration_s)], ["size", fmtBytes(c.last_size_bytes)],
          ["completed at", c.last_completed_ms ? new Date(c.last_completed_ms).toLocaleTimeString() : "–"]]
        .map(([k, v]) => el("span", {}, `${k}: `, el("b", { text: v }))))); 
    const ops = el("table", {}, el("thead", {}, el("tr", {}, ...["operator", "kind", "instance", "records in", "rows out", "blocked", "state", "heard"]
      .map((t, i) => el("th", { class: i > 2 ? "r" : "", text: t })))), el("tbody"));
    for (const op of j.operators || []) for (const inst of op.instances) {
      ops.tBodies[0].append(el("tr", {}, el("td", { text: op.name }), el("td", { text: op.kind }), el("td", { text: inst.task }),
        el("td", { class: "r num", text: `${fmtCount(inst.records_in)} rec` }), el("td", { class: "r num", text: `${fmtCount(inst.rows_out)} rows` }),
        el("td", { class: "r num", text: fmtDuration(inst.writer_blocked_s) }), el("td", { class: "r num", text: fmtBytes(inst.state_bytes) }),
        el("td", { class: "r num", text: inst.heard_s_ago === null || j.status !== "running" ? "–" : `${fmtDuration(inst.heard_s_ago)} ago` })));
    }
    const chs = el("table", {}, el("thead", {}, el("tr", {}, ...["channel", "from → to", "written", "read", "backlog", "blocked"]
      .map((t, i) => el("th", { class: i > 1 ? "r" : "", text: t })))), el("tbody"));
    for (const ch of j.channels || []) {
      chs.tBodies[0].append(el("tr", {}, el("td", { text: ch.name }), el("td", { text: `${ch.from} → ${ch.to}` }),
        el("td", { class: "r num", text: fmtBytes(ch.sent_bytes) }), el("td", { class: "r num", text: fmtBytes(ch.acked_bytes) }),
        el("td", { class: "r num", text: fmtBytes(ch.backlog_bytes) }), el("td", { class: "r num", text: fmtDuration(ch.blocked_s) })));
    }
    card.append(el("h3", { text: "Operators and instances" }), el("div", { class: "scroll" }, ops),
                el("h3", { text: "Channels (backlog: written, not yet read; blocked: backpressure)" }), el("div", { class: "scroll" }, chs));
    if ((j.restarts || []).length) {
      card.append(el("h3", { text: "Restarts" }), el("ul", {}, ...j.restarts.map((r) =>
        el("li", { text: `generation ${r.generation} failed${r.at_ms ? " at " + new Date(r.at_ms).toLocaleTimeString() : ""}: ${r.reason}` }))));
    }
    return card;
  });
  list.replaceChildren(...cards);
}

// -- records of a time ----------------------------------------------------------------------------------------
async function showRecords(stream, time) {
  const panel = document.getElementById("records");
  const body = document.getElementById("records-body");
  panel.hidden = false;
  setText(document.getElementById("records-title"), `${stream} · time ${timeText(time)}`);
  body.replaceChildren(el("p", { class: "muted", text: "reading…" }));
  let doc;
  try {
    const r = await fetch(`/api/records?stream=${encodeURIComponent(stream)}&time=${encodeURIComponent(JSON.stringify(time))}&limit=50`);
    doc = await r.json();
    if (!r.ok) throw new Error(doc.error || r.statusText);
  } catch (e) {
    body.replaceChildren(el("p", { class: "errors", text: `cannot read the records: ${e.message}` }));
    return;
  }
  const open = doc.parts.filter((p) => !p.complete).map((p) => p.part);
  const summary = el("p", { class: "summary" },
    `${fmtCount(doc.records)} record${doc.records === 1 ? "" : "s"} at time ${timeText(doc.time)}` +
    (doc.shown < doc.records ? `, the first ${doc.shown} shown` : "") +
    (open.length ? ` · time ${timeText(doc.time)} is not complete: part${open.length > 1 ? "s" : ""} ${open.join(", ")} may still write at it` : ` · time ${timeText(doc.time)} is complete`) +
    (doc.truncated ? " · some parts were only partly read" : ""));
  const schema = el("div", { class: "schema", text: "schema: " + doc.schema.map((f) => `${f.name}: ${f.type}${f.nullable ? "?" : ""}`).join(", ") });
  const cols = doc.schema.map((f) => f.name);
  const marked = doc.rows.some((r) => !r.committed);   // records of a part that has not completed the time yet
  const head = ["part", "seq", ...(marked ? ["committed"] : []), ...cols];
  const table = el("table", { class: "rows" }, el("thead", {}, el("tr", {}, ...head.map((c) => el("th", { text: c })))), el("tbody"));
  for (const row of doc.rows) {
    const cells = [row.part, row.seq, ...(marked ? [row.committed ? "yes" : "not yet"] : []), ...cols.map((c) => row.record[c])]
      .map((v) => typeof v === "object" && v !== null ? JSON.stringify(v) : String(v));
    const tr = el("tr", { class: row.committed ? "" : "uncommitted" }, ...cells.map((c) => el("td", { text: c })));
    table.tBodies[0].append(tr);
  }
  body.replaceChildren(summary, schema, el("div", { class: "scroll" }, table),
                       el("p", { class: "muted", text: `as: replay cat ${document.getElementById("log-uri").textContent} ${stream} --since ${timeText(doc.time)}` +
                                                     (Array.isArray(doc.time) ? "" : ` --until ${doc.time + 1}`) }));
}
document.getElementById("records-close").addEventListener("click", () => { document.getElementById("records").hidden = true; });
document.addEventListener("keydown", (e) => { if (e.key === "Escape") document.getElementById("records").hidden = true; });
document.addEventListener("click", (e) => {
  const t = e.target.closest("[data-time]");
  if (t) { showRecords(t.dataset.stream, JSON.parse(t.dataset.time)); return; }
  const toggle = e.target.closest(".toggle-parts");
  if (toggle) {
    const name = toggle.dataset.stream;
    if (state.showAll.has(name)) state.showAll.delete(name); else state.showAll.add(name);
    if (state.last) render(state.last);
  }
});

// -- snapshots ---------------------------------------------------------------------------------------------------
function render(snap) {
  state.last = snap;
  state.historyS = snap.history_s || state.historyS;
  setText(document.getElementById("log-uri"), snap.log);
  const now = snap.now_ms;
  const errs = document.getElementById("errors");
  errs.hidden = !(snap.errors && snap.errors.length);
  if (!errs.hidden) errs.replaceChildren(...snap.errors.map((e) => el("div", { text: e })));
  const names = new Set(snap.streams.map((s) => s.stream));
  for (const [name, ui] of state.streams) if (!names.has(name)) { ui.card.remove(); state.streams.delete(name); state.history.delete(name); }
  const none = document.getElementById("no-streams");
  if (none) none.textContent = snap.streams.length ? "" : "No stream in this log yet: new streams appear here as they are created.";
  for (const s of snap.streams) renderStream(s, now);
  renderJobs(snap.jobs || [], now);
  setText(document.getElementById("foot"),
          `last look at the log ${new Date(now).toLocaleTimeString()} · it took ${snap.poll_ms} ms · stalled: no write for ${fmtDuration(snap.stall_after_s)} · ` +
          "updates arrive by server-sent events; nothing is loaded from outside this server");
}

// an update carries only the parts that changed (parts_delta): merge them into the parts kept per stream
function mergeParts(snap) {
  for (const s of snap.streams) {
    const kept = state.parts.get(s.stream) || [];
    if (!s.parts_delta) kept.length = 0;
    for (const p of s.parts) kept[p.part] = p;
    kept.length = s.peers;
    state.parts.set(s.stream, kept);
    s.parts = kept.filter((p) => p);
  }
  for (const name of [...state.parts.keys()]) if (!snap.streams.some((s) => s.stream === name)) state.parts.delete(name);
}

function addSamples(snap) {
  const cutoff = snap.now_ms - (snap.history_s || state.historyS) * 1000;
  for (const s of snap.streams) {
    const h = state.history.get(s.stream) || [];
    if (s.sample && (!h.length || h[h.length - 1].t < s.sample.t)) h.push(s.sample);
    while (h.length && h[0].t < cutoff) h.shift();
    state.history.set(s.stream, h);
  }
}

function connect() {
  const conn = document.getElementById("conn");
  const es = new EventSource("/api/events");
  es.addEventListener("state", (e) => {
    const snap = JSON.parse(e.data);
    state.history = new Map(Object.entries(snap.history || {}));
    state.parts = new Map();
    mergeParts(snap);
    conn.dataset.state = "live";
    conn.textContent = "live";
    render(snap);
  });
  es.addEventListener("update", (e) => {
    const snap = JSON.parse(e.data);
    mergeParts(snap);
    addSamples(snap);
    conn.dataset.state = "live";
    conn.textContent = "live";
    render(snap);
  });
  es.onerror = () => { conn.dataset.state = "lost"; conn.textContent = "reconnecting…"; };
}
connect();

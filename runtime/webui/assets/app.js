// flowrun web UI: polls /api/v1/status and /api/v1/dlq, draws the flow
// graph as SVG (flowlets in topological columns, queues as edges) and
// offers scale, pause/resume and replay. No external code.
"use strict";

const SVGNS = "http://www.w3.org/2000/svg";
const NODE_W = 190, NODE_H = 92, COL_GAP = 190, ROW_GAP = 28, PAD = 24;
let selected = null;
let rowsFor = "";          // flowlet names the table rows were built for
let graphFor = "";         // graph structure the SVG was built for
let last = null;           // last status

function $(sel) { return document.querySelector(sel); }
function el(tag, attrs, text) {
  const e = document.createElement(tag);
  for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = text;
  return e;
}
function svg(tag, attrs, text) {
  const e = document.createElementNS(SVGNS, tag);
  for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = text;
  return e;
}
function fmt(n) {
  if (n === undefined || n === null) return "0";
  if (n >= 1e9) return (n / 1e9).toFixed(1) + "G";
  if (n >= 1e6) return (n / 1e6).toFixed(1) + "M";
  if (n >= 1e4) return (n / 1e3).toFixed(1) + "k";
  return String(Math.round(n));
}
function msg(text, ok) {
  const m = $("#msg");
  m.textContent = text;
  m.className = "msg " + (ok ? "ok" : "bad");
}

async function api(method, path, body) {
  const opts = { method, headers: {}, credentials: "same-origin" };
  if (body !== undefined) {
    opts.headers["Content-Type"] = "application/json";
    opts.body = JSON.stringify(body);
  }
  const r = await fetch(path, opts);
  let data = null;
  try { data = await r.json(); } catch (e) { /* not JSON */ }
  if (!r.ok) throw new Error((data && data.error) || (r.status + " " + r.statusText));
  return data;
}

// edges: one per (queue, consuming flowlet) between flowlets of the app.
function edgesOf(st) {
  const byQueue = {};
  for (const q of st.queues || []) byQueue[q.name] = q;
  const out = [];
  for (const f of st.flowlets) {
    for (const qn of f.inputs || []) {
      const q = byQueue[qn] || { name: qn, lag: {} };
      if (!q.producer) continue;
      out.push({ queue: qn, from: q.producer, to: f.name, lag: (q.lag || {})[f.name] || 0,
        strategy: (q.strategy || {})[f.name] || "" });
    }
  }
  return out;
}

// layout: column = longest path from a source; rows in status order.
function layout(st, edges) {
  const col = {};
  for (const f of st.flowlets) col[f.name] = 0;
  // flowlets come in topological order, so one pass in that order suffices;
  // repeat a few times anyway in case the order is not topological.
  for (let i = 0; i < st.flowlets.length; i++) {
    let changed = false;
    for (const e of edges) {
      if (col[e.from] !== undefined && col[e.to] < col[e.from] + 1) { col[e.to] = col[e.from] + 1; changed = true; }
    }
    if (!changed) break;
  }
  const cols = [];
  for (const f of st.flowlets) (cols[col[f.name]] = cols[col[f.name]] || []).push(f.name);
  const maxRows = Math.max(1, ...cols.map(c => (c || []).length));
  const height = PAD * 2 + maxRows * NODE_H + (maxRows - 1) * ROW_GAP;
  const pos = {};
  cols.forEach((names, c) => {
    const colH = names.length * NODE_H + (names.length - 1) * ROW_GAP;
    const y0 = (height - colH) / 2;
    names.forEach((n, r) => { pos[n] = { x: PAD + c * (NODE_W + COL_GAP), y: y0 + r * (NODE_H + ROW_GAP) }; });
  });
  return { pos, width: PAD * 2 + cols.length * NODE_W + (cols.length - 1) * COL_GAP, height };
}

function drawGraph(st) {
  const edges = edgesOf(st);
  const key = JSON.stringify([st.flowlets.map(f => f.name), edges.map(e => e.queue + ">" + e.to)]);
  const g = $("#graph");
  if (key !== graphFor) {
    graphFor = key;
    while (g.firstChild) g.removeChild(g.firstChild);
    const L = layout(st, edges);
    g.setAttribute("width", L.width);
    g.setAttribute("height", L.height);
    g.setAttribute("viewBox", `0 0 ${L.width} ${L.height}`);
    const defs = svg("defs");
    const marker = svg("marker", { id: "arrow", viewBox: "0 0 10 10", refX: "9", refY: "5", markerWidth: "7", markerHeight: "7", orient: "auto-start-reverse" });
    marker.appendChild(svg("path", { d: "M 0 0 L 10 5 L 0 10 z", fill: "#8d96a8" }));
    defs.appendChild(marker);
    g.appendChild(defs);
    const eg = svg("g", { class: "edges" });
    // Edges into one node from the same producer get spread vertically.
    for (const e of edges) {
      const a = L.pos[e.from], b = L.pos[e.to];
      if (!a || !b) continue;
      const x1 = a.x + NODE_W, y1 = a.y + NODE_H / 2, x2 = b.x - 2, y2 = b.y + NODE_H / 2;
      const dx = Math.max(40, (x2 - x1) / 2);
      const grp = svg("g", { class: "edge", "data-queue": e.queue, "data-to": e.to });
      grp.appendChild(svg("path", { d: `M ${x1} ${y1} C ${x1 + dx} ${y1}, ${x2 - dx} ${y2}, ${x2} ${y2}`, "marker-end": "url(#arrow)" }));
      // Labels end just before the consumer, above and below its arrow:
      // consumers sit at different heights, so labels do not collide.
      const lx = x2 - 10;
      grp.appendChild(svg("text", { x: lx, y: y2 - 7, "text-anchor": "end", class: "qname" }, e.queue));
      grp.appendChild(svg("text", { x: lx, y: y2 + 15, "text-anchor": "end", class: "lag" }, ""));
      eg.appendChild(grp);
    }
    g.appendChild(eg);
    const ng = svg("g", { class: "nodes" });
    for (const f of st.flowlets) {
      const p = L.pos[f.name];
      const n = svg("g", { class: "node", "data-flowlet": f.name, transform: `translate(${p.x},${p.y})` });
      n.appendChild(svg("rect", { class: "box", width: NODE_W, height: NODE_H, rx: 8 }));
      n.appendChild(svg("text", { x: 10, y: 18, class: "title" }, f.name));
      n.appendChild(svg("text", { x: 10, y: 33, class: "type" }, f.type + (f.source ? " · source" : "")));
      n.appendChild(svg("text", { x: 10, y: 52, class: "rate" }, ""));
      n.appendChild(svg("text", { x: 10, y: 68, class: "backlog" }, ""));
      n.appendChild(svg("text", { x: 10, y: 84, class: "errs" }, ""));
      const badge = svg("g", { class: "inst-badge", transform: `translate(${NODE_W - 18},18)` });
      badge.appendChild(svg("circle", { r: 12 }));
      badge.appendChild(svg("text", { "text-anchor": "middle", y: 4, class: "inst" }, ""));
      n.appendChild(badge);
      n.addEventListener("click", () => select(f.name));
      ng.appendChild(n);
    }
    g.appendChild(ng);
  }
  for (const f of st.flowlets) {
    const n = g.querySelector(`g.node[data-flowlet="${CSS.escape(f.name)}"]`);
    if (!n) continue;
    n.setAttribute("data-rate", String(f.events_per_second || 0));
    n.setAttribute("data-instances", String(f.instances));
    n.setAttribute("data-processed", String(f.processed || 0));
    n.setAttribute("data-dlq", String(f.dlq || 0));
    const errs = (f.failed || 0) > 0 || (f.dlq || 0) > 0;
    n.setAttribute("class", "node" + (f.source ? " source" : "") + (errs ? " errors" : "") + (f.paused ? " paused" : "") + (selected === f.name ? " selected" : ""));
    n.querySelector("text.rate").textContent = `${fmt(f.events_per_second)} ev/s · ${fmt(f.processed)} done`;
    // "pausing" while steps in flight finish; an older server sends no parked.
    const ps = f.paused ? ((f.parked || !f.busy) ? "paused" : "pausing") : "";
    n.querySelector("text.backlog").textContent = f.source ? ps : `backlog ${fmt(f.backlog)}${ps ? " · " + ps : ""}`;
    const et = n.querySelector("text.errs");
    et.textContent = `failed ${fmt(f.failed)} · dlq ${fmt(f.dlq)}`;
    et.setAttribute("class", "errs" + (errs ? " bad" : ""));
    n.querySelector("text.inst").textContent = "×" + f.instances;
  }
  for (const e of edges) {
    const grp = g.querySelector(`g.edge[data-queue="${CSS.escape(e.queue)}"][data-to="${CSS.escape(e.to)}"]`);
    if (!grp) continue;
    grp.setAttribute("data-lag", String(e.lag));
    grp.setAttribute("class", "edge" + (e.lag > 0 ? " backlog" : ""));
    grp.querySelector("text.lag").textContent = `${e.strategy} · ${fmt(e.lag)} waiting`;
  }
}

function select(name) {
  selected = selected === name ? null : name;
  if (last) { drawGraph(last); drawTable(last); }
}

function drawTable(st) {
  const tb = $("#flowlets tbody");
  const names = st.flowlets.map(f => f.name).join("\n");
  if (names !== rowsFor) {
    rowsFor = names;
    while (tb.firstChild) tb.removeChild(tb.firstChild);
    for (const f of st.flowlets) {
      const tr = el("tr", { "data-flowlet": f.name });
      tr.appendChild(el("td", {}, f.name));
      tr.appendChild(el("td", {}, f.type));
      for (const c of ["rate", "processed", "backlog", "failed", "dlq", "instances"]) tr.appendChild(el("td", { class: "num " + c }));
      const sc = el("td");
      if (!f.source) {
        const inp = el("input", { type: "number", min: "1", max: "64", class: "scale", id: "scale-input-" + f.name, value: String(f.instances) });
        const btn = el("button", { id: "scale-btn-" + f.name }, "Scale");
        btn.addEventListener("click", () => scale(f.name, parseInt(inp.value, 10), btn));
        inp.addEventListener("keydown", ev => { if (ev.key === "Enter") btn.click(); });
        sc.appendChild(inp); sc.appendChild(document.createTextNode(" ")); sc.appendChild(btn);
      } else {
        sc.appendChild(el("span", { class: "muted" }, "source"));
      }
      tr.appendChild(sc);
      const act = el("td");
      const pb = el("button", { id: "pause-btn-" + f.name }, "Pause");
      pb.addEventListener("click", () => pauseResume(f.name, pb));
      act.appendChild(pb);
      if (!f.source) {
        const rb = el("button", { id: "replay-btn-" + f.name }, "Replay DLQ");
        rb.addEventListener("click", () => replay(f.name, rb));
        act.appendChild(document.createTextNode(" "));
        act.appendChild(rb);
      }
      tr.appendChild(act);
      tr.addEventListener("click", ev => { if (ev.target.tagName === "TD") select(f.name); });
      tb.appendChild(tr);
    }
  }
  for (const f of st.flowlets) {
    const tr = tb.querySelector(`tr[data-flowlet="${CSS.escape(f.name)}"]`);
    if (!tr) continue;
    tr.className = selected === f.name ? "selected" : "";
    tr.querySelector(".rate").textContent = fmt(f.events_per_second);
    tr.querySelector(".processed").textContent = fmt(f.processed);
    tr.querySelector(".backlog").textContent = f.source ? "" : fmt(f.backlog);
    const fc = tr.querySelector(".failed"); fc.textContent = fmt(f.failed); fc.classList.toggle("err", (f.failed || 0) > 0);
    const dc = tr.querySelector(".dlq"); dc.textContent = fmt(f.dlq); dc.classList.toggle("err", (f.dlq || 0) > 0);
    tr.querySelector(".instances").textContent = String(f.instances);
    const pb = tr.querySelector(`#pause-btn-${CSS.escape(f.name)}`);
    if (pb) { pb.textContent = f.paused ? "Resume" : "Pause"; pb.dataset.paused = f.paused ? "1" : ""; }
    const rb = tr.querySelector(`#replay-btn-${CSS.escape(f.name)}`);
    if (rb) rb.disabled = !(f.dlq > 0);
  }
}

async function scale(name, n, btn) {
  if (!(n >= 1)) { msg("instances must be a number ≥ 1", false); return; }
  btn.disabled = true;
  msg(`scaling ${name} to ${n}…`, true);
  try {
    const r = await api("POST", `/api/v1/flowlets/${encodeURIComponent(name)}/scale`, { instances: n });
    msg(`${name}: ${r.previous} → ${r.instances} instances`, true);
    await refresh();
  } catch (e) {
    msg(`scale ${name}: ${e.message}`, false);
  } finally {
    btn.disabled = false;
  }
}

async function pauseResume(name, btn) {
  const op = btn.dataset.paused ? "resume" : "pause";
  try {
    await api("POST", `/api/v1/flowlets/${encodeURIComponent(name)}/${op}`);
    msg(`${name}: ${op}d`, true);
    await refresh();
  } catch (e) { msg(`${op} ${name}: ${e.message}`, false); }
}

async function replay(name, btn) {
  btn.disabled = true;
  try {
    const r = await api("POST", `/api/v1/dlq/${encodeURIComponent(name)}/replay`);
    msg(`${name}: replayed ${r.replayed} dead letter(s), kept ${r.kept}`, true);
    await refresh(); await refreshDLQ();
  } catch (e) { msg(`replay ${name}: ${e.message}`, false); }
}

function drawTx(st) {
  const t = st.tx || {};
  $("#tx").textContent = `${fmt(t.committed)} committed · ${fmt(t.aborted)} aborted · ${fmt(t.conflicts)} conflicts · ` +
    `${t.in_progress || 0} in progress · commit p50 ${(t.commit_p50_ms || 0).toFixed(2)} ms, p99 ${(t.commit_p99_ms || 0).toFixed(2)} ms`;
}

async function refresh() {
  try {
    const st = await api("GET", "/api/v1/status");
    last = st;
    $("#app-name").textContent = st.app;
    document.title = "flowrun · " + st.app;
    const rate = st.flowlets.filter(f => f.source).reduce((a, f) => a + (f.events_per_second || 0), 0);
    $("#summary").textContent = `${st.ready ? "running" : (st.drained ? "drained" : "starting")} · up ${Math.round(st.uptime_seconds)}s · sources ${fmt(rate)} ev/s · ${st.flowlets.length} flowlets`;
    const c = $("#conn"); c.textContent = "live"; c.className = "conn";
    drawGraph(st);
    drawTable(st);
    drawTx(st);
  } catch (e) {
    const c = $("#conn"); c.textContent = "disconnected: " + e.message; c.className = "conn bad";
  }
}

async function refreshDLQ() {
  try {
    const ds = await api("GET", "/api/v1/dlq?limit=20");
    const tb = $("#dlq tbody");
    while (tb.firstChild) tb.removeChild(tb.firstChild);
    const total = last ? last.flowlets.reduce((a, f) => a + (f.dlq || 0), 0) : ds.length;
    $("#dlq-count").textContent = total ? `(${total} waiting; first 20 per flowlet shown)` : "(none)";
    for (const d of ds) {
      const tr = el("tr");
      tr.appendChild(el("td", {}, d.flowlet));
      tr.appendChild(el("td", {}, d.input || "—"));
      tr.appendChild(el("td", { class: "err" }, d.error));
      tr.appendChild(el("td", { class: "num" }, String(d.attempts)));
      tr.appendChild(el("td", {}, new Date(d.time).toLocaleTimeString()));
      const p = d.payload.text !== undefined ? d.payload.text : "base64:" + d.payload.base64;
      tr.appendChild(el("td", { class: "payload", title: p }, p));
      tb.appendChild(tr);
    }
  } catch (e) { /* shown by refresh */ }
}

refresh();
refreshDLQ();
setInterval(refresh, 1000);
setInterval(refreshDLQ, 3000);

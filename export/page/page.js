// The live page of adstap's admin address. Everything shown comes from
// /debug/streams and /debug/pushes, polled every second; every string from
// the wire goes into the page as text (textContent, setAttribute), never as
// markup.
"use strict";

const POLL_MS = 1000;
const TYPE_ORDER = ["cds", "lds", "eds", "rds", "sds", "ecds"];
let selected = null; // the stream whose timeline is shown
let lastStreams = [];

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else e.setAttribute(k, v);
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    e.append(typeof c === "string" || typeof c === "number" ? document.createTextNode(String(c)) : c);
  }
  return e;
}

function svg(tag, attrs) {
  const e = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  return e;
}

function age(now, t) {
  if (!t) return "";
  let ms = new Date(now) - new Date(t);
  if (ms < 0) ms = 0;
  if (ms < 1000) return ms + "ms";
  const s = Math.floor(ms / 1000);
  if (s < 60) return s + "s";
  if (s < 3600) return Math.floor(s / 60) + "m" + (s % 60) + "s";
  if (s < 86400) return Math.floor(s / 3600) + "h" + Math.floor((s % 3600) / 60) + "m";
  return Math.floor(s / 86400) + "d" + Math.floor((s % 86400) / 3600) + "h";
}

function latency(sec) {
  if (sec === null || sec === undefined) return "";
  if (sec < 0.001) return (sec * 1000).toFixed(2) + "ms";
  if (sec < 1) return Math.round(sec * 1000) + "ms";
  return sec.toFixed(sec < 10 ? 2 : 1) + "s";
}

function size(n) {
  if (n < 1000) return n + " B";
  if (n < 1e6) return (n / 1e3).toFixed(1) + " kB";
  return (n / 1e6).toFixed(1) + " MB";
}

// proxyName is istioctl's name for an Istio node, pod.namespace, or the node id.
function proxyName(s) {
  if (!s.node_id) return "(no node yet)";
  const parts = s.node_id.split("~");
  return parts.length === 4 && parts[2] ? parts[2] : s.node_id;
}

function controlPlane(id) {
  if (!id) return "";
  if (id.startsWith("{")) {
    try {
      const v = JSON.parse(id);
      if (v && typeof v.ID === "string" && v.ID) return v.ID;
    } catch (e) { /* not istiod's JSON: shown as is */ }
  }
  return id;
}

function typeColumns(streams) {
  const seen = new Set();
  for (const s of streams) for (const ts of Object.values(s.types)) {
    if (ts.type !== "syncz") seen.add(ts.type);
  }
  const cols = TYPE_ORDER.filter((t) => seen.has(t));
  for (const t of [...seen].sort()) if (!cols.includes(t)) cols.push(t);
  return cols;
}

// worst orders the streams: NACKED first, then STALE, then the rest.
function worst(s) {
  let w = 2;
  for (const ts of Object.values(s.types)) {
    if (ts.state === "NACKED") return 0;
    if (ts.state === "STALE") w = 1;
  }
  return w;
}

function renderStreams(page) {
  const streams = page.streams.slice().sort((a, b) => worst(a) - worst(b) || a.id - b.id);
  lastStreams = streams;
  const cols = typeColumns(streams);
  const head = document.querySelector("#streams thead tr");
  head.replaceChildren(
    el("th", {}, "stream"), el("th", {}, "proxy"), el("th", {}, "protocol"),
    ...cols.map((c) => el("th", {}, c.toUpperCase())),
    el("th", {}, "control plane"), el("th", {}, "version"), el("th", {}, "last NACK"));
  const rows = streams.map((s) => {
    const byShort = {};
    for (const ts of Object.values(s.types)) byShort[ts.type] = ts;
    let nack = null, source = null;
    for (const c of cols) {
      const ts = byShort[c];
      if (ts && ts.state === "NACKED" && ts.last_error) {
        nack = c.toUpperCase() + ": " + ts.last_error;
        // The Istio object the rejected resources came from, as istiod recorded it.
        source = (ts.last_error_source && ts.last_error_source.summary) || null;
      }
    }
    const cells = cols.map((c) => {
      const ts = byShort[c];
      if (!ts) return el("td", { class: "state none", "data-type": c }, "-");
      const when = { SYNCED: ts.last_ack_at, STALE: ts.last_sent_at, NACKED: ts.last_nack_at }[ts.state];
      const label = ts.state === "NACKED" ? "ERROR" : ts.state === "NOT_SENT" ? "NOT SENT" : ts.state;
      const td = el("td", { class: "state " + ts.state, "data-type": c, "data-state": ts.state }, label,
        when ? el("span", { class: "age" }, age(page.now, when)) : null);
      td.title = "sent " + ts.last_sent_version + ", running " + (ts.last_acked_version || "nothing yet") +
        "; " + ts.pushes + " pushes, " + ts.acks + " ACKs, " + ts.nacks + " NACKs";
      return td;
    });
    const tr = el("tr", { "data-stream": s.id },
      el("td", {}, s.id),
      el("td", { title: s.node_id || "" }, proxyName(s)),
      el("td", {}, s.protocol),
      ...cells,
      el("td", {}, controlPlane(s.control_plane)),
      el("td", {}, s.istio_version || s.user_agent || ""),
      nackCell(nack, source));
    if (s.id === selected) tr.classList.add("selected");
    tr.addEventListener("click", () => select(s.id));
    return tr;
  });
  document.querySelector("#streams tbody").replaceChildren(...rows);
  document.getElementById("no-streams").hidden = streams.length > 0;
  document.getElementById("streams").hidden = streams.length === 0;
}

// nackCell shows a NACK's message, long ones cut short, then its source
// whole; the whole message is the cell's tooltip and in the timeline.
const NACK_CHARS = 240;
function nackCell(message, source) {
  const td = el("td", { class: "error" });
  if (!message) return td;
  const suffix = source ? " — " + source : "";
  td.textContent = (message.length > NACK_CHARS ? message.slice(0, NACK_CHARS) + "…" : message) + suffix;
  td.title = message + suffix;
  return td;
}

function renderDetectors(page) {
  const active = page.detectors.filter((d) => d.active);
  const names = { nack_storm: "NACK storm", nack_loop: "NACK loop", repeated_full_sync: "repeated full sync", reconnect_herd: "reconnect herd" };
  document.querySelector("#detectors tbody").replaceChildren(...active.map((d) =>
    el("tr", { "data-detector": d.detector },
      el("td", {}, names[d.detector] || d.detector), el("td", {}, d.key), el("td", {}, d.node || ""),
      el("td", {}, age(page.now, d.since) + " ago"), el("td", {}, d.count))));
  document.getElementById("detectors").hidden = active.length === 0;
  document.getElementById("no-detectors").hidden = active.length > 0;
}

// renderUpstream shows the control plane the tap cannot reach: with it
// failing no proxy gets a stream, so the table alone would look empty and
// calm.
function renderUpstream(page) {
  const up = page.upstream || { state: "unknown" };
  const failing = up.state === "failing";
  document.getElementById("upstream-section").hidden = !failing;
  if (!failing) return false;
  const p = document.getElementById("upstream");
  p.dataset.reason = up.reason || "";
  p.textContent = "Upstream " + (up.address || "") + " FAILING: " + (up.words || up.reason) + "; " +
    up.failed_attempts + (up.failed_attempts === 1 ? " attempt" : " attempts") + " failed since the last success" +
    (up.last_failure ? ", the latest " + age(page.now, up.last_failure) + " ago" : "") + ".";
  document.getElementById("upstream-error").textContent = up.error || "";
  return true;
}

function describePush(p) {
  const outcome = p.result ? p.result.toUpperCase() + " after " + latency(p.latency_seconds) : "waiting for its answer";
  const lines = [
    p.type.toUpperCase() + " version " + p.version,
    outcome,
    size(p.bytes) + ", " + p.resources + " resources, +" + p.added + " -" + p.removed + " ~" + p.changed +
      (p.full_sync ? ", full" : "") + (p.redundant ? ", redundant" : ""),
    "sent " + new Date(p.sent_at).toISOString().replace("T", " ").replace("Z", " UTC"),
    "nonce " + p.nonce,
  ];
  if (p.error) lines.push("rejected: " + p.error);
  return lines.join("\n");
}

let drawn = ""; // what the timeline shows now, to redraw only on a change

function renderTimeline(page) {
  const pushes = page.pushes;
  const key = page.stream + " " + JSON.stringify(pushes);
  if (key === drawn) return; // unchanged: keep the marks, and a hover on one
  drawn = key;
  const lanes = [...new Set(pushes.map((p) => p.type))]
    .sort((a, b) => (TYPE_ORDER.indexOf(a) + 1 || 99) - (TYPE_ORDER.indexOf(b) + 1 || 99) || a.localeCompare(b));
  const left = 60, step = 24, laneH = 30, top = 10;
  const width = Math.max(400, left + step * (pushes.length + 1));
  const height = top + laneH * Math.max(lanes.length, 1) + 30;
  const root = svg("svg", { width, height, viewBox: "0 0 " + width + " " + height, role: "img" });
  const title = svg("title");
  title.textContent = "the latest " + pushes.length + " pushes of stream " + page.stream;
  root.append(title);
  lanes.forEach((lane, i) => {
    const y = top + laneH * i + laneH / 2;
    root.append(svg("line", { class: "lane", x1: left, x2: width - 10, y1: y, y2: y }));
    const label = svg("text", { x: 8, y: y + 4 });
    label.textContent = lane.toUpperCase();
    root.append(label);
  });
  const tip = document.getElementById("tooltip");
  tip.hidden = true; // its mark is being replaced
  pushes.forEach((p, i) => {
    const x = left + step * (i + 1) - step / 2;
    const y = top + laneH * lanes.indexOf(p.type) + laneH / 2;
    const result = p.result || "pending";
    const r = 5 + Math.min(4, Math.log10(Math.max(p.bytes, 1)) - 2);
    const mark = svg("circle", { class: "mark " + result, cx: x, cy: y, r: Math.max(4, r), "data-result": result, "data-type": p.type });
    const text = describePush(p);
    const t = svg("title");
    t.textContent = text;
    mark.append(t);
    mark.addEventListener("mouseenter", (ev) => {
      tip.textContent = text;
      tip.hidden = false;
      // Beside the mark, but inside the window.
      const x = Math.min(ev.clientX + 12, window.innerWidth - tip.offsetWidth - 8);
      const y = Math.min(ev.clientY + 12, window.innerHeight - tip.offsetHeight - 8);
      tip.style.left = Math.max(0, x) + "px";
      tip.style.top = Math.max(0, y) + "px";
    });
    mark.addEventListener("mouseleave", () => { tip.hidden = true; });
    root.append(mark);
    if (i % 8 === 0 || i === pushes.length - 1) {
      const label = svg("text", { x: x - 20, y: height - 8 });
      label.textContent = new Date(p.sent_at).toLocaleTimeString([], { hour12: false });
      root.append(label);
    }
  });
  document.getElementById("timeline").replaceChildren(root);
  const s = lastStreams.find((s) => s.id === page.stream);
  document.getElementById("timeline-title").textContent =
    "Timeline of stream " + page.stream + (s ? " (" + proxyName(s) + ")" : "") + ": " + pushes.length + " latest pushes";
  document.getElementById("timeline-section").hidden = false;
}

function select(id) {
  selected = id;
  history.replaceState(null, "", "#stream=" + id);
  for (const tr of document.querySelectorAll("#streams tbody tr")) {
    tr.classList.toggle("selected", Number(tr.dataset.stream) === id);
  }
  refreshTimeline();
}

async function getJSON(path) {
  const r = await fetch(path, { cache: "no-store" });
  if (!r.ok) throw new Error(path + ": " + r.status);
  return r.json();
}

async function refreshTimeline() {
  if (selected === null) return;
  try {
    renderTimeline(await getJSON("/debug/pushes?stream=" + selected));
  } catch (e) {
    document.getElementById("timeline-section").hidden = true;
  }
}

async function refresh() {
  const conn = document.getElementById("conn");
  try {
    const page = await getJSON("/debug/streams");
    const upstreamFailing = renderUpstream(page);
    renderDetectors(page);
    if (selected === null || !page.streams.some((s) => s.id === selected)) {
      const m = /stream=(\d+)/.exec(location.hash);
      const wanted = m && page.streams.find((s) => s.id === Number(m[1]));
      const first = page.streams.slice().sort((a, b) => worst(a) - worst(b) || a.id - b.id)[0];
      selected = wanted ? wanted.id : first ? first.id : null;
    }
    renderStreams(page);
    await refreshTimeline();
    const nacked = page.streams.filter((s) => worst(s) === 0).length;
    document.getElementById("summary").textContent =
      (upstreamFailing ? "upstream FAILING, " : "") +
      page.streams.length + " streams, " + nacked + " with a NACK, " +
      page.detectors.filter((d) => d.active).length + " active detectors";
    conn.textContent = "updated " + new Date(page.now).toLocaleTimeString();
    conn.classList.remove("down");
    document.body.dataset.updates = String(Number(document.body.dataset.updates || 0) + 1);
  } catch (e) {
    conn.textContent = "cannot reach the tap: retrying";
    conn.classList.add("down");
  }
  setTimeout(refresh, POLL_MS);
}

refresh();

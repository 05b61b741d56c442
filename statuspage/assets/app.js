// SPDX-License-Identifier: MIT
// mptun status page: polls api/status (control.Status, as `mptun status
// --json` prints it) every second, shows the connections and their paths
// and draws per-path throughput and RTT over the last KEEP samples.
'use strict';

const POLL_MS = 1000;
const KEEP = 120;
const COLORS = ['#1f77b4', '#d62728', '#2ca02c', '#9467bd', '#ff7f0e', '#17becf', '#8c564b', '#e377c2'];

const series = new Map(); // path key -> {label, color, rx[], tx[], rtt[]}
let prev = null; // {t, bytes: Map(key -> {rx, tx}), conns: Map(ci -> {rx, tx})}
let polls = 0;

function $(id) { return document.getElementById(id); }

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === 'class') e.className = v;
    else if (k === 'style') e.style.cssText = v;
    else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
}

function fmt(v, digits) {
  if (v === null || v === undefined || !Number.isFinite(v)) return '–';
  return v.toFixed(digits);
}

function duration(s) {
  s = Math.floor(s);
  const d = Math.floor(s / 86400), h = Math.floor(s % 86400 / 3600), m = Math.floor(s % 3600 / 60);
  if (d) return `${d}d ${h}h`;
  if (h) return `${h}h ${m}m`;
  return `${m}m ${s % 60}s`;
}

function pathKey(conn, p) {
  return `${conn.local_ci}/${p.name || p.id}`;
}

function pathLabel(st, conn, p) {
  const name = p.name || `path ${p.id}`;
  return st.connections.length > 1 ? `${conn.peer_ci.toString(16).padStart(8, '0')} ${name}` : name;
}

function isUp(p) {
  return p.state === 'open' && !p.failed && !p.suspect;
}

// update turns one status sample into rates, series and the page.
function update(st, t) {
  const dt = prev ? (t - prev.t) / 1000 : 0;
  const bytes = new Map(), connBytes = new Map();
  const rates = new Map();
  const live = new Set();
  for (const conn of st.connections || []) {
    connBytes.set(conn.local_ci, {rx: conn.delivered_bytes, tx: conn.sent_bytes});
    for (const p of conn.paths || []) {
      const key = pathKey(conn, p);
      live.add(key);
      const b = {rx: p.bytes_received || 0, tx: p.bytes_sent || 0};
      bytes.set(key, b);
      let rx = null, tx = null;
      const pb = prev && prev.bytes.get(key);
      if (pb && dt > 0) {
        rx = Math.max(0, b.rx - pb.rx) * 8 / dt / 1e6;
        tx = Math.max(0, b.tx - pb.tx) * 8 / dt / 1e6;
      }
      rates.set(key, {rx, tx});
      let s = series.get(key);
      if (!s) {
        s = {label: '', color: COLORS[series.size % COLORS.length], rx: [], tx: [], rtt: []};
        series.set(key, s);
      }
      s.label = pathLabel(st, conn, p);
      push(s.rx, rx);
      push(s.tx, tx);
      push(s.rtt, isUp(p) ? p.rtt_ms : null);
    }
  }
  // Paths that went away keep their history but get gaps.
  for (const [key, s] of series) {
    if (!live.has(key)) { push(s.rx, null); push(s.tx, null); push(s.rtt, null); }
  }
  const connRates = new Map();
  for (const [ci, b] of connBytes) {
    const pb = prev && prev.conns.get(ci);
    connRates.set(ci, pb && dt > 0 ? {rx: Math.max(0, b.rx - pb.rx) * 8 / dt / 1e6, tx: Math.max(0, b.tx - pb.tx) * 8 / dt / 1e6} : {rx: null, tx: null});
  }
  prev = {t, bytes, conns: connBytes};
  render(st, rates, connRates);
}

function push(a, v) {
  a.push(v);
  if (a.length > KEEP) a.shift();
}

function render(st, rates, connRates) {
  $('summary').textContent = `${st.role} · ${st.tunnel} · inner MTU ${st.inner_mtu} · up ${duration(st.uptime_s)}`;
  const conns = $('conns');
  conns.replaceChildren();
  $('noconn').hidden = (st.connections || []).length > 0;
  for (const conn of st.connections || []) conns.append(connCard(st, conn, rates, connRates.get(conn.local_ci)));
  const legend = $('legend');
  legend.replaceChildren();
  for (const s of series.values()) legend.append(el('span', {}, el('i', {style: `background:${s.color}`}), s.label));
  draw($('rate-chart'), [...series.values()].flatMap(s => [{color: s.color, data: s.rx}, {color: s.color, data: s.tx, dash: true}]));
  draw($('rtt-chart'), [...series.values()].map(s => ({color: s.color, data: s.rtt})));
}

function connCard(st, conn, rates, cr) {
  const up = (conn.paths || []).filter(isUp).length;
  const stateCls = conn.state === 'open' && up > 0 ? 'ok' : 'bad';
  const head = el('h2', {}, `Connection ${conn.peer_ci.toString(16).padStart(8, '0')}`,
    el('span', {class: `badge ${stateCls}`, 'data-field': 'conn-state'}, conn.state),
    el('span', {class: 'muted'}, `${up} of ${(conn.paths || []).length} paths up`));
  const r = conn.reorder || {};
  const facts = el('div', {class: 'facts'},
    fact('received', `${fmt(cr.rx, 2)} Mbit/s`, 'conn-rx'),
    fact('sent', `${fmt(cr.tx, 2)} Mbit/s`, 'conn-tx'),
    fact('scheduler', conn.scheduler),
    fact('reorderer', conn.reorderer),
    fact('queued', conn.queued),
    fact('held in reorder buffer', r.Buffered ?? 0),
    fact('gaps skipped', r.GapsSkipped ?? 0),
    fact('repaired', conn.repaired ?? 0),
    fact('repair requests sent', conn.nacks_sent ?? 0));
  const table = el('table', {class: 'paths'});
  table.append(el('thead', {}, el('tr', {},
    ...['path', 'state', 'local → remote', 'prio', 'ccid', 'received Mbit/s', 'sent Mbit/s', 'delivery Mbit/s', 'RTT ms', 'min RTT ms', 'loss %', 'cwnd / in flight', 'heard ms ago']
      .map((h, i) => el('th', {class: ['', 'state', 'addr', '', 'cc'][i] || ''}, h)))));
  const body = el('tbody');
  for (const p of conn.paths || []) {
    const key = pathKey(conn, p);
    const s = series.get(key);
    const pr = rates.get(key) || {};
    const state = p.failed ? 'failed' : p.suspect ? 'suspect' : p.state;
    body.append(el('tr', {class: 'path', 'data-path': p.name || String(p.id)},
      el('td', {}, el('span', {class: 'swatch', style: `background:${s ? s.color : '#999'}`}), p.name || `#${p.id}`),
      el('td', {class: `state ${isUp(p) ? 'up' : 'down'}`, 'data-field': 'state'}, state),
      el('td', {class: 'addr'}, `${p.local} → ${p.remote}`),
      el('td', {}, p.prio),
      el('td', {class: 'cc'}, `${p.ccid}${p.phase ? ' ' + p.phase : ''}`),
      el('td', {'data-field': 'rx'}, fmt(pr.rx, 2)),
      el('td', {'data-field': 'tx'}, fmt(pr.tx, 2)),
      el('td', {}, fmt(p.rate_mbps, 2)),
      el('td', {'data-field': 'rtt'}, fmt(p.rtt_ms, 1)),
      el('td', {}, fmt(p.min_rtt_ms, 1)),
      el('td', {}, fmt(p.loss_pct, 2)),
      el('td', {}, `${p.cwnd} / ${p.in_flight}`),
      el('td', {}, fmt(p.last_heard_ms_ago, 0))));
  }
  table.append(body);
  return el('section', {class: 'conn', 'data-ci': String(conn.local_ci)}, head, facts, el('div', {class: 'scroll'}, table));
}

function fact(label, value, field) {
  const attrs = field ? {'data-field': field} : {};
  return el('span', {}, `${label} `, el('b', attrs, value));
}

// draw plots lines of KEEP samples (null = gap) with a zero-based y axis.
function draw(canvas, lines) {
  const dpr = window.devicePixelRatio || 1;
  const w = canvas.clientWidth || canvas.width, h = canvas.clientHeight || canvas.height;
  canvas.width = Math.round(w * dpr);
  canvas.height = Math.round(h * dpr);
  const g = canvas.getContext('2d');
  g.setTransform(dpr, 0, 0, dpr, 0, 0);
  g.clearRect(0, 0, w, h);
  const left = 40, right = 8, top = 8, bottom = 20;
  let max = 0;
  for (const l of lines) for (const v of l.data) if (v !== null && v > max) max = v;
  max = niceMax(max);
  g.font = '11px system-ui, sans-serif';
  g.fillStyle = '#667085';
  g.strokeStyle = '#e3e6eb';
  g.lineWidth = 1;
  for (let i = 0; i <= 4; i++) {
    const y = top + (h - top - bottom) * (1 - i / 4);
    g.beginPath(); g.moveTo(left, y); g.lineTo(w - right, y); g.stroke();
    g.textAlign = 'right'; g.textBaseline = 'middle';
    const step = max / 4;
    g.fillText((step * i).toFixed(Number.isInteger(step) ? 0 : step < 1 ? 2 : 1), left - 6, y);
  }
  g.textAlign = 'left'; g.textBaseline = 'top';
  g.fillText(`−${KEEP} s`, left, h - bottom + 5);
  g.textAlign = 'right';
  g.fillText('now', w - right, h - bottom + 5);
  const x = i => left + (w - left - right) * i / (KEEP - 1);
  const y = v => top + (h - top - bottom) * (1 - v / max);
  for (const l of lines) {
    const off = KEEP - l.data.length;
    g.strokeStyle = l.color;
    g.lineWidth = 2;
    g.setLineDash(l.dash ? [5, 4] : []);
    g.beginPath();
    let pen = false;
    l.data.forEach((v, i) => {
      if (v === null) { pen = false; return; }
      if (pen) g.lineTo(x(off + i), y(v)); else g.moveTo(x(off + i), y(v));
      pen = true;
    });
    g.stroke();
  }
  g.setLineDash([]);
}

function niceMax(v) {
  if (!(v > 0)) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 4, 6, 8, 10]) if (v <= m * p) return m * p;
  return 10 * p;
}

async function poll() {
  const badge = $('live');
  try {
    const r = await fetch('api/status', {cache: 'no-store'});
    const body = await r.json();
    if (!r.ok) throw new Error(body.error || r.statusText);
    update(body, performance.now());
    polls++;
    badge.className = 'badge ok';
    badge.textContent = `live · ${new Date().toLocaleTimeString()}`;
  } catch (e) {
    badge.className = 'badge bad';
    badge.textContent = `no data: ${e.message}`;
  }
  badge.dataset.polls = String(polls);
  setTimeout(poll, POLL_MS);
}

poll();

// ctxmgr inspector: draws the pages from the JSON under /ui/api/ and keeps them current by
// polling /ui/api/rev (a counter of the requests recorded). No framework, nothing fetched
// from elsewhere.
'use strict';

const $ = (sel, root = document) => root.querySelector(sel);
const fmt = new Intl.NumberFormat('en-US');
const num = (n) => fmt.format(Math.round(n || 0));
const pct = (n) => (n || 0).toFixed(1) + '%';

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k === 'text') e.textContent = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

async function getJSON(path) {
  const r = await fetch(path, { credentials: 'same-origin', headers: { Accept: 'application/json' } });
  if (!r.ok) {
    let msg = r.status + ' ' + r.statusText;
    try { const j = await r.json(); if (j.error) msg = j.error; } catch (_) { /* not JSON */ }
    throw new Error(msg);
  }
  return r.json();
}

function ago(iso) {
  const t = Date.parse(iso);
  if (!t || t < 0) return '–';
  const s = Math.max(0, (Date.now() - t) / 1000);
  if (s < 60) return Math.floor(s) + ' s ago';
  if (s < 3600) return Math.floor(s / 60) + ' min ago';
  if (s < 86400) return Math.floor(s / 3600) + ' h ago';
  return Math.floor(s / 86400) + ' d ago';
}

function timeOf(iso) {
  const d = new Date(iso);
  return isNaN(d) ? '' : d.toLocaleTimeString('en-GB', { hour: '2-digit', minute: '2-digit', second: '2-digit', hourCycle: 'h23' });
}

function meter(value, max, label) {
  const m = el('span', { class: 'meter', role: 'img', 'aria-label': label });
  const f = el('span', { class: 'meter-fill' });
  f.style.width = Math.max(0, Math.min(100, max > 0 ? value * 100 / max : 0)) + '%';
  m.append(f);
  return m;
}

// Live refresh: poll the record counter; redraw when it moved.
function live(refresh) {
  let rev = null;
  let busy = false;
  const note = $('#live-note');
  async function tick() {
    if (busy) return;
    busy = true;
    try {
      const r = await getJSON('/ui/api/rev');
      if (rev !== null && r.rev !== rev) await refresh();
      rev = r.rev;
      if (note && note.classList.contains('stale')) { note.textContent = 'Live: refreshed as requests arrive.'; note.classList.remove('stale'); }
    } catch (_) {
      if (note) { note.textContent = 'Not live: the proxy does not answer.'; note.classList.add('stale'); }
    } finally {
      busy = false;
    }
  }
  tick();
  setInterval(tick, 2000);
}

// ---- list ----

async function listPage() {
  const q = $('#q');
  const params = new URLSearchParams(location.search);
  q.value = params.get('q') || '';
  let timer = null;
  async function draw() {
    const status = $('#list-status');
    let data;
    try {
      data = await getJSON('/ui/api/sessions?q=' + encodeURIComponent(q.value));
    } catch (e) {
      status.textContent = 'Could not load the sessions: ' + e.message;
      return;
    }
    const body = $('#sessions tbody');
    body.replaceChildren();
    for (const s of data.sessions) {
      const size = s.last_window > 0
        ? el('span', { class: 'size' }, meter(s.last_sent, s.last_window, num(s.last_sent) + ' of ' + num(s.last_window) + ' tokens'), ' ' + num(s.last_sent) + ' / ' + num(s.last_window))
        : el('span', { class: 'muted' }, '–');
      const saved = s.cost_all > 0 ? num(s.saved) + ' (' + pct(s.saved_percent) + ')' : '–';
      body.append(el('tr', {},
        el('th', { scope: 'row' }, el('a', { href: '/ui/sessions/' + encodeURIComponent(s.id) }, s.id), s.live ? el('span', { class: 'badge live' }, 'live') : null),
        el('td', {}, s.model || '–'), el('td', {}, s.client || '–'),
        el('td', { class: 'num' }, num(s.messages)), el('td', {}, size),
        el('td', {}, el('time', { datetime: s.last_activity, title: s.last_activity }, ago(s.last_activity))),
        el('td', { class: 'num' }, num(s.requests)), el('td', { class: 'num' }, saved)));
    }
    const n = data.sessions.length;
    status.textContent = n === 0 ? (q.value ? 'No session matches “' + q.value + '”.' : 'No sessions yet.')
      : n + (n === 1 ? ' session' : ' sessions') + (q.value ? ' matching “' + q.value + '”' : '') + (data.truncated ? ' (the 500 most recent considered)' : '') + '.';
  }
  q.addEventListener('input', () => {
    clearTimeout(timer);
    timer = setTimeout(() => {
      const u = new URL(location.href);
      if (q.value) u.searchParams.set('q', q.value); else u.searchParams.delete('q');
      history.replaceState(null, '', u);
      draw();
    }, 200);
  });
  $('#search-form').addEventListener('submit', (e) => { e.preventDefault(); draw(); });
  await draw();
  document.body.dataset.ready = 'yes';
  live(draw);
}

// ---- session ----

const regions = [
  ['system', 'System prompt'], ['tools', 'Tool definitions'], ['summary', 'Summary'],
  ['history', 'History'], ['reserve', 'Reply reserve'], ['free', 'Free'],
];

function drawWindow(w) {
  const vals = { system: w.system, tools: w.tools, summary: w.summary, history: w.history, reserve: w.max_output, free: Math.max(0, w.free) };
  const bar = $('#window-bar');
  bar.replaceChildren();
  bar.setAttribute('aria-label', 'Window of ' + num(w.window) + ' tokens: ' + regions.map(([k, name]) => name + ' ' + num(vals[k])).join(', '));
  for (const [k, name] of regions) {
    if (!vals[k]) continue;
    const seg = el('span', { class: 'seg seg-' + k, title: name + ': ' + num(vals[k]) + ' tokens' });
    seg.style.width = (vals[k] * 100 / w.window) + '%';
    bar.append(seg);
  }
  const body = $('#window-table tbody');
  body.replaceChildren();
  for (const [k, name] of regions) {
    body.append(el('tr', { class: 'region-' + k },
      el('th', { scope: 'row' }, el('span', { class: 'swatch seg-' + k, 'aria-hidden': 'true' }), name),
      el('td', { class: 'num' }, num(vals[k])), el('td', { class: 'num' }, pct(vals[k] * 100 / w.window))));
  }
  body.append(el('tr', { class: 'total' }, el('th', { scope: 'row' }, 'Input (next request)'),
    el('td', { class: 'num' }, num(w.input)), el('td', { class: 'num' }, pct(w.use_percent))));
  body.append(el('tr', { class: 'total' }, el('th', { scope: 'row' }, 'Window'),
    el('td', { class: 'num' }, num(w.window)), el('td', { class: 'num' }, '100.0%')));
  $('#window-note').textContent = w.free < 0 ? 'Over the window by ' + num(-w.free) + ' tokens: the pipeline will shrink the next request.' : '';
}

function drawMoney(m) {
  const dl = $('#money');
  dl.replaceChildren();
  const row = (k, v, cls) => { dl.append(el('dt', {}, k), el('dd', { class: cls }, v)); };
  row('Cost so far', num(m.cost));
  row('Sending everything', num(m.cost_all));
  row('Saved', m.cost_all > 0 ? num(m.saved) + ' (' + pct(m.saved_percent) + ')' : '–', m.saved >= 0 ? 'good' : 'bad');
  row('Price profile', 'uncached ' + m.prices.uncached + ', cached ' + m.prices.cached);
  if (m.over_window) row('Client requests over the window', num(m.over_window) + ' (sending everything, these would have been refused)', 'bad');
  $('#money-note').textContent = 'In base-price input tokens (multiply by the provider’s input price).' +
    (m.estimated ? ' Requests whose answers reported no cache figures are estimated.' : '');
}

const stepNames = {
  summarize: 'compaction', compact: 'compaction (/compact)', mask: 'masked', offload: 'offloaded',
  retruncate: 're-truncated', supersede: 'superseded', truncate: 'truncated', recover: 'overflow recovery',
  clear: 'cleared', skip: 'skipped', 'summarizer-fallback': 'summarizer fallback',
};

function drawTimeline(tl) {
  const body = $('#timeline tbody');
  body.replaceChildren();
  const max = Math.max(1, ...tl.requests.map((r) => Math.max(r.raw, r.sent)));
  const stepList = (steps) => {
    if (!steps.length) return el('span', { class: 'muted' }, '–');
    const ul = el('ul', { class: 'steps' });
    for (const s of steps) {
      const name = stepNames[s.step] || s.step;
      ul.append(el('li', { class: 'step step-' + s.step },
        el('strong', {}, name), ' ' + (s.freed > 0 ? 'freed ' + num(s.freed) : 'freed 0') +
        (s.messages ? ' · ' + num(s.messages) + ' msg' : '') +
        (s.expected_saving ? ' · expected saving ' + num(s.expected_saving) : ''),
        s.reason ? el('span', { class: 'reason' }, ' — ' + s.reason) : null));
    }
    return ul;
  };
  if (tl.earlier && tl.earlier.length) {
    body.append(el('tr', {}, el('td', { class: 'num' }, '–'), el('td', { colspan: '5', class: 'muted' }, 'Before the first recorded request'),
      el('td', {}, stepList(tl.earlier)), el('td', {})));
  }
  for (const r of tl.requests) {
    const bars = el('span', { class: 'pair' },
      meter(r.raw, max, 'client sent ' + num(r.raw)), meter(r.sent, max, 'sent ' + num(r.sent)));
    bars.lastChild.classList.add('sent');
    body.append(el('tr', { class: r.managed ? '' : 'local' },
      el('td', { class: 'num' }, r.n),
      el('td', {}, el('time', { datetime: r.start }, timeOf(r.start)), r.managed ? null : el('span', { class: 'badge' }, 'answered by ctxmgr'),
        r.recovered ? el('span', { class: 'badge warn' }, 'recovered') : null, r.reads ? el('span', { class: 'badge' }, r.reads + ' read') : null),
      el('td', { class: 'num' }, r.managed ? num(r.raw) : '–'), el('td', { class: 'num' }, r.managed ? num(r.sent) : '–'),
      el('td', {}, r.managed ? bars : ''),
      el('td', { class: 'num' }, r.calls ? num(r.cache_read) : '–'),
      el('td', {}, stepList(r.steps)),
      el('td', { class: 'num' }, r.managed ? num(r.cost) + (r.estimated ? '*' : '') : '–')));
  }
  if (!tl.requests.length && !(tl.earlier && tl.earlier.length)) {
    body.append(el('tr', {}, el('td', { colspan: '8', class: 'muted' }, 'No request recorded.')));
  }
}

let summaries = [];

function drawSummary(d, vs) {
  summaries = vs;
  const s = d.summary;
  $('#summary-meta').textContent = s
    ? 'Version ' + s.version + ' of ' + vs.length + (s.summarizer ? ', written by ' + s.summarizer : '') + ', covers messages ' + s.from + '–' + (s.to - 1) + ', ' + new Date(s.created).toLocaleString() + '.'
    : 'No summary yet: nothing has been compacted.';
  $('#summary-text').textContent = s ? s.text : '';
  $('#summary-text').hidden = !s;
  const from = $('#diff-from'), to = $('#diff-to');
  const keepFrom = from.value, keepTo = to.value;
  for (const sel of [from, to]) {
    sel.replaceChildren(el('option', { value: '0' }, 'none (before v1)'));
    for (const v of vs) sel.append(el('option', { value: String(v.version) }, 'v' + v.version + (v.summarizer ? ' (' + v.summarizer + ')' : '')));
  }
  from.value = keepFrom && Number(keepFrom) <= vs.length ? keepFrom : String(Math.max(0, vs.length - 1));
  to.value = keepTo && Number(keepTo) <= vs.length ? keepTo : String(vs.length);
  $('#diff-form').hidden = vs.length === 0;
  $('#diff').hidden = vs.length === 0;
}

async function drawDiff(id) {
  const out = $('#diff');
  if (!summaries.length) return;
  try {
    const d = await getJSON('/ui/api/sessions/' + encodeURIComponent(id) + '/summaries/diff?from=' + $('#diff-from').value + '&to=' + $('#diff-to').value);
    out.replaceChildren();
    let changed = 0;
    for (const l of d.lines) {
      if (l.op !== '=') changed++;
      // One block per line: the text of an empty line keeps the line's height.
      out.append(el('span', { class: l.op === '+' ? 'add' : l.op === '-' ? 'del' : 'same' }, (l.op === '=' ? '  ' : l.op + ' ') + (l.text || '\u00a0')));
    }
    out.setAttribute('aria-label', 'v' + d.from + ' to v' + d.to + ': ' + changed + ' lines changed');
    if (!changed) out.textContent = 'The two versions are the same.';
  } catch (e) {
    out.textContent = 'Could not compare: ' + e.message;
  }
}

const stateNames = {
  original: 'sent as is', offloaded: 'offloaded', retruncated: 'offloaded (shorter)', masked: 'masked',
  truncated: 'truncated', 'no-reasoning': 'reasoning dropped', superseded: 'superseded', archived: 'archived', pinned: 'pinned',
};

function messageItem(id, m, openSet) {
  const det = el('details', { class: 'msg state-' + m.state + ' role-' + m.role, 'data-pos': m.pos, id: 'msg-' + m.pos });
  det.append(el('summary', {},
    el('span', { class: 'pos' }, '#' + m.pos), ' ',
    el('span', { class: 'role' }, m.role), ' ',
    el('span', { class: 'badge state' }, stateNames[m.state] || m.state), ' ',
    m.tokens ? el('span', { class: 'tokens' }, num(m.tokens) + ' tokens') : null, ' ',
    el('span', { class: 'preview' }, m.state === 'archived' ? 'in the archive: open to read it back' : firstLine(m.text))));
  const body = el('div', { class: 'msg-body' });
  det.append(body);
  det.addEventListener('toggle', () => {
    if (det.open) { openSet.add(m.pos); openMessage(id, m, body); } else openSet.delete(m.pos);
  });
  if (openSet.has(m.pos)) det.open = true;
  return el('li', {}, det);
}

function drawMessages(id, ms, openSet) {
  const list = $('#messages');
  list.replaceChildren();
  const counts = {};
  for (const m of ms) counts[m.state] = (counts[m.state] || 0) + 1;
  $('#messages-counts').textContent = ms.length + ' messages: ' + Object.entries(counts).map(([k, n]) => n + ' ' + (stateNames[k] || k)).join(', ') + '.';
  for (let i = 0; i < ms.length;) {
    if (ms[i].state !== 'archived') {
      list.append(messageItem(id, ms[i], openSet));
      i++;
      continue;
    }
    // A run of archived messages is one line until opened.
    let j = i;
    while (j < ms.length && ms[j].state === 'archived') j++;
    const run = ms.slice(i, j);
    const key = 'run-' + run[0].pos;
    const group = el('details', { class: 'msg-run', id: key });
    group.append(el('summary', {}, el('span', { class: 'badge state' }, 'archived'), ' ',
      el('strong', {}, 'Messages #' + run[0].pos + '–#' + run[run.length - 1].pos),
      ' (' + run.length + '): folded into the summary, kept verbatim in the archive. Open to list them.'));
    const inner = el('ol', { class: 'messages' });
    for (const m of run) inner.append(messageItem(id, m, openSet));
    group.append(inner);
    if (openSet.has(key) || run.some((m) => openSet.has(m.pos))) group.open = true;
    group.addEventListener('toggle', () => { if (group.open) openSet.add(key); else openSet.delete(key); });
    list.append(el('li', {}, group));
    i = j;
  }
}

function firstLine(t) {
  const s = (t || '').split('\n').find((l) => l.trim()) || '';
  return s.length > 140 ? s.slice(0, 140) + '…' : s;
}

// openMessage reads a message in full into div, once.
function openMessage(id, m, div) {
  if (!div.loading) div.loading = loadMessage(id, m, div);
  return div.loading;
}

async function loadMessage(id, m, div) {
  div.replaceChildren(el('p', { class: 'muted' }, 'Reading…'));
  try {
    const f = await getJSON('/ui/api/sessions/' + encodeURIComponent(id) + '/messages/' + m.pos);
    div.replaceChildren();
    if (f.state !== 'archived') {
      div.append(el('h4', {}, 'Sent in the next request'), el('pre', { class: 'text', tabindex: '0' }, f.text || '(empty)'));
    }
    if (f.state !== 'original' || f.state === 'archived') {
      div.append(el('h4', {}, f.state === 'archived' ? 'Original, from the archive' : 'Original, as the client sent it'),
        el('pre', { class: 'text', tabindex: '0' }, f.original || '(empty)'));
    }
    if (f.ref) {
      div.append(el('h4', {}, 'Full text, from the store (' + f.ref + ')'),
        f.offload_error ? el('p', { class: 'bad' }, f.offload_error) : el('pre', { class: 'text', tabindex: '0' }, f.offload));
    }
    div.dataset.loaded = 'yes';
  } catch (e) {
    div.loading = null;
    div.replaceChildren(el('p', { class: 'bad' }, 'Could not read it: ' + e.message));
  }
}

async function sessionPage() {
  const id = decodeURIComponent(location.pathname.replace(/^\/ui\/sessions\//, '').replace(/\/$/, ''));
  const base = '/ui/api/sessions/' + encodeURIComponent(id);
  document.title = id + ' · ctxmgr inspector';
  $('#session-title').textContent = 'Session ' + id;
  const openSet = new Set();
  // #msg-N opens message N (a link to a message).
  const linked = /^#msg-(\d+)$/.exec(location.hash);
  if (linked) openSet.add(Number(linked[1]));
  let seen = null;
  async function draw() {
    const status = $('#session-status');
    // A redraw keeps the keyboard focus where it was.
    const focused = document.activeElement;
    const focusSel = focused && focused.closest && focused.closest('details.msg') ? '#' + focused.closest('details.msg').id + ' > summary'
      : focused && focused.id ? '#' + focused.id : null;
    try {
      const d = await getJSON(base);
      // Other sessions' requests move the counter too: redraw only when this one changed.
      const key = [d.messages, d.summary_version, d.requests, d.window.input, d.last_activity].join('|');
      if (key === seen) return;
      const [tl, sv, ms] = await Promise.all([getJSON(base + '/timeline'), getJSON(base + '/summaries'), getJSON(base + '/messages')]);
      seen = key;
      const meta = [d.live ? 'live' : 'stored', d.model, d.client, d.preset && 'preset ' + d.preset, d.counter && 'counted with ' + d.counter,
        num(d.messages) + ' messages', 'last activity ' + ago(d.last_activity)].filter(Boolean);
      $('#session-meta').textContent = meta.join(' · ');
      drawWindow(d.window);
      drawMoney(tl.money);
      drawTimeline(tl);
      drawSummary(d, sv.versions);
      drawMessages(id, ms.messages, openSet);
      await drawDiff(id);
      status.textContent = '';
      status.hidden = true;
      if (focusSel && document.activeElement !== focused) {
        const again = document.querySelector(focusSel);
        if (again) again.focus({ preventScroll: true });
      }
    } catch (e) {
      status.hidden = false;
      status.textContent = 'Could not load the session: ' + e.message;
    }
  }
  $('#diff-form').addEventListener('submit', (e) => { e.preventDefault(); drawDiff(id); });
  await draw();
  if (linked) {
    const target = document.getElementById('msg-' + linked[1]);
    if (target) {
      target.querySelector('summary').focus({ preventScroll: true });
      target.scrollIntoView({ block: 'start' });
      await openMessage(id, { pos: Number(linked[1]) }, target.querySelector('.msg-body'));
    }
  }
  document.body.dataset.ready = 'yes';
  live(draw);
}

document.addEventListener('DOMContentLoaded', () => {
  if (document.body.dataset.page === 'list') listPage();
  else if (document.body.dataset.page === 'session') sessionPage();
});

// Shared machinery of the end-to-end cases: one fake upstream and one `ctxmgr serve` per case
// (each with its own window, records and store), a trap that catches any attempt of a client
// to reach a host other than loopback, and the checks of what the upstream received.
import { spawn, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

export const env = (k, d) => process.env[k] ?? d;
export const BIN = env('CTXMGR_BIN');
export const FAKE_BIN = env('FAKE_BIN');
export const WORK = env('WORK');

// Every child process started by a case, so that a crash or a timeout still stops them all.
const children = new Set();
// Their ids also go to $WORK/pids (a process group as -PID), for run.sh to stop them should this
// process die without cleaning up.
export function track(child, group = false) {
  children.add(child);
  if (WORK && child.pid) fs.appendFileSync(path.join(WORK, 'pids'), `${group ? -child.pid : child.pid}\n`);
  child.on('exit', () => children.delete(child));
  return child;
}
export function killAll() {
  for (const c of children) {
    if (c.exitCode === null && c.signalCode === null) {
      try {
        // Clients run in their own process group: stop the whole group.
        if (c.e2eGroup) process.kill(-c.pid, 'SIGKILL');
        else c.kill('SIGKILL');
      } catch { /* already gone */ }
    }
  }
}

async function waitAddr(file, child, what) {
  for (let i = 0; i < 200; i++) {
    if (fs.existsSync(file) && fs.readFileSync(file, 'utf8').trim()) return fs.readFileSync(file, 'utf8').trim();
    if (child.exitCode !== null) throw new Error(`${what} exited with ${child.exitCode}`);
    await sleep(50);
  }
  throw new Error(`${what} did not start`);
}

// startFake starts a fake upstream with its own records file.
export async function startFake(dir, window, { thinking = false, providerContext = '' } = {}) {
  const addrFile = path.join(dir, 'upstream.addr');
  const records = path.join(dir, 'records.jsonl');
  const log = fs.openSync(path.join(dir, 'upstream.log'), 'a');
  const child = track(spawn(FAKE_BIN, ['-addr-file', addrFile, '-log', records, '-window', String(window), ...(thinking ? ['-thinking'] : []),
    ...(providerContext ? ['-provider-context', providerContext] : [])],
    { stdio: ['ignore', log, log] }));
  const exited = new Promise((resolve) => child.on('exit', resolve));
  const url = `http://${await waitAddr(addrFile, child, 'the fake upstream')}`;
  return {
    url,
    records() {
      if (!fs.existsSync(records)) return [];
      const text = fs.readFileSync(records, 'utf8').trim();
      return text ? text.split('\n').map((l) => JSON.parse(l)) : [];
    },
    async stop() {
      if (child.exitCode === null) child.kill('SIGTERM');
      await exited;
    },
  };
}

// startProxy starts `ctxmgr serve` in front of the fake, with a SQLite store in dir.
export async function startProxy(dir, upstream, window, n = 0) {
  const addrFile = path.join(dir, `proxy${n}.addr`);
  const log = fs.openSync(path.join(dir, 'proxy.log'), 'a');
  const child = track(spawn(BIN, ['serve', '--listen', '127.0.0.1:0', '--addr-file', addrFile,
    '--upstream-openai', upstream, '--upstream-anthropic', upstream, '--upstream-gemini', upstream,
    '--store', `sqlite:${path.join(dir, 'ctxmgr.db')}`, '--window', String(window),
    '--log-format', 'json', '--shutdown-timeout', '20s'], { stdio: ['ignore', log, log] }));
  fs.writeFileSync(path.join(dir, 'proxy.pid'), String(child.pid));
  const exited = new Promise((resolve) => child.on('exit', (code, sig) => resolve({ code, sig })));
  const url = `http://${await waitAddr(addrFile, child, 'ctxmgr serve')}`;
  const health = await fetch(`${url}/healthz`);
  if (health.status !== 200) throw new Error(`healthz answered ${health.status}`);
  return {
    url,
    child,
    async metrics() {
      const text = await (await fetch(`${url}/metrics`)).text();
      fs.writeFileSync(path.join(dir, 'metrics.txt'), text);
      return parseMetrics(text);
    },
    // stop sends SIGTERM (a graceful shutdown) and returns the exit code.
    async stop() {
      if (child.exitCode === null) child.kill('SIGTERM');
      const { code } = await exited;
      return code;
    },
  };
}

// parseMetrics sums each Prometheus series by name; labelled series are kept too.
export function parseMetrics(text) {
  const sums = {};
  const series = {};
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const sp = line.lastIndexOf(' ');
    const key = line.slice(0, sp);
    const v = Number(line.slice(sp + 1));
    const name = key.replace(/\{.*$/, '');
    sums[name] = (sums[name] ?? 0) + v;
    series[key] = v;
  }
  return { sums, series, get: (n) => sums[n] ?? 0 };
}

// startTrap starts a proxy for HTTP_PROXY / HTTPS_PROXY / ALL_PROXY that refuses every
// connection and remembers where each one wanted to go: a client trying to reach any host
// other than loopback (telemetry, update checks, the real APIs) is caught here instead of
// leaving the machine.
export async function startTrap() {
  const attempts = [];
  const server = net.createServer((sock) => {
    sock.once('data', (buf) => {
      const first = buf.toString('latin1');
      let target;
      if (buf[0] === 0x05) target = 'SOCKS5 connection';
      else if (buf[0] === 0x04) target = 'SOCKS4 connection';
      else target = first.split('\r\n')[0].slice(0, 200);
      attempts.push(target);
      sock.end('HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n');
    });
    sock.on('error', () => {});
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${server.address().port}`;
  return {
    url,
    attempts,
    env: {
      HTTP_PROXY: url, HTTPS_PROXY: url, ALL_PROXY: url, http_proxy: url, https_proxy: url, all_proxy: url,
      NO_PROXY: '127.0.0.1,localhost', no_proxy: '127.0.0.1,localhost',
    },
    close: () => new Promise((resolve) => server.close(resolve)),
  };
}

// runProcess runs a client command in its own process group with a time limit.
export function runProcess(cmd, args, opts) {
  const { cwd, env: e, timeoutMs, logFile, input } = opts;
  return new Promise((resolve) => {
    const out = [];
    const err = [];
    const child = track(spawn(cmd, args, { cwd, env: e, detached: true, stdio: [input === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'] }), true);
    child.e2eGroup = true;
    if (input !== undefined) child.stdin.end(input);
    child.stdout.on('data', (d) => out.push(d));
    child.stderr.on('data', (d) => err.push(d));
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      try { process.kill(-child.pid, 'SIGKILL'); } catch { /* gone */ }
    }, timeoutMs);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      // Whatever the client left running in its group goes too.
      try { process.kill(-child.pid, 'SIGKILL'); } catch { /* gone */ }
      const stdout = Buffer.concat(out).toString();
      const stderr = Buffer.concat(err).toString();
      if (logFile) fs.writeFileSync(logFile, `$ ${cmd} ${args.join(' ')}\n--- stdout\n${stdout}\n--- stderr\n${stderr}\n--- exit ${code} ${signal ?? ''}${timedOut ? ' (timed out)' : ''}\n`);
      resolve({ code, signal, stdout, stderr, timedOut });
    });
  });
}

// writeSteps creates the files of an agent script of n steps in dir: step-k-of-n.txt, each of
// about `tokens` o200k tokens of build-log-like lines.
export function writeSteps(dir, n, tokens, tag) {
  fs.mkdirSync(dir, { recursive: true });
  for (let k = 1; k <= n; k++) {
    const lines = [];
    const count = Math.ceil(tokens / 28);
    for (let i = 0; i < count; i++) {
      lines.push(`${tag} step ${k} line ${i}: src/module${k % 13}/file${i % 17}.js:${i * 3} status=ok hash=${((k + 1) * 2654435761 + i * 40503).toString(16)}`);
    }
    if (k % 3 === 0) lines.push(`Error: build failed in src/module${k % 13}/index.js: ReferenceError: handler${k} is not defined`);
    fs.writeFileSync(path.join(dir, `step-${k}-of-${n}.txt`), lines.join('\n') + '\n');
  }
}

// marker is the text that starts the fake upstream's agent script (internal/fakeupstream/agent.go).
export const marker = (n, dir) => `[e2e-agent steps=${n} dir=${dir}]`;
export const AGENT_DONE = 'e2e-agent done: ';

// checkUpstream checks the records of one case: every request fit the window and paired its
// tool calls, nothing but a context overflow (followed by a smaller retry) was refused, and
// the script ran all its steps. It returns a list of failures and a summary.
export function checkUpstream(recs, window, { paths } = {}) {
  const fails = [];
  let ok = 0;
  let overflow = 0;
  let maxUse = 0;
  let calls = 0;
  let maxBreakpoints = 0;
  let thinking = 0;
  for (let i = 0; i < recs.length; i++) {
    const r = recs[i];
    if (paths && !paths.includes(r.path)) continue;
    if (r.status === 200) {
      ok++;
      if (r.reply === 'tool_call') calls++;
      maxUse = Math.max(maxUse, r.tokens + r.max_tokens);
      if (r.tokens + r.max_tokens > window) fails.push(`upstream request ${r.seq} (${r.path}) does not fit: ${r.tokens} tokens + ${r.max_tokens} max output > window ${window}`);
    } else if (r.rule === 'window') {
      overflow++;
      const next = recs.slice(i + 1).find((x) => x.path === r.path);
      if (!(next && next.tokens + next.max_tokens < r.tokens + r.max_tokens)) {
        fails.push(`upstream request ${r.seq} (${r.path}) was refused (400: ${r.tokens} tokens + ${r.max_tokens} max output > window ${window}) and not retried smaller`);
      }
    } else {
      fails.push(`upstream request ${r.seq} (${r.path}, model ${r.model || '?'}) refused with ${r.status}${r.rule ? ` (rule ${r.rule})` : ''}: ${r.valid || r.reply}`);
    }
    maxBreakpoints = Math.max(maxBreakpoints, r.breakpoints ?? 0);
    thinking += r.issued_thinking ?? 0;
  }
  // The tools really ran: some request grew by a whole tool output (a file of a few thousand
  // tokens) over the one before it, not by an error message.
  const main = recs.filter((r) => !paths || paths.includes(r.path));
  let growth = 0;
  for (let i = 1; i < main.length; i++) growth = Math.max(growth, main[i].tokens - main[i - 1].tokens);
  if (main.length > 1 && growth < 1500) fails.push(`no tool output reached the model: the largest growth between two requests is ${growth} tokens`);
  return { fails, summary: `${recs.length} upstream requests, ${ok} answered, ${overflow} overflows, ${calls} tool calls; largest request + max output ${maxUse} of window ${window}${maxBreakpoints ? `, up to ${maxBreakpoints} cache breakpoints` : ''}${thinking ? `, ${thinking} signed thinking blocks issued` : ''}` };
}

// checkManaged reads the proxy's metrics: management happened (a compaction, or tokens
// removed before forwarding) and no request went unmanaged.
export function checkManaged(m, { decodeCache = true } = {}) {
  const fails = [];
  const compactions = m.get('ctxmgr_compactions_total');
  const before = m.get('ctxmgr_tokens_before_sum');
  const after = m.get('ctxmgr_tokens_after_sum');
  if (!(compactions > 0 || after < before)) fails.push(`no management: ${compactions} compactions, tokens before ${before}, after ${after}`);
  // Every reason but path (GET /v1/models, token counting for an unknown history) is a
  // conversation request the proxy did not manage. The metric must exist: a renamed metric
  // would make this check pass without checking anything.
  if (!Object.keys(m.series).some((k) => k.startsWith('ctxmgr_unmanaged_requests_total'))) fails.push('no ctxmgr_unmanaged_requests_total in the metrics');
  const unmanaged = Object.entries(m.series).filter(([k, v]) => k.startsWith('ctxmgr_unmanaged_requests_total') && !k.includes('reason="path"') && v > 0);
  if (unmanaged.length) fails.push(`requests forwarded unmanaged: ${unmanaged.map(([k, v]) => `${k} ${v}`).join(', ')}`);
  const branches = m.get('ctxmgr_branches_total');
  const verbatim = m.get('ctxmgr_verbatim_requests_total');
  // A growing conversation's bodies are decoded from where they differ from the last one
  // (the decode cache): most must be. Only a conversation's first body, and side requests
  // that start one, are decoded whole.
  if (!Object.keys(m.series).some((k) => k.startsWith('ctxmgr_decodes_total'))) fails.push('no ctxmgr_decodes_total in the metrics');
  const whole = m.series['ctxmgr_decodes_total{result="whole"}'] ?? 0;
  const continued = m.series['ctxmgr_decodes_total{result="continued"}'] ?? 0;
  if (decodeCache && !(continued >= whole)) fails.push(`the decode cache did not serve the conversation: ${whole} bodies decoded whole, ${continued} continued`);
  return { fails, summary: `${compactions} compactions, tokens ${before} before / ${after} after management, ${verbatim} forwarded verbatim, ${branches} branches, ${continued} bodies decoded from where they differ, ${whole} whole` };
}

// unmanagedReasons returns the proxy log's reasons for unmanaged requests (first few).
export function proxyLogHints(dir) {
  const file = path.join(dir, 'proxy.log');
  if (!fs.existsSync(file)) return [];
  const out = new Set();
  for (const line of fs.readFileSync(file, 'utf8').split('\n')) {
    if (!line.startsWith('{')) continue;
    try {
      const j = JSON.parse(line);
      const why = j.unmanaged || (j.level === 'ERROR' || j.level === 'WARN' ? j.msg + (j.err ? `: ${j.err}` : j.error ? `: ${j.error}` : '') : '');
      if (why) out.add(String(why).slice(0, 300));
    } catch { /* not JSON */ }
    if (out.size >= 3) break;
  }
  return [...out];
}

// guardNet makes every outgoing TCP connection of this process (the in-process SDK clients:
// openai, @anthropic-ai/sdk, the AI SDK, LangChain) to a host other than loopback fail at
// once, and remembers it in the returned list. (Node's fetch ignores HTTP_PROXY, so the trap
// cannot see them.)
export function guardNet() {
  const attempts = [];
  const loopback = new Set(['127.0.0.1', 'localhost', '::1', '[::1]']);
  const orig = net.Socket.prototype.connect;
  net.Socket.prototype.connect = function connect(...args) {
    let opts = args[0];
    if (Array.isArray(opts)) opts = opts[0];
    if (typeof opts !== 'object' || opts === null) opts = { port: args[0], host: typeof args[1] === 'string' ? args[1] : undefined };
    const host = opts.host ?? 'localhost';
    if (!opts.path && !loopback.has(host)) {
      attempts.push(`${host}:${opts.port}`);
      process.nextTick(() => this.destroy(new Error(`e2e: connection to ${host}:${opts.port} refused: nothing leaves the machine`)));
      return this;
    }
    return orig.apply(this, args);
  };
  return attempts;
}

// storedSessions lists the sessions of a case's store (ctxmgr sessions list --json).
export function storedSessions(dir) {
  const out = execFileSync(BIN, ['sessions', 'list', '--json', '--store', `sqlite:${path.join(dir, 'ctxmgr.db')}`], { encoding: 'utf8', timeout: 20000 });
  return JSON.parse(out || '[]') ?? [];
}

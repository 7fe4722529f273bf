// The official SDKs' scenario: a 60-turn tool-using conversation through the `openai` (chat
// completions) and `@anthropic-ai/sdk` packages at once, streaming and not, whose history far
// exceeds the window; it uses /context, /compact, /context clear and the ctxmgr_read tool,
// restarts the proxy with a stream in flight (the session must survive), and then checks what
// the upstream received: every request fits the window and pairs its tool calls.
//
// runLegacy runs it with its own fake upstream and proxy in dir and returns the failures of
// each SDK: { openai: [...], anthropic: [...] }, plus the log lines.
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { startFake, track, BIN } from './lib.mjs';

let UPSTREAM;
let WORK;
let RECORDS;
let WINDOW = 8192;
let TURNS = 60;
const MAX_TOKENS = 1024;

let failures = [];
const lines = [];
function check(ok, msg) {
  if (!ok) failures.push(msg);
  return ok;
}
function log(msg) {
  lines.push(msg);
}

// --- the proxy process ---

class Proxy {
  constructor() {
    this.child = null;
    this.url = null;
    this.starts = 0;
  }
  async start() {
    const addrFile = path.join(WORK, `proxy${this.starts}.addr`);
    const logFile = fs.openSync(path.join(WORK, 'proxy.log'), 'a');
    this.child = track(spawn(BIN, ['serve', '--listen', '127.0.0.1:0', '--addr-file', addrFile,
      '--upstream-openai', UPSTREAM, '--upstream-anthropic', UPSTREAM,
      '--store', `sqlite:${path.join(WORK, 'ctxmgr.db')}`, '--window', String(WINDOW),
      '--log-format', 'json', '--shutdown-timeout', '20s'], { stdio: ['ignore', logFile, logFile] }));
    fs.writeFileSync(path.join(WORK, 'proxy.pid'), String(this.child.pid));
    this.exited = new Promise((resolve) => this.child.on('exit', (code, sig) => resolve({ code, sig })));
    this.starts++;
    for (let i = 0; i < 200; i++) {
      if (fs.existsSync(addrFile) && fs.readFileSync(addrFile, 'utf8').trim()) break;
      if (this.child.exitCode !== null) throw new Error(`ctxmgr serve exited with ${this.child.exitCode}; see proxy.log`);
      await sleep(50);
    }
    this.url = `http://${fs.readFileSync(addrFile, 'utf8').trim()}`;
    const health = await fetch(`${this.url}/healthz`);
    if (health.status !== 200) throw new Error(`healthz answered ${health.status}`);
    log(`proxy started at ${this.url}`);
  }
  // stop sends SIGTERM (a graceful shutdown) and waits for the exit.
  async stop() {
    this.child.kill('SIGTERM');
    const { code, sig } = await this.exited;
    log(`proxy stopped (code ${code}, signal ${sig})`);
    return code;
  }
  kill() {
    if (this.child && this.child.exitCode === null) this.child.kill('SIGKILL');
  }
}
const proxy = new Proxy();

// --- tool outputs: mostly a few KB, sometimes far above the window ---

function toolOutput(sdk, turn, call) {
  const big = turn % 9 === 4;
  const size = big ? 60000 : 1500 + ((turn * 37 + call * 11) % 2500);
  const lines = [];
  let n = 0;
  for (let i = 0; n < size; i++) {
    const line = `${sdk} turn ${turn} call ${call} line ${i}: src/module${turn % 13}/file${i % 17}.js:${i * 3} status=ok hash=${((turn + 1) * 2654435761 + i).toString(16)}`;
    lines.push(line);
    n += line.length + 1;
  }
  if (turn % 11 === 7) lines.push(`Error: build failed in src/module${turn % 13}/index.js: ReferenceError: handler${turn} is not defined`);
  return lines.join('\n');
}

// --- the OpenAI agent (openai npm package) ---

const openaiTools = [{
  type: 'function',
  function: {
    name: 'run_command', description: 'Run a shell command in the repository and return its output.',
    parameters: { type: 'object', properties: { cmd: { type: 'string' } }, required: ['cmd'] },
  },
}];

class OpenAIAgent {
  constructor() {
    this.messages = [{ role: 'system', content: 'You are a coding agent under an end-to-end test. Use the tools.' }];
    this.called = [];
    this.turns = 0;
    this.historyChars = 0;
  }
  client() {
    return new OpenAI({ baseURL: `${proxy.url}/v1`, apiKey: 'sk-e2e-openai', maxRetries: 0, timeout: 60000,
      defaultHeaders: { 'X-Ctxmgr-Session': 'e2e-openai' } });
  }
  async complete(stream) {
    const params = { model: 'gpt-4o', messages: this.messages, tools: openaiTools, max_completion_tokens: MAX_TOKENS };
    if (!stream) {
      const resp = await this.client().chat.completions.create(params);
      return resp.choices[0].message;
    }
    const runner = this.client().chat.completions.stream({ ...params, stream_options: { include_usage: true } });
    const final = await runner.finalChatCompletion();
    return final.choices[0].message;
  }
  async turn(text, stream) {
    this.messages.push({ role: 'user', content: text });
    for (let iter = 0; iter < 6; iter++) {
      const msg = await this.complete(stream);
      const kept = { role: 'assistant', content: msg.content ?? null };
      if (msg.tool_calls?.length) kept.tool_calls = msg.tool_calls;
      this.messages.push(kept);
      if (!msg.tool_calls?.length) {
        this.turns++;
        return msg.content ?? '';
      }
      msg.tool_calls.forEach((tc, i) => {
        this.called.push(tc.function.name);
        const out = toolOutput('openai', this.turns, i);
        this.historyChars += out.length;
        this.messages.push({ role: 'tool', tool_call_id: tc.id, content: out });
      });
    }
    throw new Error('the tool loop did not end');
  }
}

// --- the Anthropic agent (@anthropic-ai/sdk) ---

const anthropicTools = [{
  name: 'run_command', description: 'Run a shell command in the repository and return its output.',
  input_schema: { type: 'object', properties: { cmd: { type: 'string' } }, required: ['cmd'] },
}];

class AnthropicAgent {
  constructor() {
    this.messages = [];
    this.called = [];
    this.turns = 0;
    this.historyChars = 0;
  }
  client() {
    return new Anthropic({ baseURL: proxy.url, apiKey: 'sk-ant-e2e', maxRetries: 0, timeout: 60000,
      defaultHeaders: { 'X-Ctxmgr-Session': 'e2e-anthropic', 'anthropic-beta': 'e2e-test-beta' } });
  }
  async complete(stream) {
    const params = { model: 'claude-sonnet-4-6', max_tokens: MAX_TOKENS, messages: this.messages, tools: anthropicTools,
      system: 'You are a coding agent under an end-to-end test. Use the tools.' };
    if (!stream) return this.client().messages.create(params);
    return this.client().messages.stream(params).finalMessage();
  }
  async turn(text, stream) {
    this.messages.push({ role: 'user', content: text });
    for (let iter = 0; iter < 6; iter++) {
      const msg = await this.complete(stream);
      this.messages.push({ role: 'assistant', content: msg.content });
      const uses = msg.content.filter((b) => b.type === 'tool_use');
      if (uses.length === 0) {
        this.turns++;
        return msg.content.filter((b) => b.type === 'text').map((b) => b.text).join('');
      }
      this.messages.push({
        role: 'user',
        content: uses.map((u, i) => {
          this.called.push(u.name);
          const out = toolOutput('anthropic', this.turns, i);
          this.historyChars += out.length;
          return { type: 'tool_result', tool_use_id: u.id, content: out };
        }),
      });
    }
    throw new Error('the tool loop did not end');
  }
}

// --- helpers ---

function contextLines(text) {
  const total = /(\d+) appended in all/.exec(text);
  const summary = /Summary: (version \d+|none yet)/.exec(text);
  return { total: total ? Number(total[1]) : -1, summary: summary ? summary[1] : '?' };
}

async function metric(name) {
  const text = await (await fetch(`${proxy.url}/metrics`)).text();
  let sum = 0;
  for (const line of text.split('\n')) {
    if (line.startsWith(name) && !line.startsWith('#')) sum += Number(line.split(' ').pop());
  }
  return sum;
}

// A streamed turn that is still running when the proxy is told to stop must finish.
async function streamThroughShutdown(agent, name) {
  const text = `${name}: tell me slowly that the restart is coming, no tools`;
  agent.messages.push({ role: 'user', content: text });
  let stopped;
  let content = '';
  if (agent instanceof OpenAIAgent) {
    const stream = await agent.client().chat.completions.create({ model: 'gpt-4o', messages: agent.messages,
      tools: openaiTools, max_completion_tokens: MAX_TOKENS, stream: true });
    for await (const chunk of stream) {
      content += chunk.choices[0]?.delta?.content ?? '';
      if (!stopped && content) stopped = proxy.stop();
    }
    agent.messages.push({ role: 'assistant', content });
  } else {
    const stream = agent.client().messages.stream({ model: 'claude-sonnet-4-6', max_tokens: MAX_TOKENS,
      messages: agent.messages, tools: anthropicTools, system: 'You are a coding agent under an end-to-end test. Use the tools.' });
    stream.on('text', (t) => {
      content += t;
      if (!stopped) stopped = proxy.stop();
    });
    const msg = await stream.finalMessage();
    agent.messages.push({ role: 'assistant', content: msg.content });
  }
  agent.turns++;
  check(content.startsWith('Echo: ') && content.includes('no tools'), `${name}: the stream in flight during the shutdown was cut: ${JSON.stringify(content)}`);
  const code = await stopped;
  check(code === 0, `${name}: ctxmgr serve exited with ${code} after SIGTERM`);
}

// --- the run ---

async function main() {
  await proxy.start();
  const oa = new OpenAIAgent();
  const an = new AnthropicAgent();
  const agents = [['openai', oa], ['anthropic', an]];
  const before = {};
  for (let turn = 0; turn < TURNS; turn++) {
    for (const [name, agent] of agents) {
      const stream = (turn + (name === 'anthropic' ? 1 : 0)) % 2 === 0;
      let text = `turn ${turn}: run the tests of module ${turn % 13}`;
      if (turn % 5 === 2) text += ' in parallel';
      if (turn === 15) text = '/context';
      if (turn === 20) text = '/compact keep the decisions and the failing modules';
      if (turn === 25 || turn === TURNS - 15) text = 'now read back the full output of the earlier command';
      if (turn === 50) text = '/context clear';
      if (turn === TURNS / 2) {
        const ctx = contextLines(await agent.turn('/context', false));
        before[name] = ctx;
        if (name === 'anthropic') {
          await streamThroughShutdown(agent, name);
          await proxy.start();
          for (const [n2, a2] of agents) {
            const after = contextLines(await a2.turn('/context', n2 === 'openai'));
            const exp = before[n2].total + (n2 === 'anthropic' ? 2 : 0);
            check(after.total === exp && after.summary === before[n2].summary,
              `${n2}: the session did not survive the restart: before ${JSON.stringify(before[n2])}, after ${JSON.stringify(after)}, want ${exp} messages`);
            log(`${n2}: after the restart the session has ${after.total} messages, summary ${after.summary}`);
          }
        }
        continue;
      }
      let out;
      try {
        out = await agent.turn(text, stream);
      } catch (err) {
        check(false, `${name} turn ${turn} (${stream ? 'stream' : 'no stream'}): ${err.stack || err}`);
        throw err;
      }
      if (text === '/context') check(out.includes(`/context: session e2e-${name}`) && out.includes(`of window ${WINDOW}`), `${name}: /context answered ${JSON.stringify(out)}`);
      else if (text.startsWith('/compact')) check(/compacted \d+ messages into summary v\d+; tokens before \d+, after \d+/.test(out), `${name}: /compact answered ${JSON.stringify(out.slice(0, 300))}`);
      else if (text === '/context clear') check(out.includes('messages archived'), `${name}: /context clear answered ${JSON.stringify(out)}`);
      else if (text.includes('read back')) check(out.startsWith('Read back: [ctxmgr_read'), `${name}: the ctxmgr_read round trip answered ${JSON.stringify(out)}`);
      else check(out.startsWith('Done: ') || out.startsWith('Echo: '), `${name} turn ${turn}: unexpected answer ${JSON.stringify(out)}`);
    }
  }
  for (const [name, agent] of agents) {
    const out = await agent.turn('/context', true);
    log(`${name} final /context:\n${out}`);
    check(!agent.called.includes('ctxmgr_read'), `${name}: the client saw a ctxmgr_read call`);
    const historyTokens = Math.round(agent.historyChars / 4);
    check(historyTokens > 10 * WINDOW, `${name}: the history (~${historyTokens} tokens) does not far exceed the window ${WINDOW}`);
    log(`${name}: ${agent.turns} turns, ${agent.messages.length} messages, ~${historyTokens} tokens of tool output, ${agent.called.length} tool calls`);
  }
  const compactions = await metric('ctxmgr_compactions_total');
  const reads = await metric('ctxmgr_reads_total');
  check(compactions > 0, 'no compaction was counted in /metrics');
  check(reads > 0, 'no ctxmgr_read was counted in /metrics');
  log(`metrics: ${compactions} compactions, ${reads} reads since the restart`);
  await proxy.stop();

  // What the upstream received.
  const recs = fs.readFileSync(RECORDS, 'utf8').trim().split('\n').map((l) => JSON.parse(l));
  let ok = 0;
  let overflow = 0;
  let maxUse = 0;
  for (let i = 0; i < recs.length; i++) {
    const r = recs[i];
    check(r.valid === undefined || r.valid === '', `upstream request ${r.seq} (${r.format}) is invalid: ${r.valid}`);
    if (r.status === 200) {
      ok++;
      maxUse = Math.max(maxUse, r.tokens + r.max_tokens);
      check(r.tokens + r.max_tokens <= WINDOW, `upstream request ${r.seq} (${r.format}) does not fit: ${r.tokens} tokens + ${r.max_tokens} max output > window ${WINDOW}`);
    } else if (r.status === 400) {
      overflow++;
      const next = recs.slice(i + 1).find((x) => x.format === r.format);
      check(next && next.tokens < r.tokens, `upstream request ${r.seq} (${r.format}) overflowed and was not retried smaller`);
    } else {
      check(false, `upstream request ${r.seq} (${r.format}) answered ${r.status}`);
    }
    if (r.format === 'anthropic') check(r.headers['Anthropic-Beta'] === 'e2e-test-beta' && r.headers['Anthropic-Version'], `upstream request ${r.seq}: anthropic headers lost: ${JSON.stringify(r.headers)}`);
  }
  log(`upstream: ${recs.length} requests, ${ok} answered, ${overflow} overflows recovered; largest request + max output ${maxUse} of window ${WINDOW}`);
  // An agent's conversation carries ctxmgr_read from its first request on, beside the
  // client's own tools: the tool list never changes partway through a conversation.
  for (const f of ['openai', 'anthropic']) {
    const first = recs.find((r) => r.format === f);
    check(first && (first.tools || []).at(-1) === 'ctxmgr_read' && first.tools.length > 1,
      `${f}: the first request's tools are ${JSON.stringify(first && first.tools)}, want the client's and ctxmgr_read`);
  }
}

export async function runLegacy(dir, { window = 8192, turns = 60 } = {}) {
  WORK = dir;
  WINDOW = window;
  TURNS = turns;
  failures = [];
  const fake = await startFake(dir, window);
  UPSTREAM = fake.url;
  RECORDS = path.join(dir, 'records.jsonl');
  try {
    await main();
  } catch (err) {
    check(false, `aborted: ${err.stack || err}`);
  } finally {
    proxy.kill();
    await fake.stop();
  }
  // API keys are never logged; the log carries session ids.
  const plog = fs.existsSync(path.join(dir, 'proxy.log')) ? fs.readFileSync(path.join(dir, 'proxy.log'), 'utf8') : '';
  check(!plog.includes('sk-e2e-openai') && !plog.includes('sk-ant-e2e'), 'an API key appears in the proxy log');
  check(plog.includes('"session":"e2e-openai"'), 'openai: the proxy log lacks session ids');
  // Each SDK's case gets its own failures, and the shared ones.
  const mine = (name, other) => failures.filter((f) => f.includes(name) || !f.includes(other));
  return { openai: mine('openai', 'anthropic'), anthropic: mine('anthropic', 'openai'), lines };
}

// End-to-end test of `ctxmgr serve` with real clients installed from npm at pinned versions
// (package.json / package-lock.json): Claude Code, Codex CLI, Gemini CLI, Qwen Code, OpenCode,
// the AI SDK, LangChain JS and the official openai, @anthropic-ai/sdk and @google/genai packages.
//
// run.sh builds ctxmgr and the fake upstream and runs this script with CTXMGR_BIN, FAKE_BIN and
// WORK (a scratch directory) set. Every client is a separate case with its own fake upstream
// (internal/fakeupstream, which enforces the window and logs every request it receives), its own
// `ctxmgr serve` (small window, SQLite store) and its own trap for outgoing connections. A case
// passes when the client finishes normally with its final answer (so no upstream error reached
// it); every upstream request was answered, fit the window and was well formed by the strict
// fake's rules (tool pairing, cache_control blocks, thinking signatures), a refusal for the
// window alone being followed by a smaller retry; whole tool outputs reached the model; the proxy
// managed the conversation (a compaction or tokens removed, in /metrics) and forwarded nothing
// unmanaged; the store holds one session; and the client tried no host but loopback.
//
// Prints one line per case (PASS/FAIL and why) and writes "PASSED FAILED" to $WORK/summary.
//   CASES=claude,codex   runs only the cases whose name contains one of these words.
import fs from 'node:fs';
import path from 'node:path';
import {
  WORK, BIN, FAKE_BIN, guardNet, storedSessions, startFake, startProxy, startTrap, checkUpstream, checkManaged, proxyLogHints, killAll,
} from './lib.mjs';
import { runLegacy } from './legacy.mjs';
import * as clients from './clients.mjs';

if (!BIN || !FAKE_BIN || !WORK) {
  console.error('e2e: CTXMGR_BIN, FAKE_BIN and WORK must be set');
  process.exit(2);
}
const outbound = guardNet();
const TURNS = Number(process.env.TURNS ?? '60');
const only = (process.env.CASES ?? '').split(',').map((s) => s.trim()).filter(Boolean);
const CASE_TIMEOUT = 150000;

// Each agent case: the client, its window, and the API paths its conversation uses.
const cases = [
  { name: 'claude-code (default model)', window: 40000, sessions: 1, thinking: true, run: clients.claudeCode(null), paths: ['/v1/messages'] },
  { name: 'claude-code (--model claude-sonnet-4-5)', window: 40000, sessions: 1, thinking: true, run: clients.claudeCode('claude-sonnet-4-5'), paths: ['/v1/messages'] },
  { name: 'codex exec (Responses provider)', window: 40000, sessions: 1, run: clients.codexExec, paths: ['/v1/responses'] },
  // Claude Code sends context_management and its betas; in front of an upstream that refuses
  // them (Vertex, Bedrock, relays) the proxy answers them.
  { name: 'claude-code (non-native upstream)', window: 40000, sessions: 1, thinking: true, providerContext: 'non-native', run: clients.claudeCode(null), paths: ['/v1/messages'] },
  // Codex with a provider named "OpenAI" compacts remotely (compaction_trigger); the upstream
  // has no such feature (the fake refuses it as such upstreams do): the proxy answers it. With
  // a compaction every other request, most bodies start the conversation over in the decode
  // cache.
  { name: 'codex exec (provider "OpenAI": remote compaction, non-native upstream)', window: 40000, providerContext: 'non-native', decodeCache: false, run: clients.codexRemoteCompaction, paths: ['/v1/responses', '/v1/responses/compact'] },
  // @anthropic-ai/sdk beta messages with Anthropic context editing and compaction, through the
  // proxy in front of an upstream that refuses both (as Vertex, Bedrock and relays do).
  { name: '@anthropic-ai/sdk beta clear_tool_uses (non-native upstream)', window: 16000, providerContext: 'non-native', run: clients.anthropicClearToolUses, paths: ['/v1/messages'] },
  { name: '@anthropic-ai/sdk beta compact_20260112 (non-native upstream)', window: 16000, providerContext: 'non-native', run: clients.anthropicCompact, paths: ['/v1/messages'] },
  { name: 'ai-sdk openai.chat', window: 16000, sessions: 1, run: clients.aiSdkOpenAIChat, paths: ['/v1/chat/completions'] },
  { name: 'ai-sdk openai.responses (openai(model))', window: 16000, sessions: 1, run: clients.aiSdkOpenAIResponses, paths: ['/v1/responses'] },
  { name: 'ai-sdk anthropic (default max_tokens, thinking)', window: 16000, sessions: 1, thinking: true, run: clients.aiSdkAnthropic, paths: ['/v1/messages'] },
  { name: 'langchain ChatOpenAI', window: 16000, sessions: 1, run: clients.langchainOpenAI, paths: ['/v1/chat/completions'] },
  { name: 'langchain ChatAnthropic', window: 16000, sessions: 1, run: clients.langchainAnthropic, paths: ['/v1/messages'] },
  { name: 'openai sdk responses (store:false)', window: 16000, sessions: 1, run: clients.openaiResponses, paths: ['/v1/responses'] },
  { name: 'gemini-cli (gemini -p, API key, GOOGLE_GEMINI_BASE_URL)', window: 40000, sessions: 1, run: clients.geminiCLI, paths: geminiPaths('gemini-3.1-pro-preview') },
  { name: 'qwen-code (qwen -p, OpenAI-compatible)', window: 40000, sessions: 1, run: clients.qwenCode, paths: ['/v1/chat/completions'] },
  { name: 'opencode (opencode run, openai-compatible provider)', window: 40000, sessions: 1, run: clients.openCode, paths: ['/v1/chat/completions'] },
  { name: '@google/genai (generateContent, stream, parallel calls, countTokens)', window: 16000, sessions: 1, run: clients.googleGenAI, paths: geminiPaths(clients.GEMINI_MODEL) },
];

// The SDK and Gemini CLI call /v1beta (the SDK with a base URL of its own, /v1).
function geminiPaths(model) {
  return ['v1', 'v1beta'].flatMap((v) => [`/${v}/models/${model}:generateContent`, `/${v}/models/${model}:streamGenerateContent`]);
}

const results = [];
function report(name, fails, notes) {
  results.push({ name, ok: fails.length === 0 });
  const head = `e2e: ${fails.length === 0 ? 'PASS' : 'FAIL'} ${name}${notes.length ? ` (${notes.join('; ')})` : ''}`;
  console.log(head);
  for (const f of fails.slice(0, 6)) console.log(`e2e:     - ${f}`);
  if (fails.length > 6) console.log(`e2e:     - ... and ${fails.length - 6} more`);
}

function slug(name) {
  return name.toLowerCase().replace(/[^a-z0-9]+/g, '-').replace(/^-|-$/g, '');
}

function withTimeout(p, ms, what) {
  let t;
  return Promise.race([p, new Promise((_, rej) => { t = setTimeout(() => rej(new Error(`${what} timed out after ${ms / 1000}s`)), ms); })])
    .finally(() => clearTimeout(t));
}

async function runCase(c) {
  const dir = path.join(WORK, slug(c.name));
  const work = path.join(dir, 'work');
  fs.mkdirSync(work, { recursive: true });
  const started = Date.now();
  const fails = [];
  const notes = [];
  let fake;
  let proxy;
  let trap;
  try {
    fake = await startFake(dir, c.window, { thinking: c.thinking, providerContext: c.providerContext });
    proxy = await startProxy(dir, fake.url, c.window);
    trap = await startTrap();
    const outboundBefore = outbound.length;
    let res;
    try {
      res = await withTimeout(c.run({ proxy, trap, work, dir }), CASE_TIMEOUT, 'the client');
    } catch (err) {
      res = { fails: [`the client failed: ${String(err.message ?? err).split('\n')[0].slice(0, 400)}`], notes: [] };
    }
    fails.push(...res.fails);
    notes.push(...res.notes);
    const up = checkUpstream(fake.records(), c.window, { paths: c.paths });
    if (!fake.records().some((r) => c.paths.includes(r.path))) up.fails.push(`no request reached the upstream on ${c.paths.join(', ')}`);
    fails.push(...up.fails);
    notes.push(up.summary);
    const m = checkManaged(await proxy.metrics(), { decodeCache: c.decodeCache ?? true });
    fails.push(...m.fails);
    notes.push(m.summary);
    const mine = outbound.slice(outboundBefore);
    if (mine.length) fails.push(`a connection left loopback: ${[...new Set(mine)].slice(0, 5).join(', ')}`);
    if (trap.attempts.length) fails.push(`the client tried to leave the machine: ${[...new Set(trap.attempts)].slice(0, 5).join(', ')}`);
    const code = await proxy.stop();
    if (code !== 0) fails.push(`ctxmgr serve exited with ${code} after SIGTERM`);
    const sessions = storedSessions(dir);
    notes.push(`${sessions.length} stored session${sessions.length === 1 ? '' : 's'}`);
    if (c.sessions !== undefined && sessions.length !== c.sessions) fails.push(`${sessions.length} sessions stored, want ${c.sessions} (one conversation): ${sessions.map((x) => x.id ?? x.ID ?? JSON.stringify(x)).join(', ').slice(0, 300)}`);
    if (fails.length) for (const h of proxyLogHints(dir)) fails.push(`proxy log: ${h}`);
  } catch (err) {
    fails.push(`aborted: ${err.stack || err}`);
  } finally {
    await proxy?.stop().catch(() => {});
    await fake?.stop().catch(() => {});
    await trap?.close().catch(() => {});
  }
  notes.push(`${((Date.now() - started) / 1000).toFixed(1)}s`);
  report(c.name, fails, notes);
}

async function legacyCases() {
  const names = LEGACY;
  if (!legacySelected) return;
  const dir = path.join(WORK, 'official-sdks');
  fs.mkdirSync(dir, { recursive: true });
  const started = Date.now();
  const outboundBefore = outbound.length;
  const r = await withTimeout(runLegacy(dir, { window: 8192, turns: TURNS }), 240000, 'the official SDKs scenario')
    .catch((err) => ({ openai: [String(err.message)], anthropic: [String(err.message)], lines: [] }));
  for (const l of r.lines.filter((x) => x.startsWith('upstream:') || x.startsWith('metrics:'))) console.log(`e2e: ${l}`);
  const mine = outbound.slice(outboundBefore);
  if (mine.length) for (const k of ['openai', 'anthropic']) r[k].push(`a connection left loopback: ${[...new Set(mine)].slice(0, 5).join(', ')}`);
  const secs = `${((Date.now() - started) / 1000).toFixed(1)}s`;
  report(names[0], r.openai, [secs]);
  report(names[1], r.anthropic, [secs]);
}

// The whole run is bounded: after 330 s every process the cases started is stopped.
const DEADLINE = Number(process.env.E2E_DEADLINE_MS ?? 330000);
setTimeout(() => {
  console.error(`e2e: the run exceeded ${DEADLINE / 1000}s: stopping; the cases not reported count as failed`);
  killAll();
  writeSummary();
  process.exit(1);
}, DEADLINE).unref();

// A SIGTERM (run.sh's cleanup) or ^C stops every process the cases started.
for (const sig of ['SIGTERM', 'SIGINT']) {
  process.on(sig, () => {
    console.error(`e2e: ${sig}: stopping`);
    killAll();
    writeSummary();
    process.exit(1);
  });
}

const LEGACY = ['openai sdk chat (60 turns, restart, /context, /compact, ctxmgr_read)', '@anthropic-ai/sdk messages (60 turns, restart, /context, /compact, ctxmgr_read)'];
const legacySelected = !only.length || LEGACY.some((n) => only.some((o) => n.includes(o)));

// writeSummary writes "PASSED FAILED" to $WORK/summary, counting every selected case not
// reported yet as failed, and returns the number failed.
function writeSummary() {
  const expected = selected.length + (legacySelected ? LEGACY.length : 0);
  const passed = results.filter((r) => r.ok).length;
  const failed = Math.max(expected, results.length) - passed;
  fs.writeFileSync(path.join(WORK, 'summary'), `${passed} ${failed}\n`);
  return failed;
}

const selected = cases.filter((c) => !only.length || only.some((o) => c.name.includes(o)));
try {
  // Two at a time: the official SDKs' scenario beside the queue of client cases.
  const queue = [...selected];
  const worker = async () => {
    while (queue.length) await runCase(queue.shift());
  };
  await Promise.all([legacyCases().then(worker), worker()]);
} catch (err) {
  console.error(`e2e: aborted: ${err.stack || err}`);
  results.push({ name: 'runner', ok: false });
} finally {
  killAll();
}
process.exit(writeSummary() ? 1 : 0);

// The real clients, each driven through the fake upstream's agent script (see
// internal/fakeupstream/agent.go): the fake asks for N tool calls on generated files of a few
// thousand tokens each (so the history grows far beyond the window), then answers
// "e2e-agent done: N steps." Each client runs its own tool loop and executes the tools itself.
//
// A client function gets { proxy, trap, work, dir } and returns { fails, notes }: whether the
// client finished normally with the final answer. lib.mjs checks the rest (upstream records,
// metrics, network attempts).
import fs from 'node:fs';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { generateText, streamText, tool, stepCountIs, jsonSchema } from 'ai';
import { createOpenAI } from '@ai-sdk/openai';
import { createAnthropic } from '@ai-sdk/anthropic';
import { ChatOpenAI } from '@langchain/openai';
import { ChatAnthropic } from '@langchain/anthropic';
import { ToolMessage, HumanMessage } from '@langchain/core/messages';
import { GoogleGenAI } from '@google/genai';
import { runProcess, marker, writeSteps, AGENT_DONE } from './lib.mjs';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const NODE_BIN = path.join(HERE, 'node_modules', '.bin');

// The tools of the SDK-driven agents, executed for real in the work directory.
const TOOL_DESC = {
  bash: 'Run a shell command in the work directory and return its output.',
  read_file: 'Read a file and return its content.',
};
const TOOL_SCHEMA = {
  bash: { type: 'object', properties: { command: { type: 'string', description: 'The command.' } }, required: ['command'], additionalProperties: false },
  read_file: { type: 'object', properties: { file_path: { type: 'string', description: 'Absolute path.' } }, required: ['file_path'], additionalProperties: false },
};
function runTool(name, args, cwd) {
  if (name === 'bash') return execFileSync('bash', ['-c', String(args.command)], { cwd, encoding: 'utf8', timeout: 10000, maxBuffer: 1 << 24 });
  if (name === 'read_file') return fs.readFileSync(String(args.file_path), 'utf8');
  throw new Error(`unknown tool ${name}`);
}

// Two turns per SDK client: the first not streamed, the second streamed, in one conversation.
function twoTurns(work, steps) {
  const a = path.join(work, 'a');
  const b = path.join(work, 'b');
  writeSteps(a, steps[0], 3000, 'a');
  writeSteps(b, steps[1], 3000, 'b');
  return [
    `Run the build steps and report. ${marker(steps[0], a)}`,
    `Now the second batch, please. ${marker(steps[1], b)}`,
  ];
}

function expectDone(fails, what, text, steps) {
  const want = `${AGENT_DONE}${steps} steps.`;
  if (!String(text ?? '').includes(want)) fails.push(`${what}: the final answer is not ${JSON.stringify(want)}: ${JSON.stringify(String(text ?? '').slice(0, 300))}`);
}

// --- AI SDK (ai v6) ---

function aiTools(cwd) {
  const t = {};
  for (const name of Object.keys(TOOL_DESC)) {
    t[name] = tool({ description: TOOL_DESC[name], inputSchema: jsonSchema(TOOL_SCHEMA[name]), execute: async (args) => runTool(name, args, cwd) });
  }
  return t;
}

async function aiSdkCase(model, { work }, providerOptions) {
  const fails = [];
  const steps = [10, 8];
  const prompts = twoTurns(work, steps);
  const tools = aiTools(work);
  const r1 = await generateText({ model, tools, prompt: prompts[0], stopWhen: stepCountIs(steps[0] + 2), maxRetries: 0, providerOptions });
  expectDone(fails, 'generateText', r1.text, steps[0]);
  const messages = [{ role: 'user', content: prompts[0] }, ...r1.response.messages, { role: 'user', content: prompts[1] }];
  let streamErr;
  const r2 = streamText({ model, tools, messages, stopWhen: stepCountIs(steps[1] + 2), maxRetries: 0, providerOptions, onError: ({ error }) => { streamErr = error; } });
  const text2 = await r2.text;
  if (streamErr) fails.push(`streamText: ${streamErr.message ?? streamErr}`);
  expectDone(fails, 'streamText', text2, steps[1]);
  const nSteps = r1.steps.length + (await r2.steps).length;
  return { fails, notes: [`${nSteps} steps`] };
}

export function aiSdkOpenAIChat(ctx) {
  const openai = createOpenAI({ baseURL: `${ctx.proxy.url}/v1`, apiKey: 'sk-e2e-aisdk' });
  return aiSdkCase(openai.chat('gpt-4o'), ctx);
}
export function aiSdkOpenAIResponses(ctx) {
  const openai = createOpenAI({ baseURL: `${ctx.proxy.url}/v1`, apiKey: 'sk-e2e-aisdk' });
  return aiSdkCase(openai('gpt-4o'), ctx); // the default: the Responses API
}
export function aiSdkAnthropic(ctx) {
  const anthropic = createAnthropic({ baseURL: `${ctx.proxy.url}/v1`, apiKey: 'sk-ant-e2e-aisdk' });
  // Its default max_tokens (64000), and extended thinking: the fake signs the thinking blocks
  // and refuses any that do not come back byte-exact.
  return aiSdkCase(anthropic('claude-sonnet-4-5'), ctx, { anthropic: { thinking: { type: 'enabled', budgetTokens: 2048 } } });
}

// --- LangChain JS ---

async function langchainCase(model, { work }) {
  const fails = [];
  const steps = [10, 8];
  const prompts = twoTurns(work, steps);
  const bound = model.bindTools(Object.keys(TOOL_DESC).map((name) => ({
    type: 'function', function: { name, description: TOOL_DESC[name], parameters: TOOL_SCHEMA[name] },
  })));
  const messages = [];
  let calls = 0;
  for (const [turn, prompt] of prompts.entries()) {
    messages.push(new HumanMessage(prompt));
    const stream = turn === 1;
    let final = null;
    for (let i = 0; i < steps[turn] + 2; i++) {
      let ai;
      if (!stream) ai = await bound.invoke(messages);
      else {
        for await (const chunk of await bound.stream(messages)) ai = ai ? ai.concat(chunk) : chunk;
      }
      messages.push(ai);
      if (!ai.tool_calls?.length) {
        final = typeof ai.content === 'string' ? ai.content : ai.content.map((c) => c.text ?? '').join('');
        break;
      }
      for (const tc of ai.tool_calls) {
        calls++;
        messages.push(new ToolMessage({ content: runTool(tc.name, tc.args, work), tool_call_id: tc.id }));
      }
    }
    expectDone(fails, stream ? 'stream' : 'invoke', final, steps[turn]);
  }
  return { fails, notes: [`${calls} tool calls`] };
}

export function langchainOpenAI(ctx) {
  return langchainCase(new ChatOpenAI({ model: 'gpt-4o', apiKey: 'sk-e2e-langchain', maxRetries: 0, configuration: { baseURL: `${ctx.proxy.url}/v1` } }), ctx);
}
export function langchainAnthropic(ctx) {
  return langchainCase(new ChatAnthropic({ model: 'claude-sonnet-4-5', apiKey: 'sk-ant-e2e-langchain', maxRetries: 0, anthropicApiUrl: ctx.proxy.url }), ctx);
}

// --- the official openai package, Responses API (stateless: store false, as Codex sends) ---

export async function openaiResponses({ proxy, work }) {
  const fails = [];
  const steps = [10, 8];
  const prompts = twoTurns(work, steps);
  const client = new OpenAI({ baseURL: `${proxy.url}/v1`, apiKey: 'sk-e2e-responses', maxRetries: 0, timeout: 60000 });
  const tools = Object.keys(TOOL_DESC).map((name) => ({ type: 'function', name, description: TOOL_DESC[name], parameters: TOOL_SCHEMA[name], strict: false }));
  const input = [];
  for (const [turn, prompt] of prompts.entries()) {
    input.push({ role: 'user', content: prompt });
    const stream = turn === 1;
    let final = null;
    for (let i = 0; i < steps[turn] + 2; i++) {
      const params = { model: 'gpt-4o', instructions: 'You are a coding agent under an end-to-end test.', input, tools, store: false, max_output_tokens: 1024 };
      const resp = stream ? await client.responses.stream(params).finalResponse() : await client.responses.create(params);
      input.push(...resp.output);
      const calls = resp.output.filter((o) => o.type === 'function_call');
      if (!calls.length) {
        final = resp.output_text;
        break;
      }
      for (const c of calls) input.push({ type: 'function_call_output', call_id: c.call_id, output: runTool(c.name, JSON.parse(c.arguments), work) });
    }
    expectDone(fails, stream ? 'stream' : 'create', final, steps[turn]);
  }
  // The proxy's ctxmgr_read, in Responses form: the fake calls it on a reference the proxy left
  // in the context (an archive or an offload); the proxy answers it itself, and the client sees
  // only the final text, never the call.
  for (const stream of [false, true]) {
    input.push({ role: 'user', content: 'now read back the full output of the earlier command' });
    const params = { model: 'gpt-4o', instructions: 'You are a coding agent under an end-to-end test.', input, tools, store: false, max_output_tokens: 1024 };
    const resp = stream ? await client.responses.stream(params).finalResponse() : await client.responses.create(params);
    input.push(...resp.output);
    if (resp.output.some((o) => o.type === 'function_call')) fails.push(`read back (${stream ? 'stream' : 'create'}): the client got a function call: ${JSON.stringify(resp.output).slice(0, 300)}`);
    else if (!resp.output_text.startsWith('Read back: ')) fails.push(`read back (${stream ? 'stream' : 'create'}): the answer is ${JSON.stringify(resp.output_text.slice(0, 200))}`);
  }
  const reads = (await proxy.metrics()).get('ctxmgr_reads_total');
  if (reads !== 2) fails.push(`ctxmgr_reads_total is ${reads}, want 2`);
  return { fails, notes: [`${input.length} input items, ${reads} ctxmgr_read round trips`] };
}

// --- the @google/genai SDK (the Gemini API) ---

// The model of the Gemini cases: a Gemini 3 model, so that the fake refuses any function call
// sent back without the thoughtSignature it issued with it.
export const GEMINI_MODEL = 'gemini-3-pro-preview';

export async function googleGenAI({ proxy, work }) {
  const fails = [];
  const notes = [];
  const steps = [10, 8];
  const prompts = twoTurns(work, steps);
  const ai = new GoogleGenAI({ apiKey: 'AIza-e2e-genai', httpOptions: { baseUrl: proxy.url } });
  const config = {
    systemInstruction: 'You are a coding agent under an end-to-end test.',
    tools: [{ functionDeclarations: Object.keys(TOOL_DESC).map((name) => ({ name, description: TOOL_DESC[name], parametersJsonSchema: TOOL_SCHEMA[name] })) }],
    maxOutputTokens: 1024,
  };
  const contents = [];
  // One model call: the model's parts (all of a stream's chunks) as the SDK gives them, the
  // thoughtSignature of each part included, appended to the history as they are.
  const call = async (stream) => {
    let parts = [];
    let finish = '';
    if (stream) {
      for await (const chunk of await ai.models.generateContentStream({ model: GEMINI_MODEL, contents, config })) {
        const c = chunk.candidates?.[0];
        parts.push(...(c?.content?.parts ?? []));
        if (c?.finishReason) finish = c.finishReason;
      }
    } else {
      const r = await ai.models.generateContent({ model: GEMINI_MODEL, contents, config });
      parts = r.candidates?.[0]?.content?.parts ?? [];
      finish = r.candidates?.[0]?.finishReason ?? '';
    }
    if (!finish) throw new Error(`the answer has no finish reason: ${JSON.stringify(parts).slice(0, 300)}`);
    // Adjacent plain text parts (a stream's pieces) are joined, as Gemini CLI does; a part
    // with a thoughtSignature or a thought is kept as it came.
    const merged = [];
    for (const p of parts) {
      const prev = merged[merged.length - 1];
      const plain = (x) => x && Object.keys(x).length === 1 && typeof x.text === 'string';
      if (plain(p) && plain(prev)) merged[merged.length - 1] = { text: prev.text + p.text };
      else merged.push(p);
    }
    parts = merged;
    contents.push({ role: 'model', parts });
    return parts;
  };
  const text = (parts) => parts.filter((p) => typeof p.text === 'string' && !p.thought).map((p) => p.text).join('');
  let calls = 0;
  let parallel = 0;
  const loop = async (prompt, stream, max, answer) => {
    contents.push({ role: 'user', parts: [{ text: prompt }] });
    for (let i = 0; i < max; i++) {
      const parts = await call(stream);
      const fcs = parts.filter((p) => p.functionCall).map((p) => p.functionCall);
      if (!fcs.length) return text(parts);
      if (fcs.some((f) => f.name === 'ctxmgr_read')) fails.push('the client got a ctxmgr_read call');
      if (fcs.length > 1) parallel++;
      calls += fcs.length;
      contents.push({ role: 'user', parts: fcs.map((f) => ({ functionResponse: { ...(f.id ? { id: f.id } : {}), name: f.name, response: { output: answer(f) } } })) });
    }
    return null;
  };
  for (const [turn, prompt] of prompts.entries()) {
    const final = await loop(prompt, turn === 1, steps[turn] + 2, (f) => runTool(f.name, f.args, work));
    expectDone(fails, turn === 1 ? 'generateContentStream' : 'generateContent', final, steps[turn]);
  }
  // Parallel function calls: two calls in one answer, answered in one content.
  for (const stream of [false, true]) {
    const final = await loop('run the linters in parallel', stream, 3, (f) => `ran ${JSON.stringify(f.args)}\n`.repeat(40));
    if (!String(final).startsWith('Done: ')) fails.push(`parallel calls (${stream ? 'stream' : 'not streamed'}): the answer is ${JSON.stringify(String(final).slice(0, 200))}`);
  }
  if (parallel !== 2) fails.push(`${parallel} answers with parallel calls, want 2`);
  // ctxmgr_read, as a Gemini function call the proxy answers itself.
  for (const stream of [false, true]) {
    const final = await loop('now read back the full output of the earlier command', stream, 2, () => 'unexpected');
    if (!String(final).startsWith('Read back: ')) fails.push(`read back (${stream ? 'stream' : 'not streamed'}): the answer is ${JSON.stringify(String(final).slice(0, 200))}`);
  }
  const reads = (await proxy.metrics()).get('ctxmgr_reads_total');
  if (reads !== 2) fails.push(`ctxmgr_reads_total is ${reads}, want 2`);
  // countTokens of the history: answered by the proxy for what it would forward.
  const counted = await ai.models.countTokens({ model: GEMINI_MODEL, contents });
  const raw = JSON.stringify(contents).length / 4;
  if (!(counted.totalTokens > 0 && counted.totalTokens < raw / 2)) fails.push(`countTokens: ${counted.totalTokens} tokens for a history of about ${Math.round(raw)}`);
  notes.push(`${contents.length} contents, ${calls} function calls, ${reads} ctxmgr_read round trips, countTokens ${counted.totalTokens}`);
  return { fails, notes };
}

// --- Gemini CLI and its fork Qwen Code: headless agents with a settings.json ---

// cliSettings writes a Gemini CLI-style settings.json (DIR/home/.NAME/settings.json) selecting
// the auth type, with usage statistics, telemetry and update checks off, and returns the home.
function cliSettings(dir, name, auth) {
  const home = path.join(dir, 'home');
  fs.mkdirSync(path.join(home, name), { recursive: true });
  fs.writeFileSync(path.join(home, name, 'settings.json'), JSON.stringify({
    security: { auth: { selectedType: auth } },
    privacy: { usageStatisticsEnabled: false },
    telemetry: { enabled: false },
    general: { disableAutoUpdate: true, disableUpdateNag: true },
  }, null, 2));
  return home;
}

// runScript runs a headless agent once through an agent script of `steps` steps and checks
// that it exits 0 with the script's final answer.
async function runScript(what, bin, args, { work, dir, env, steps }) {
  fs.mkdirSync(env.TMPDIR, { recursive: true });
  const fails = [];
  const r = await runProcess(path.join(NODE_BIN, bin), args, { cwd: work, env, timeoutMs: 120000, logFile: path.join(dir, 'client1.log') });
  if (r.code !== 0) fails.push(`${bin} exited with ${r.code ?? r.signal}${r.timedOut ? ' (timed out)' : ''}: ${(r.stdout + r.stderr).trim().slice(0, 400)}`);
  else expectDone(fails, what, r.stdout, steps);
  return { fails, notes: [`${what}, ${steps} tool steps`] };
}

export async function geminiCLI({ proxy, trap, work, dir }) {
  // ~100K tokens of tool output through a 40K window. Gemini CLI 0.61.0 masks old tool outputs
  // itself once its estimate of them passes 80K tokens (50K kept, 30K to mask; not settable
  // then), which rewrites earlier messages (the proxy follows such an edit as a branch): the
  // script stays below that, so that the proxy alone manages the history.
  const steps = 20;
  const files = path.join(work, 'files'); // inside the workspace: Gemini CLI reads nothing outside
  writeSteps(files, steps, 5000, 'gemini');
  const home = cliSettings(dir, '.gemini', 'gemini-api-key');
  const env = {
    PATH: process.env.PATH, HOME: home, TMPDIR: path.join(dir, 'tmp'),
    GOOGLE_GEMINI_BASE_URL: proxy.url, GEMINI_API_KEY: 'AIza-e2e-gemini-cli',
    GEMINI_CLI_TRUST_WORKSPACE: 'true', NO_COLOR: '1',
    ...trap.env,
  };
  // One run: Gemini CLI 0.61.0 resumes (--resume) a history with tool calls by sending each
  // function response twice, which the Gemini API refuses with or without the proxy.
  return runScript('gemini -p', 'gemini', ['-p', `Run the build steps and report. ${marker(steps, files)}`, '-m', GEMINI_MODEL, '--yolo', '--output-format', 'text'],
    { work, dir, env, steps });
}

// Qwen Code (qwen -p) in its OpenAI-compatible mode.
export async function qwenCode({ proxy, trap, work, dir }) {
  const steps = 24; // ~120K tokens of tool output through a 40K window
  const files = path.join(work, 'files');
  writeSteps(files, steps, 5000, 'qwen');
  const home = cliSettings(dir, '.qwen', 'openai');
  const env = {
    PATH: process.env.PATH, HOME: home, TMPDIR: path.join(dir, 'tmp'),
    OPENAI_BASE_URL: `${proxy.url}/v1`, OPENAI_API_KEY: 'sk-e2e-qwen-code', OPENAI_MODEL: 'gpt-4o',
    QWEN_CODE_SUPPRESS_YOLO_WARNING: '1', NO_COLOR: '1',
    ...trap.env,
  };
  return runScript('qwen -p', 'qwen', ['-p', `Run the build steps and report. ${marker(steps, files)}`, '--yolo', '--output-format', 'text'],
    { work, dir, env, steps });
}

// --- OpenCode (opencode run, a provider whose baseURL is the proxy) ---

export async function openCode({ proxy, trap, work, dir }) {
  const steps = 24; // ~120K tokens of tool output through a 40K window
  const files = path.join(work, 'files');
  writeSteps(files, steps, 5000, 'opencode');
  const home = path.join(dir, 'home');
  fs.mkdirSync(home, { recursive: true });
  // A provider of the bundled @ai-sdk/openai-compatible package (nothing to install) whose
  // baseURL is the proxy.
  fs.writeFileSync(path.join(work, 'opencode.json'), JSON.stringify({
    $schema: 'https://opencode.ai/config.json',
    provider: {
      ctxmgr: {
        npm: '@ai-sdk/openai-compatible', name: 'ctxmgr',
        options: { baseURL: `${proxy.url}/v1`, apiKey: 'sk-e2e-opencode' },
        models: { 'gpt-4o': { name: 'gpt-4o', limit: { context: 40000, output: 4096 } } },
      },
    },
    model: 'ctxmgr/gpt-4o', small_model: 'ctxmgr/gpt-4o',
    autoupdate: false, share: 'disabled',
    agent: { title: { disable: true } },
  }, null, 2));
  const env = {
    PATH: process.env.PATH, HOME: home, TMPDIR: path.join(dir, 'tmp'),
    XDG_CONFIG_HOME: path.join(home, '.config'), XDG_DATA_HOME: path.join(home, '.local', 'share'),
    XDG_CACHE_HOME: path.join(home, '.cache'), XDG_STATE_HOME: path.join(home, '.local', 'state'),
    // No update check, models.dev catalog, plugin install (the default plugins are installed in
    // the background from npm), LSP download, sharing, or other agents' settings; and no
    // compaction or pruning of its own: the proxy manages the history.
    OPENCODE_DISABLE_AUTOUPDATE: '1', OPENCODE_DISABLE_MODELS_FETCH: '1', OPENCODE_DISABLE_DEFAULT_PLUGINS: '1',
    OPENCODE_DISABLE_LSP_DOWNLOAD: '1', OPENCODE_DISABLE_SHARE: '1', OPENCODE_DISABLE_CLAUDE_CODE: '1',
    OPENCODE_DISABLE_EXTERNAL_SKILLS: '1', OPENCODE_DISABLE_AUTOCOMPACT: '1', OPENCODE_DISABLE_PRUNE: '1',
    ...trap.env,
    // Its background install of @opencode-ai/plugin into its config directory goes to a
    // registry on loopback that refuses it, instead of npmjs.org.
    npm_config_registry: 'http://127.0.0.1:9/', NPM_CONFIG_REGISTRY: 'http://127.0.0.1:9/',
  };
  return runScript('opencode run', 'opencode', ['run', `Run the build steps and report. ${marker(steps, files)}`], { work, dir, env, steps });
}

// --- Claude Code (claude -p, its own Bash and Read tools) ---

export function claudeCode(model) {
  return async ({ proxy, trap, work, dir }) => {
    const steps = 24; // ~120K tokens of tool output through a 40K window
    const files = path.join(work, 'files');
    writeSteps(files, steps, 5000, 'claude');
    const home = path.join(dir, 'home');
    fs.mkdirSync(home, { recursive: true });
    const env = {
      PATH: process.env.PATH, HOME: home, TMPDIR: path.join(dir, 'tmp'),
      CLAUDE_CONFIG_DIR: path.join(dir, 'claude-config'),
      ANTHROPIC_BASE_URL: proxy.url, ANTHROPIC_API_KEY: 'sk-ant-e2e-claude-code',
      // No telemetry, update check, error report or other non-essential traffic.
      CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1', DISABLE_TELEMETRY: '1', DISABLE_AUTOUPDATER: '1',
      DISABLE_ERROR_REPORTING: '1', DISABLE_BUG_COMMAND: '1',
      ...trap.env,
    };
    fs.mkdirSync(env.TMPDIR, { recursive: true });
    const common = ['--output-format', 'text'];
    if (model) common.push('--model', model);
    // As root, --dangerously-skip-permissions is refused: allow the two tools instead.
    common.push('--allowedTools', 'Bash', 'Read');
    const fails = [];
    // Two runs of one conversation: the second continues the first (claude -p --continue).
    const more = 8;
    const files2 = path.join(work, 'files2');
    writeSteps(files2, more, 5000, 'claude2');
    const runs = [
      { args: ['-p', `Run the build steps and report. ${marker(steps, files)}`, ...common], steps },
      { args: ['-p', `Now the second batch. ${marker(more, files2)}`, '--continue', ...common], steps: more },
      // The fake asks for the proxy's ctxmgr_read; the proxy answers it, Claude Code never sees it.
      { args: ['-p', 'now read back the full output of the earlier command', '--continue', ...common], readBack: true },
    ];
    for (const [i, run] of runs.entries()) {
      const r = await runProcess(path.join(NODE_BIN, 'claude'), run.args, { cwd: work, env, timeoutMs: 120000, logFile: path.join(dir, `client${i + 1}.log`) });
      if (r.code !== 0) {
        fails.push(`claude run ${i + 1} exited with ${r.code ?? r.signal}${r.timedOut ? ' (timed out)' : ''}: ${(r.stdout + r.stderr).trim().slice(0, 400)}`);
        break;
      }
      if (run.readBack) {
        if (!r.stdout.startsWith('Read back: ')) fails.push(`claude -p run ${i + 1}: the read back answered ${JSON.stringify(r.stdout.slice(0, 200))}`);
      } else expectDone(fails, `claude -p run ${i + 1}`, r.stdout, run.steps);
    }
    const reads = (await proxy.metrics()).get('ctxmgr_reads_total');
    if (reads < 1) fails.push('no ctxmgr_read was answered by the proxy');
    return { fails, notes: ['3 runs of one conversation (--continue), the last a ctxmgr_read'] };
  };
}

// --- Codex CLI (codex exec, a custom Responses provider) ---

// codexSetup writes Codex's home (its provider: ctxmgr serve, named providerName; extra
// top-level settings) and returns its environment.
function codexSetup({ proxy, trap, dir }, { providerName = 'ctxmgr', extra = '' } = {}) {
  const home = path.join(dir, 'home');
  const codexHome = path.join(dir, 'codex-home');
  fs.mkdirSync(home, { recursive: true });
  fs.mkdirSync(codexHome, { recursive: true });
  fs.writeFileSync(path.join(codexHome, 'config.toml'), `# ctxmgr e2e: Codex through ctxmgr serve, nothing else.
model = "gpt-5.1-codex"
model_provider = "ctxmgr"
${extra}check_for_update_on_startup = false
web_search = "disabled"

# No plugin catalogue, apps or memories: each would fetch from github.com or chatgpt.com.
[features]
plugins = false
remote_plugin = false
plugin_sharing = false
apps = false
memories = false

[analytics]
enabled = false

[feedback]
enabled = false

[otel]
exporter = "none"

[model_providers.ctxmgr]
name = "${providerName}"
base_url = "${proxy.url}/v1"
wire_api = "responses"
env_key = "CTXMGR_E2E_OPENAI_KEY"
request_max_retries = 0
stream_max_retries = 0
supports_websockets = false
`);
  const env = { PATH: process.env.PATH, HOME: home, CODEX_HOME: codexHome, CTXMGR_E2E_OPENAI_KEY: 'sk-e2e-codex', TMPDIR: path.join(dir, 'tmp'), ...trap.env };
  fs.mkdirSync(env.TMPDIR, { recursive: true });
  return env;
}

// codexRun runs `codex exec` on the agent script and checks its final answer.
async function codexRun({ env, work, dir }, steps, files) {
  const last = path.join(dir, 'codex-last-message.txt');
  // The workspace-write sandbox (Codex's bundled bubblewrap) lets its shell commands read the
  // work directory; approvals are off in exec mode. CODEX_SANDBOX=danger-full-access where user
  // namespaces are not available.
  const sandbox = process.env.CODEX_SANDBOX || 'workspace-write';
  const args = ['exec', '--skip-git-repo-check', '--sandbox', sandbox, '-C', work, '-o', last,
    `Run the build steps and report. ${marker(steps, files)}`];
  const fails = [];
  const r = await runProcess(path.join(NODE_BIN, 'codex'), args, { cwd: work, env, timeoutMs: 120000, logFile: path.join(dir, 'client1.log') });
  if (r.code !== 0) {
    fails.push(`codex exited with ${r.code ?? r.signal}${r.timedOut ? ' (timed out)' : ''}: ${codexErrors(r)}`);
    return { fails, ok: false, last, sandbox };
  }
  expectDone(fails, 'codex exec', fs.existsSync(last) ? fs.readFileSync(last, 'utf8') : r.stdout, steps);
  return { fails, ok: true, last, sandbox };
}

export async function codexExec({ proxy, trap, work, dir }) {
  const steps = 24; // ~100K tokens of tool output through a 40K window
  const files = path.join(work, 'files');
  writeSteps(files, steps, 4000, 'codex');
  const env = codexSetup({ proxy, trap, dir });
  const { fails, ok, last, sandbox } = await codexRun({ env, work, dir }, steps, files);
  if (!ok) return { fails, notes: [] };
  // The same conversation again (codex exec resume --last): the fake asks for the proxy's
  // ctxmgr_read on a reference left in the compacted history; the proxy answers it in
  // Responses form and Codex sees only the final text.
  fs.rmSync(last, { force: true });
  const r2 = await runProcess(path.join(NODE_BIN, 'codex'), ['exec', 'resume', '--last', '--skip-git-repo-check',
    '-c', `sandbox_mode="${sandbox}"`, '-o', last, 'now read back the full output of the earlier command'],
  { cwd: work, env, timeoutMs: 120000, logFile: path.join(dir, 'client2.log') });
  if (r2.code !== 0) fails.push(`codex exec resume exited with ${r2.code ?? r2.signal}${r2.timedOut ? ' (timed out)' : ''}: ${codexErrors(r2)}`);
  else {
    const text = fs.existsSync(last) ? fs.readFileSync(last, 'utf8') : r2.stdout;
    if (!text.startsWith('Read back: ')) fails.push(`codex exec resume: the read back answered ${JSON.stringify(text.slice(0, 200))}`);
    const reads = (await proxy.metrics()).get('ctxmgr_reads_total');
    if (reads < 1) fails.push('codex exec resume: no ctxmgr_read was answered by the proxy');
  }
  return { fails, notes: ['2 runs (exec, then exec resume --last with a ctxmgr_read)'] };
}

// codexRemoteCompaction: Codex with a provider named "OpenAI" and a low auto-compact limit
// compacts remotely during its exec run (a /v1/responses request ending in a
// compaction_trigger item, or POST /v1/responses/compact), which requires exactly one
// compaction output item; the proxy answers it, and expands the item Codex sends back.
export async function codexRemoteCompaction({ proxy, trap, work, dir }) {
  const steps = 12;
  const files = path.join(work, 'files');
  writeSteps(files, steps, 4000, 'codex');
  const env = codexSetup({ proxy, trap, dir }, { providerName: 'OpenAI', extra: 'model_auto_compact_token_limit = 12000\n' });
  const { fails, ok } = await codexRun({ env, work, dir }, steps, files);
  if (!ok) return { fails, notes: [] };
  const m = await proxy.metrics();
  const local = m.series['ctxmgr_provider_context_total{decision="local",feature="responses_compaction",format="responses"}'] ?? 0;
  if (local < 1) fails.push('Codex never compacted remotely through the proxy (ctxmgr_provider_context_total local is 0)');
  return { fails, notes: [`${local} requests with Responses compaction answered by the proxy`] };
}

function codexErrors(r) {
  return (r.stderr.split('\n').filter((l) => /error/i.test(l)).slice(-3).join(' | ') || (r.stdout + r.stderr).slice(-300)).trim();
}

// --- @anthropic-ai/sdk beta messages with the providers' own context management ---

// anthropicBetaLoop runs an agent script of steps files (tagged tag) with client.beta.messages
// (every other request streamed), params added to each request, until the final answer. onMessage sees each answer;
// an answer that stops for a compaction is kept in the history and the loop goes on.
async function anthropicBetaLoop({ proxy, work }, tag, steps, params, onMessage) {
  const files = path.join(work, 'files');
  writeSteps(files, steps, 3000, tag);
  const client = anthropicClient(proxy);
  const prompt = `Run the build steps and report. ${marker(steps, files)}`;
  const tools = Object.keys(TOOL_DESC).map((name) => ({ name, description: TOOL_DESC[name], input_schema: TOOL_SCHEMA[name] }));
  const messages = [{ role: 'user', content: prompt }];
  for (let i = 0; i < steps * 3 + 6; i++) {
    const req = { model: 'claude-sonnet-4-6', max_tokens: 2048, messages, tools, ...params };
    const msg = i % 2 === 0 ? await client.beta.messages.create(req) : await client.beta.messages.stream(req).finalMessage();
    onMessage(msg);
    messages.push({ role: 'assistant', content: msg.content });
    if (msg.stop_reason === 'compaction') continue;
    const uses = msg.content.filter((b) => b.type === 'tool_use');
    if (msg.stop_reason !== 'tool_use' || uses.length === 0) return msg.content.filter((b) => b.type === 'text').map((b) => b.text).join('');
    messages.push({ role: 'user', content: uses.map((u) => ({ type: 'tool_result', tool_use_id: u.id, content: runTool(u.name, u.input, work) })) });
  }
  throw new Error('the tool loop did not end');
}

function anthropicClient(proxy) {
  return new Anthropic({ baseURL: proxy.url, apiKey: 'sk-ant-e2e', maxRetries: 0, timeout: 60000 });
}

// anthropicClearToolUses: clear_tool_uses_20250919 (beta context-management-2025-06-27)
// through the proxy in front of an upstream without it: the proxy clears old tool results
// and says so in context_management.applied_edits.
export async function anthropicClearToolUses(ctx) {
  const steps = 10;
  const fails = [];
  let applied = 0;
  const text = await anthropicBetaLoop(ctx, 'edit', steps, {
    betas: ['context-management-2025-06-27'],
    context_management: { edits: [{ type: 'clear_tool_uses_20250919', trigger: { type: 'input_tokens', value: 8000 }, keep: { type: 'tool_uses', value: 2 } }] },
  }, (msg) => {
    for (const e of msg.context_management?.applied_edits ?? []) if (e.type === 'clear_tool_uses_20250919' && e.cleared_tool_uses > 0) applied++;
  });
  expectDone(fails, 'beta.messages with clear_tool_uses', text, steps);
  if (applied < 1) fails.push('no answer reported a clear_tool_uses edit applied');
  return { fails, notes: [`${applied} answers with tool uses cleared`] };
}

// anthropicCompact: compact_20260112 (beta compact-2026-01-12) through the proxy in front of
// an upstream without it: once the client's input passes the trigger, the proxy's answer
// starts with a compaction block, the model's answer after it; the client sends the block back
// with the rest of its history.
export async function anthropicCompact(ctx) {
  const steps = 24;
  const fails = [];
  let compactions = 0;
  const text = await anthropicBetaLoop(ctx, 'compact', steps, {
    betas: ['compact-2026-01-12'],
    context_management: { edits: [{ type: 'compact_20260112', trigger: { type: 'input_tokens', value: 50000 } }] },
  }, (msg) => {
    const block = msg.content.find((b) => b.type === 'compaction');
    if (!block) return;
    compactions++;
    // Without pause_after_compaction the model's answer follows the block, in the same message.
    if (msg.content[0] !== block || msg.content.length < 2 || msg.stop_reason === 'compaction' || !block.content || !block.encrypted_content) fails.push(`a compaction answer is malformed: ${JSON.stringify(msg).slice(0, 300)}`);
    const iters = (msg.usage?.iterations ?? []).map((it) => it.type).join(',');
    if (iters !== 'compaction,message') fails.push(`a compaction answer's usage.iterations is ${iters}, want compaction,message`);
  });
  expectDone(fails, 'beta.messages with compact_20260112', text, steps);
  if (compactions < 1) fails.push('the proxy never answered with a compaction');
  return { fails, notes: [`${compactions} compactions answered by the proxy`] };
}

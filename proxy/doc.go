// Package proxy is an OpenAI-, Anthropic- and Gemini-compatible HTTP proxy that manages the
// context of any agent that talks to it (ctxmgr serve).
//
// A Go program gets the same management in process, without a socket: NewTransport returns an
// http.RoundTripper that serves each managed request through the Handler's own code and sends
// it to the URL the client addressed; put it under the program's HTTP client (an official
// SDK's: option.WithHTTPClient(&http.Client{Transport: t})).
//
// # Endpoints
//
// POST /v1/chat/completions (OpenAI), POST /v1/messages (Anthropic), POST /v1/responses
// (the OpenAI Responses API, see responses.go) and POST /v1beta/models/{model}:generateContent
// and :streamGenerateContent (the Gemini API, see gemini.go), streaming and not, are forwarded
// to the upstream of their format (Config.UpstreamOpenAI, Config.UpstreamAnthropic,
// Config.UpstreamGemini, or a Route chosen by model prefix) with the conversation managed.
// Everything the proxy does not manage passes through untouched: unknown body fields (kept
// verbatim by package wire), request headers (Authorization, x-api-key, anthropic-version,
// anthropic-beta, ... except hop-by-hop ones, Host, Content-Length, Accept-Encoding and
// X-Ctxmgr-Session), the upstream's status codes, headers and error bodies byte for byte,
// usage, and stream events in order, each flushed as it arrives. A request the proxy does not
// manage is forwarded unchanged, so the client sees the provider's own answer, and it is
// counted in ctxmgr_unmanaged_requests_total{reason} with one of these reasons (Reason*):
// decode (a body the proxy cannot read), single_message (one user message and no tools:
// nothing in it may change, so it is sent as is and not stored), does_not_fit (the system
// prompt, tools and latest user message alone exceed the window), config, store (the session
// store failed), provider_state (the provider keeps the history) and path (GET /v1/models and
// other paths). GET /healthz answers "ok"; GET /metrics serves Prometheus metrics; /ui/
// serves the session inspector (inspector.go; Config.UILoopback, Config.UIToken); any other
// path is passed through to the upstream its path and headers suggest (a /v1beta/ path,
// x-goog-api-key: Gemini; x-api-key or anthropic-version: Anthropic; else OpenAI).
// POST /v1/messages/count_tokens (and the other formats' counting endpoints) is answered by the proxy for a known
// session (the tokens of the request it would forward; see count.go), else passed through.
//
// Every role and block the APIs accept is modelled or carried verbatim (package wire):
// OpenAI developer messages, Anthropic system entries inside messages (Claude Code's
// mid-conversation-system beta), thinking and redacted thinking with their signatures,
// images, documents, server tool blocks, citations; an unknown block type travels verbatim
// inside its message.
//
// # Prompt-cache breakpoints (Anthropic cache_control)
//
// A breakpoint belongs to the one request that carries it. Messages are stored without
// cache_control, and every forwarded request carries exactly the client's breakpoints: those
// on system blocks and tools untouched; one on a message still shown stays on that message's
// last block; one on a message the proxy evicted moves to where the stable prefix now ends
// (the summary, else the pinned task), so the calls after a compaction are cached from the new
// prefix on; two on one message become one. A forwarded request never carries more
// breakpoints than the client's own, nor more than the API's four (breakpoints.go).
//
// # The reply reserve
//
// The pipeline budgets the reply with min(max_tokens, ReplyCap(window)), a quarter of the
// window and at most 32000 tokens (the configured default when the request has no
// max_tokens). When the client's max_tokens does not fit beside the prepared input in the
// window in force (configured, or learned from an overflow), the forwarded body carries a
// lowered max_tokens; the response header X-Ctxmgr-Max-Tokens, the metric
// ctxmgr_max_tokens_lowered_total and a log line say so. No request goes unmanaged because of
// max_tokens (reply.go).
//
// # Sessions over a stateless API
//
// Clients resend the whole history on every call. The session key is the X-Ctxmgr-Session
// header, else the Anthropic metadata.user_id ("user-<id>"), else a hash of the system prompt
// and the first user message ("h-<hex>"). Each message is reduced to a normalized hash (role,
// text, images, tool calls with canonical JSON arguments, tool_call_id, is_error; not the wire
// spelling, names or reasoning parts, which clients re-serialize differently). The sessions of
// a key form a family whose ids all derive from the history, so it is found again after a
// restart without an index:
//   - the key's own session, while its stored history is a prefix of the incoming one: the
//     rest is appended (ctxmgr.Session.Append) and the stored spelling of the known messages
//     is kept, so the forwarded prefix is byte-stable;
//   - a history whose first message differs is another conversation under the same key (a
//     client's side request with a history of its own, a new chat): session "<id>=<8 hex>",
//     a hash of its first message; not a branch;
//   - a history that shares a prefix and then differs is an edit or a rewind: a branch,
//     session "<id>+<8 hex>" where the hex is a hash of the incoming history up to and
//     including its first differing message (so the branch is found again as the edited
//     conversation goes on). The original session is never touched. ctxmgr_branches_total
//     counts branches made.
//
// So a Claude Code run (a quota check and a title request under the run's metadata.user_id,
// then the main conversation) keeps one whole session for its conversation and no branch.
//
// Then ctxmgr's pipeline runs (Session.Prepare) and the body's system prompt, tools and
// messages are replaced by the prepared request (the summary instead of the compacted part),
// every other body field kept verbatim. When the pipeline changed nothing, the client's own
// bytes are forwarded.
//
// The assistant's reply is NOT appended from the upstream's response: the client sends it back
// in its next request, and that request is the single source of truth (no double bookkeeping,
// and a client that drops or edits the reply simply branches). The last reply of a session is
// therefore stored only when the client comes back.
//
// Sessions are cached in memory (Config.MaxSessions, least recently used dropped) and loaded
// from the Store (Manager.LoadSession) on a miss, so a restarted proxy, or another instance on
// the same PostgreSQL database, continues them.
//
// A request's new messages are written to the Store while the request is upstream
// (ctxmgr.Session.AppendDeferred, written by Session.Flush beside the upstream call), and the
// answer is relayed only once they are stored: the write costs no latency but what exceeds
// the upstream's own time, and an answered request always has its messages stored. A write
// that fails there drops the upstream's answer: the client gets 503 with Retry-After and its
// retry is managed from what the Store holds (ctxmgr_not_stored_total). With several
// instances on one database (Config.SharedStore; ctxmgr serve sets it for postgres://), the
// messages are written before the request goes upstream instead, so that when Append fails
// with store.ErrConflict (another instance appended first) the session is reloaded from the
// store and the append retried before any upstream call (conflict.go). One ctxmgr.Manager serves each (window, reply reserve, token counter): the
// window comes from Config.Models by model prefix, else Config.Window (default 200000); the
// reply reserve is described above. The preset's ingestion cap is lowered to `window` bytes for windows under 50000
// tokens (a tool result of more than about a quarter of the window is offloaded at once).
//
// # Reading offloaded and archived content: the ctxmgr_read tool
//
// Large tool results are offloaded to the Store and old messages archived when they are
// summarized; the summary and the offload notes name where they are. The agent reads them back
// through a tool the proxy adds and answers itself: in a conversation whose client declares
// tools of its own, a ctxmgr_read tool {"ref": string, "from_line": int} is
// appended to the forwarded tools from the first request managed (counted in the budget like
// any tool), and the tool list never changes later in the conversation; a conversation without
// tools never gets it. ref is a ref from a note ("Full text: tool_result/ID") or
// "messages A-B" for archived messages (rendered one message after the other as text lines).
// When the upstream's answer calls only ctxmgr_read, the proxy reads the Store (ReadOffload,
// ReadArchive), sends a follow-up request with the results (cut to what the window leaves)
// and relays that answer instead, at most Config.MaxReads times a request; the client never
// sees ctxmgr_read. This works streaming too: events stream through until a ctxmgr_read call
// starts; its events are held back, and the follow-up's events continue the same client stream
// (OpenAI: same chunk id; Anthropic: one message_start, content block indexes continued). When
// an answer calls ctxmgr_read together with the client's own tools, the ctxmgr_read calls are
// dropped from what the client sees. The read exchanges are not stored in the history (the
// client never sends them back). Config.DisableReadTool turns the tool off; the notes then
// only name Store locations (a files store in a directory the agent can read is the
// alternative).
//
// # Usage, overflows, commands
//
// After each successful answer the reported input tokens (OpenAI usage.prompt_tokens;
// Anthropic usage.input_tokens + cache_creation_input_tokens + cache_read_input_tokens, from
// message_start when streaming) calibrate the token counter per model (tokens.Calibrator over a
// heuristic) for non-OpenAI models; OpenAI models are counted exactly (their ratio is recorded
// in ctxmgr_usage_ratio).
//
// When the upstream answers with a context overflow (provider.IsOverflow), the proxy calls
// Session.Recover, which settles the session on the window the provider's error states (or
// one below the refused request), bounded by the Manager's MaxRecoveries, and retries; the
// session keeps that window, so a model served with a shorter context than the proxy assumed
// costs one retry, not one per request. The client sees the final answer, or the provider's
// error unchanged when recovery is exhausted. Streams are covered: an overflow is answered before any event.
//
// A latest user message that is exactly /compact [instruction], /context or /context clear is
// answered by the proxy in the client's format (a chat.completion / message object, or their
// SSE events), without calling the upstream model. Command messages and the proxy's answers
// (they start with "[ctxmgr]") are never appended to the history.
//
// # The providers' own context management
//
// Responses compaction (compaction_trigger, POST /v1/responses/compact, context_management
// compaction thresholds) and Anthropic context editing and compaction (context_management
// edits, top-level compaction, their betas) are passed through to the official endpoints and
// answered by the proxy for every other upstream, with its own summaries, archive and
// ctxmgr_read; an upstream that refuses them is learned as lacking them; Config.ProviderContext
// overrides per upstream (native.go, native_responses.go, native_anthropic.go, and
// docs/provider-context-management.md).
//
// # Operating it
//
// Request bodies are limited (Config.MaxBodyBytes, 413 beyond); UpstreamTimeout bounds the wait
// for the upstream's response headers; API keys and header values are never logged nor stored;
// every request is logged once with its session id. Metrics (per-Server registry unless
// Config.Registry is set): ctxmgr_requests_total{format,status}, ctxmgr_upstream_seconds,
// ctxmgr_tokens_before and ctxmgr_tokens_after, ctxmgr_compactions_total{trigger},
// ctxmgr_recoveries_total, ctxmgr_summarizer_fallbacks_total, ctxmgr_prefix_changed_total and
// ctxmgr_prefix_kept_total (cache-friendly requests), ctxmgr_verbatim_requests_total{format}
// (left unchanged: the client's own bytes forwarded), ctxmgr_commands_total, ctxmgr_reads_total,
// ctxmgr_branches_total, ctxmgr_session_reloads_total, ctxmgr_unmanaged_requests_total{reason},
// ctxmgr_max_tokens_lowered_total, ctxmgr_usage_ratio, ctxmgr_overhead_seconds and
// ctxmgr_decodes_total{result} (bodies decoded whole or continuing a cached one),
// ctxmgr_cut_through_total{result} (bodies streamed upstream while read, predicted to go as
// sent: committed, aborted, failed and sent again; see Config.CutThroughBytes),
// ctxmgr_provider_context_total{format,feature,decision} (the providers' own context
// management: passthrough, local, learned). Every
// request, pass-through ones included, is logged once with its path, status, model, session
// and whether it was managed (managed=false with its reason).
//
// Known limits: a model counted by the calibrated heuristic (claude-*, gemini-*, ...) learns
// its ratio to the provider's counts anew after a restart, so until it has, a restarted proxy
// may make different rewrite decisions than it would have (OpenAI models are counted exactly
// and continue identically: TestRestart); an Anthropic assistant prefill (a last assistant message) is stored as history
// and the completed reply then branches the session; two instances serving the same session at
// the same instant (not alternately) may each compact, one of the summaries being dropped
// (nothing is lost); a session whose state another instance changed without appending (a
// /compact there) is picked up by this instance at its next append conflict.
package proxy

package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/ctxmgr/ctxmgr/internal/redact"
)

// The providers' own context management (see docs/provider-context-management.md).
//
// The official APIs now compact and edit a conversation on their own servers when a request
// asks them to: OpenAI Responses compaction (an input item {"type":"compaction_trigger"}, POST
// /v1/responses/compact, "context_management": [{"type":"compaction", ...}]) and Anthropic
// context editing and compaction ("context_management": {"edits": [...]}, top-level
// "compaction", the betas that announce them). Other upstreams (local servers, compatible
// hosts, Vertex, Bedrock, relays) refuse these fields with a 400, and the agent that sent them
// fails its turn. For each upstream the proxy decides who answers them:
//
//   - passthrough: forwarded untouched (the upstream implements them);
//   - local: the proxy answers them itself, with its own summaries, archive and read tool,
//     and the upstream never receives them.
//
// NativeAuto (the default) passes them through to the official endpoints (api.openai.com,
// api.anthropic.com) and answers them locally for every other upstream; an upstream that
// refuses one of them all the same (a 400 naming it) is learned as lacking it: the request is
// answered locally and retried once, and later requests to it are answered locally from the
// start. Config.ProviderContext overrides the choice per upstream.

// ProviderContextMode says who answers the providers' own context management for an upstream.
type ProviderContextMode string

// The modes.
const (
	// ProviderContextAuto: pass through to the official endpoints, local elsewhere, and
	// learn from an upstream's refusal.
	ProviderContextAuto ProviderContextMode = "auto"
	// ProviderContextLocal: always answered by the proxy.
	ProviderContextLocal ProviderContextMode = "local"
	// ProviderContextPassthrough: always forwarded untouched.
	ProviderContextPassthrough ProviderContextMode = "passthrough"
)

// ParseProviderContextMode reads a mode name.
func ParseProviderContextMode(s string) (ProviderContextMode, error) {
	switch m := ProviderContextMode(strings.TrimSpace(s)); m {
	case ProviderContextAuto, ProviderContextLocal, ProviderContextPassthrough:
		return m, nil
	}
	return "", fmt.Errorf("proxy: provider context mode %q: want auto, local or passthrough", s)
}

// The features, as labelled in ctxmgr_provider_context_total{feature}.
const (
	// FeatureResponsesCompaction: Responses compaction_trigger, /v1/responses/compact, the
	// compaction items ctxmgr issued, context_management compaction thresholds.
	FeatureResponsesCompaction = "responses_compaction"
	// FeatureAnthropicEdits: Anthropic context_management.edits (clear_tool_uses_20250919,
	// clear_thinking_20251015).
	FeatureAnthropicEdits = "anthropic_context_editing"
	// FeatureAnthropicCompaction: Anthropic compact_20260112 and on-demand compaction.
	FeatureAnthropicCompaction = "anthropic_compaction"
)

// The decisions, as labelled in ctxmgr_provider_context_total{decision}.
const (
	decisionPassthrough = "passthrough"
	decisionLocal       = "local"
	// decisionLearned: the upstream refused the feature; the request was answered locally.
	decisionLearned = "learned"
)

// officialHosts implement the providers' own context management.
var officialHosts = map[string]bool{"api.openai.com": true, "api.anthropic.com": true}

// nativeState is what a Server learned about its upstreams' support, by upstream base URL
// and feature.
type nativeState struct {
	mu      sync.Mutex
	lacking map[string]bool // base + " " + feature
}

func (n *nativeState) lacks(base, feature string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.lacking[base+" "+feature]
}

func (n *nativeState) learn(base, feature string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.lacking == nil {
		n.lacking = map[string]bool{}
	}
	n.lacking[base+" "+feature] = true
}

// providerMode is the configured mode of the upstream at base: the entry of
// Config.ProviderContext whose key is base (or its host), else the "*" entry, else auto.
func (c *Config) providerMode(base string) ProviderContextMode {
	if m, ok := c.ProviderContext[base]; ok {
		return m
	}
	if u, err := url.Parse(base); err == nil {
		if m, ok := c.ProviderContext[u.Host]; ok {
			return m
		}
	}
	if m, ok := c.ProviderContext["*"]; ok {
		return m
	}
	return ProviderContextAuto
}

// nativeLocal reports whether the proxy answers feature itself for the upstream at base.
func (s *Server) nativeLocal(base, feature string) bool {
	switch s.cfg.providerMode(base) {
	case ProviderContextLocal:
		return true
	case ProviderContextPassthrough:
		return false
	}
	if s.native.lacks(base, feature) {
		return true
	}
	u, err := url.Parse(base)
	return err != nil || !officialHosts[u.Hostname()]
}

// countNative counts one request's decision for a feature.
func (s *Server) countNative(f Format, feature, decision string) {
	s.metrics.providerContext.WithLabelValues(string(f), feature, decision).Inc()
}

// nativeFeatures are every (format, feature) pair, pre-registered at 0 in the metric.
var nativeFeatures = [][2]string{
	{string(FormatResponses), FeatureResponsesCompaction},
	{string(FormatAnthropic), FeatureAnthropicEdits},
	{string(FormatAnthropic), FeatureAnthropicCompaction},
}

// nativeRewrite applies nativeRequest to the client's body before it is decoded: the body to
// decode and forward, the client's own when the proxy answers nothing itself. A rewritten body
// is not the client's: a cut-through request started with the client's bytes is aborted (the
// upstream never acts on a body it did not receive whole).
func (x *exchange) nativeRewrite(body []byte) ([]byte, error) {
	if !maybeNative(x.format, x.r, body) {
		return body, nil
	}
	model, _ := peekModel(body)
	base, _, err := x.s.upstreamOf(x.r, x.format, model)
	if err != nil {
		return body, nil // serveBody answers it
	}
	out, act, err := x.s.nativeRequest(x.r.Context(), x.format, x.r, base, body)
	if err != nil || act == nil {
		return body, err
	}
	if c := x.cut; c != nil {
		// handleChat's deferred endCut still releases it.
		x.cut = nil
		if c.abort() {
			x.s.metrics.cutThrough.WithLabelValues("aborted").Inc()
		}
	}
	x.exp.release()
	x.exp = nil
	x.body, x.nat = out, act
	return out, nil
}

// answerCompaction answers a compaction the client asked for in the providers' own terms: the
// whole history of the request's synced conversation is folded into the summary, and the
// client gets the token of that summary in its API's shape. It returns errAnswered once the
// answer is written.
func (s *Server) answerCompaction(ctx context.Context, x *exchange) error {
	tok, summary, ok := s.compactNow(ctx, x)
	if !ok {
		return errAnswered
	}
	x.w.Header().Set("X-Ctxmgr-Local", "1")
	switch x.format {
	case FormatResponses:
		writeResponsesCompaction(x.w, x.nat, x.model, x.stream, tok)
	case FormatAnthropic:
		writeAnthropicCompaction(x.w, x.nat, x.model, x.stream, tok, summary)
	}
	return errAnswered
}

// errRestart: the request is served again from exchange.restart (a compaction the model's
// answer continues, native_anthropic.go).
var errRestart = errors.New("restart")

// compactNow folds the whole history of the request's synced conversation into the summary,
// stores the request's messages, and returns the token and text of the summary. On failure
// it answers the client itself and ok is false. It runs without the conversation's lock (see
// psession): the summary takes an LLM call.
func (s *Server) compactNow(ctx context.Context, x *exchange) (tok, summary string, ok bool) {
	sess := x.sess
	res, err := sess.CompactAll(ctx, x.nat.instruction)
	version := res.SummaryVersion
	if err == nil && version == 0 {
		if sum := sess.Summary(); sum != nil {
			version = sum.Version // nothing new since the last summary: it stands
		}
	}
	if err == nil {
		_, _ = s.declareRead(&x.conversation, x.dec.System, x.dec.Tools, false)
		if sum := sess.Summary(); sum != nil && sum.Version == version {
			summary = sum.Text
		}
	}
	x.startFlush()
	if x.awaitFlush() != nil {
		x.notStored()
		return "", "", false
	}
	if err != nil {
		x.log.Warn("proxy: compaction failed", slog.String("error", err.Error()))
		writeError(x.w, x.format, http.StatusInternalServerError, "api_error", "ctxmgr: compaction failed: "+redact.Text(err.Error()))
		return "", "", false
	}
	if tok, err = s.sealToken(ctx, compactionClaim{Session: x.id, Version: version}); err != nil {
		writeError(x.w, x.format, http.StatusInternalServerError, "api_error", "ctxmgr: "+redact.Text(err.Error()))
		return "", "", false
	}
	return tok, summary, true
}

// anthropicSide returns the Anthropic side of a, nil if there is none.
func (a *nativeAction) anthropicSide() *anthropicNative {
	if a == nil {
		return nil
	}
	return a.anthropic
}

// refusedFeatures returns the features an upstream's 400 names: what it refused of the
// providers' context management (none for any other 400).
func refusedFeatures(f Format, errBody []byte) []string {
	has := func(s string) bool { return bytes.Contains(errBody, []byte(s)) }
	switch f {
	case FormatResponses:
		if has("context_management") || has("compaction") {
			return []string{FeatureResponsesCompaction}
		}
	case FormatAnthropic:
		var out []string
		if has("context_management") || has("context-management-2025-06-27") || has("clear_tool_uses") || has("clear_thinking") {
			out = append(out, FeatureAnthropicEdits)
		}
		if has("context_management") || has("compaction") || has("compact-2026") {
			out = append(out, FeatureAnthropicCompaction)
		}
		return out
	}
	return nil
}

// learnNative answers an upstream's 400 that refuses the providers' context management it
// was forwarded (the upstream's mode is auto): the upstream is learned as lacking the
// features it named, and the request is done again with the proxy answering them. It returns
// the body to send again, or answered when the proxy answered the request itself; neither
// when the 400 is about something else.
func (x *exchange) learnNative(ctx context.Context, body, errBody []byte) (next []byte, answered bool) {
	s := x.s
	if s.cfg.providerMode(x.base) != ProviderContextAuto {
		return nil, false
	}
	features := refusedFeatures(x.format, errBody)
	learnt := false
	for _, f := range features {
		if !s.nativeLocal(x.base, f) {
			s.native.learn(x.base, f)
			learnt = true
		}
	}
	if !learnt {
		return nil, false
	}
	out, act, err := s.nativeRequest(ctx, x.format, x.r, x.base, body)
	if err != nil || act == nil {
		return nil, false
	}
	for _, f := range features {
		s.countNative(x.format, f, decisionLearned)
	}
	x.log.Info("proxy: the upstream lacks the providers' context management; answered by the proxy from now on",
		slog.String("upstream", redact.Text(x.base)), slog.Any("features", features))
	x.nat = act
	an := act.anthropicSide()
	if an != nil {
		an.clientTokens, an.clientToolUses = x.before, countToolUses(out)
		if an.compact != nil && an.clientTokens >= an.compact.trigger {
			act.compact, act.instruction = true, an.compact.instructions
		}
	}
	if act.compact {
		if x.ps == nil || x.dec == nil || !x.ps.holds(x.sess) {
			return nil, false // not managed (or its session reloaded since): no session to compact
		}
		_ = s.answerCompaction(ctx, x)
		return nil, true
	}
	if an != nil && len(an.edits) > 0 && x.mgr != nil {
		out = s.applyEdits(ctx, an, x.id, out, x.mgr.m.Config().Counter, x.mgr.m.Config().OffloadRetention)
	}
	return out, false
}

// readFrom returns the sessions whose summaries the request's compaction tokens expanded.
func (a *nativeAction) readFrom() []string {
	if a == nil {
		return nil
	}
	return a.sessions
}

// rewritesAnswer reports whether the upstream's answer is changed on its way to the client
// (applied edits reported, a compaction block put first).
func (a *nativeAction) rewritesAnswer() bool {
	an := a.anthropicSide()
	return an != nil && (an.applied != nil || an.prepend != nil)
}

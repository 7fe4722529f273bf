package fakeupstream

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// The providers' own context management (Options.ProviderContext).
//
// With ProviderContextNonNative the fake is an upstream that does not implement it, as local
// servers, compatible hosts, Vertex, Bedrock and relays do not, and refuses it as they do:
//   - Responses: a top-level context_management is 400 "Unrecognized request argument
//     supplied: context_management"; an input item of type compaction_trigger, compaction or
//     compaction_summary is 400 "Invalid value: '<type>'. ..." (param input[N].type); POST
//     /v1/responses/compact is 404;
//   - Anthropic: a top-level context_management or compaction is 400 "<field>: Extra inputs are
//     not permitted"; a compaction content block is 400 "messages.N.content.M: Input tag
//     'compaction' found using 'type' does not match any of the expected tags"; an
//     anthropic-beta value of these features is 400 "Unexpected value(s) `<beta>` for the
//     `anthropic-beta` header".
//
// With ProviderContextNative it implements them minimally, as the official APIs do: a
// Responses input ending in compaction_trigger is answered with exactly one compaction item,
// POST /v1/responses/compact with {"object":"response.compaction", ...}, and the compaction
// items it issued are accepted back (others are 400 invalid_encrypted_content); Anthropic
// context_management, compaction and their betas are accepted.
//
// With neither (the default) the fields are accepted and ignored, and the items and blocks go
// to package wire, which keeps what it does not know.
const (
	ProviderContextNative    = "native"
	ProviderContextNonNative = "non-native"
)

// RuleProviderContext: a request carrying the providers' context management to an upstream
// that does not implement it (Options.ProviderContext "non-native").
const RuleProviderContext = "provider_context"

// nativeBetas are the anthropic-beta values of the providers' context management.
var nativeBetas = []string{"context-management-2025-06-27", "compact-2026-01-12", "compact-2026-09-04"}

// nativeItemTypes are the Responses input items of the providers' context management.
var nativeItemTypes = map[string]bool{"compaction_trigger": true, "compaction": true, "compaction_summary": true}

// responsesItemTypes is what a real upstream lists as the item types it knows.
const responsesItemTypes = "'message', 'function_call', 'function_call_output', 'reasoning', 'custom_tool_call', 'custom_tool_call_output', 'item_reference'"

// nonNativeResponses returns the refusal of a non-native upstream for a Responses body.
func nonNativeResponses(body []byte) *violation {
	top, err := topLevel(body)
	if err != nil {
		return nil
	}
	if _, ok := top["context_management"]; ok {
		return openAIViolation(RuleProviderContext, "Unrecognized request argument supplied: context_management", "context_management", "unknown_parameter")
	}
	var items []struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(top["input"], &items) != nil {
		return nil
	}
	for i, it := range items {
		if nativeItemTypes[it.Type] {
			return openAIViolation(RuleProviderContext, fmt.Sprintf("Invalid value: '%s'. Supported values are: %s.", it.Type, responsesItemTypes),
				fmt.Sprintf("input[%d].type", i), "invalid_value")
		}
	}
	return nil
}

// nonNativeAnthropic returns the refusal of a non-native upstream for an Anthropic body.
func nonNativeAnthropic(h http.Header, body []byte) *violation {
	for _, v := range h.Values("Anthropic-Beta") {
		for _, b := range strings.Split(v, ",") {
			b = strings.TrimSpace(b)
			for _, n := range nativeBetas {
				if b == n {
					return anthropicViolation(RuleProviderContext, fmt.Sprintf("Unexpected value(s) `%s` for the `anthropic-beta` header. Please consult our documentation at docs.anthropic.com or try again without the header.", b))
				}
			}
		}
	}
	top, err := topLevel(body)
	if err != nil {
		return nil
	}
	for _, k := range []string{"context_management", "compaction"} {
		if _, ok := top[k]; ok {
			return anthropicViolation(RuleProviderContext, k+": Extra inputs are not permitted")
		}
	}
	var msgs []struct {
		Content json.RawMessage `json:"content"`
	}
	if json.Unmarshal(top["messages"], &msgs) != nil {
		return nil
	}
	for i, m := range msgs {
		var blocks []struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(m.Content, &blocks) != nil {
			continue
		}
		for j, b := range blocks {
			if b.Type == "compaction" {
				return anthropicViolation(RuleProviderContext, fmt.Sprintf("messages.%d.content.%d: Input tag 'compaction' found using 'type' does not match any of the expected tags: 'text', 'image', 'document', 'search_result', 'thinking', 'redacted_thinking', 'tool_use', 'tool_result', 'server_tool_use', 'web_search_tool_result'", i, j))
			}
		}
	}
	return nil
}

// nativeCompaction reports whether a Responses body asks a native upstream to compact now,
// and refuses compaction items the fake did not issue.
func (s *Server) nativeCompaction(body []byte) (bool, *violation) {
	var top struct {
		Input json.RawMessage `json:"input"`
	}
	_ = json.Unmarshal(body, &top)
	var items []struct {
		Type string `json:"type"`
		ID   string `json:"id"`
		Enc  string `json:"encrypted_content"`
	}
	if json.Unmarshal(top.Input, &items) != nil {
		return false, nil
	}
	st := s.respState()
	for _, it := range items {
		if it.Type != "compaction" && it.Type != "compaction_summary" {
			continue
		}
		st.mu.Lock()
		known := st.encrypted[it.Enc]
		st.mu.Unlock()
		if !known {
			return false, openAIViolation(RuleProviderContext, fmt.Sprintf("The encrypted content for item %s could not be verified.", it.ID), "", "invalid_encrypted_content")
		}
	}
	return len(items) > 0 && items[len(items)-1].Type == "compaction_trigger", nil
}

// issueCompaction returns a compaction item of the fake's, remembered as issued.
func (s *Server) issueCompaction() map[string]any {
	enc := "fakecmp_" + s.id("enc")
	st := s.respState()
	st.mu.Lock()
	st.encrypted[enc] = true
	st.mu.Unlock()
	return map[string]any{"type": "compaction", "id": s.id("cmp"), "encrypted_content": enc}
}

// serveResponsesCompact answers POST /v1/responses/compact: 404 unless the fake is native.
func (s *Server) serveResponsesCompact(w http.ResponseWriter, r *http.Request) {
	var refusal *violation
	if s.opts.ProviderContext != ProviderContextNative {
		refusal = &violation{rule: RuleProviderContext, status: 404, msg: "Unknown request URL",
			body: `{"error":{"message":"Unknown request URL: POST /v1/responses/compact.","type":"invalid_request_error","param":null,"code":"unknown_url"}}`}
	}
	body, rec, ok := s.countedResponses(w, r, "compaction", refusal)
	if !ok {
		return
	}
	var top struct {
		Input []json.RawMessage `json:"input"`
	}
	_ = json.Unmarshal(body, &top)
	var output []any
	for _, it := range top.Input {
		var m struct {
			Type string `json:"type"`
			Role string `json:"role"`
		}
		if json.Unmarshal(it, &m) == nil && m.Role == "user" && (m.Type == "" || m.Type == "message") {
			output = append(output, it)
		}
	}
	output = append(output, s.issueCompaction())
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"id": s.id("resp"), "object": "response.compaction", "created_at": time.Now().Unix(),
		"output": output, "usage": map[string]any{"input_tokens": rec.Tokens, "output_tokens": 40, "total_tokens": rec.Tokens + 40}})
}

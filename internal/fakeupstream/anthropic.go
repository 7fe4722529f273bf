package fakeupstream

import (
	"encoding/json"
	"fmt"
	"strings"
)

// aMessage is one entry of an Anthropic messages array, as the fake reads it.
type aMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// aBlock is one content block, as the fake reads it: only the fields its rules look at.
type aBlock struct {
	Type         string          `json:"type"`
	Text         *string         `json:"text"`
	Thinking     *string         `json:"thinking"`
	Signature    *string         `json:"signature"`
	Data         *string         `json:"data"`
	ID           string          `json:"id"`
	ToolUseID    string          `json:"tool_use_id"`
	Content      json.RawMessage `json:"content"`
	CacheControl json.RawMessage `json:"cache_control"`
}

// hasCacheControl reports a block with a non-null cache_control.
func (b *aBlock) hasCacheControl() bool { return !isNull(b.CacheControl) }

// aRef is a block of a turn with where it was in the request.
type aRef struct {
	msg, idx int
	b        aBlock
}

// aTurn is a run of consecutive messages with the same role: the real API merges them into one
// turn before it checks the pairing of tool_use and tool_result.
type aTurn struct {
	role   string
	first  int // index of its first message
	blocks []aRef
}

// anthropicBlocks decodes a content field: a string is one text block; an array, its blocks.
func anthropicBlocks(raw json.RawMessage, field string) ([]aBlock, *violation) {
	switch firstByte(raw) {
	case 0:
		return nil, anthropicViolation(RuleParse, field+": Field required")
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, anthropicViolation(RuleParse, field+": Input should be a valid string")
		}
		return []aBlock{{Type: "text", Text: &s}}, nil
	case '[':
		var raws []json.RawMessage
		if err := json.Unmarshal(raw, &raws); err != nil {
			return nil, anthropicViolation(RuleParse, field+": Input should be a valid list")
		}
		out := make([]aBlock, len(raws))
		for j, r := range raws {
			if firstByte(r) != '{' {
				return nil, anthropicViolation(RuleParse, fmt.Sprintf("%s.%d: Input should be a valid dictionary or object to extract fields from", field, j))
			}
			if err := json.Unmarshal(r, &out[j]); err != nil {
				return nil, anthropicViolation(RuleParse, fmt.Sprintf("%s.%d: %v", field, j, err))
			}
			if out[j].Type == "" {
				return nil, anthropicViolation(RuleParse, fmt.Sprintf("%s.%d.type: Field required", field, j))
			}
		}
		return out, nil
	}
	return nil, anthropicViolation(RuleParse, field+": Input should be a valid list")
}

// checkAnthropic reads an Anthropic messages body and checks it against the real API's rules,
// in the order the API checks them: the schema (JSON, max_tokens, roles, content shapes), then
// cache_control breakpoints, thinking signatures, tool pairing and the thinking-first rule.
func (s *Server) checkAnthropic(body []byte) checked {
	var c checked
	top, err := topLevel(body)
	if err != nil {
		c.v = anthropicViolation(RuleParse, "There was an error parsing the body of your request: "+err.Error())
		return c
	}
	if err := commonFields(top, &c); err != nil {
		c.v = anthropicViolation(RuleParse, err.Error())
		return c
	}
	n, ok, err := intField(top, "max_tokens")
	switch {
	case err != nil:
		c.v = anthropicViolation(RuleParse, "max_tokens: Input should be a valid integer")
		return c
	case !ok:
		c.v = anthropicViolation(RuleMaxTokens, "max_tokens: Field required")
		return c
	case n < 1:
		c.v = anthropicViolation(RuleMaxTokens, "max_tokens: Input should be greater than or equal to 1")
		return c
	}
	c.maxTokens = n
	if raw, ok := top["thinking"]; ok && !isNull(raw) {
		var t struct {
			Type string `json:"type"`
		}
		if err := json.Unmarshal(raw, &t); err != nil {
			c.v = anthropicViolation(RuleParse, "thinking: Input should be a valid dictionary")
			return c
		}
		c.thinking = t.Type
	}

	// cache_control: system blocks, tools and message blocks (tool_result contents included).
	if raw, ok := top["system"]; ok && !isNull(raw) {
		blocks, v := anthropicBlocks(raw, "system")
		if v != nil {
			c.v = v
			return c
		}
		if firstByte(raw) == '[' {
			if v := emptyText(blocks, "system"); v != nil {
				c.v = v
				return c
			}
		}
		for i := range blocks {
			if blocks[i].hasCacheControl() {
				c.breakpoints++
			}
		}
	}
	if raw, ok := top["tools"]; ok && !isNull(raw) {
		var tools []struct {
			CacheControl json.RawMessage `json:"cache_control"`
		}
		if err := json.Unmarshal(raw, &tools); err != nil {
			c.v = anthropicViolation(RuleParse, "tools: Input should be a valid list")
			return c
		}
		for _, t := range tools {
			if !isNull(t.CacheControl) {
				c.breakpoints++
			}
		}
	}
	var msgs []aMessage
	if raw, ok := top["messages"]; !ok || isNull(raw) {
		c.v = anthropicViolation(RuleParse, "messages: Field required")
		return c
	} else if err := json.Unmarshal(raw, &msgs); err != nil {
		c.v = anthropicViolation(RuleParse, "messages: Input should be a valid list")
		return c
	}
	content := make([][]aBlock, len(msgs))
	for i, m := range msgs {
		switch m.Role {
		case "user", "assistant":
		case "system":
			// Mid-conversation system entries (beta mid-conversation-system-...), as Claude Code sends.
		default:
			c.v = anthropicViolation(RuleRole, fmt.Sprintf("messages.%d.role: Input should be 'user', 'assistant' or 'system'", i))
			return c
		}
		blocks, v := anthropicBlocks(m.Content, fmt.Sprintf("messages.%d.content", i))
		if v != nil {
			c.v = v
			return c
		}
		content[i] = blocks
		if len(blocks) == 0 || len(blocks) == 1 && firstByte(m.Content) == '"' && *blocks[0].Text == "" {
			if i != len(msgs)-1 || m.Role != "assistant" {
				c.v = anthropicViolation(RuleEmpty, fmt.Sprintf("messages.%d: all messages must have non-empty content except for the optional final assistant message", i))
				return c
			}
		} else if firstByte(m.Content) == '[' {
			if v := emptyText(blocks, "messages"); v != nil {
				c.v = v
				return c
			}
		}
		for j := range blocks {
			b := &blocks[j]
			if b.hasCacheControl() {
				c.breakpoints++
			}
			if b.Type == "tool_result" && firstByte(b.Content) == '[' {
				inner, v := anthropicBlocks(b.Content, fmt.Sprintf("messages.%d.content.%d.content", i, j))
				if v != nil {
					c.v = v
					return c
				}
				for k := range inner {
					if inner[k].hasCacheControl() {
						c.breakpoints++
					}
				}
			}
		}
	}
	if c.breakpoints > MaxCacheControl {
		c.v = anthropicViolation(RuleCacheControl, fmt.Sprintf("A maximum of %d blocks with cache_control may be provided. Found %d.", MaxCacheControl, c.breakpoints))
		return c
	}

	// Thinking blocks come back exactly as issued.
	for i, m := range msgs {
		if m.Role != "assistant" {
			continue
		}
		for j, b := range content[i] {
			switch b.Type {
			case "thinking":
				if b.Signature == nil || *b.Signature == "" {
					c.v = anthropicViolation(RuleSignature, fmt.Sprintf("messages.%d.content.%d.thinking.signature: Field required", i, j))
					return c
				}
				if b.Thinking == nil || !s.verifyThinking(*b.Thinking, *b.Signature) {
					c.v = anthropicViolation(RuleSignature, fmt.Sprintf("messages.%d.content.%d: Invalid `signature` in `thinking` block", i, j))
					return c
				}
			case "redacted_thinking":
				if b.Data == nil || !s.verifyRedacted(*b.Data) {
					c.v = anthropicViolation(RuleSignature, fmt.Sprintf("messages.%d.content.%d: Invalid `data` in `redacted_thinking` block", i, j))
					return c
				}
			}
		}
	}

	// Turns, merged as the API merges consecutive same-role messages; system entries are
	// transparent.
	var turns []aTurn
	for i, m := range msgs {
		if m.Role == "system" {
			continue
		}
		if len(turns) == 0 || turns[len(turns)-1].role != m.Role {
			turns = append(turns, aTurn{role: m.Role, first: i})
		}
		t := &turns[len(turns)-1]
		for j, b := range content[i] {
			t.blocks = append(t.blocks, aRef{msg: i, idx: j, b: b})
		}
	}
	if v := anthropicPairing(turns); v != nil {
		c.v = v
		return c
	}
	if c.thinking == "enabled" && s.opts.Thinking {
		if v := thinkingFirst(turns); v != nil {
			c.v = v
			return c
		}
	}
	return c
}

// emptyText refuses a text block with empty text, as the API does.
func emptyText(blocks []aBlock, field string) *violation {
	for _, b := range blocks {
		if b.Type == "text" && (b.Text == nil || *b.Text == "") {
			return anthropicViolation(RuleEmpty, field+": text content blocks must be non-empty")
		}
	}
	return nil
}

// anthropicPairing checks that every tool_use is answered by a tool_result at the start of the
// very next user turn, and that every tool_result answers a tool_use of the assistant turn
// right before it.
func anthropicPairing(turns []aTurn) *violation {
	for t := range turns {
		turn := &turns[t]
		switch turn.role {
		case "assistant":
			// A server tool's result block (web_search_tool_result, mcp_tool_result, ...)
			// follows its server_tool_use / mcp_tool_use in the same turn.
			server := map[string]bool{}
			for _, r := range turn.blocks {
				switch {
				case r.b.Type == "server_tool_use" || r.b.Type == "mcp_tool_use":
					server[r.b.ID] = true
				case strings.HasSuffix(r.b.Type, "_tool_result") && r.b.ToolUseID != "" && !server[r.b.ToolUseID]:
					return anthropicViolation(RuleToolPairing, fmt.Sprintf("messages.%d.content.%d: unexpected `tool_use_id` found in `%s` blocks: %s. Each `%s` block must have a corresponding `server_tool_use` block before it.", r.msg, r.idx, r.b.Type, r.b.ToolUseID, r.b.Type))
				}
			}
			if t+1 == len(turns) {
				continue // a final assistant turn is a prefill: nothing to answer yet
			}
			answered := map[string]bool{}
			for _, r := range turns[t+1].blocks {
				if r.b.Type != "tool_result" {
					break // results come first in the next turn
				}
				answered[r.b.ToolUseID] = true
			}
			var missing []string
			at := -1
			for _, r := range turn.blocks {
				if r.b.Type == "tool_use" && !answered[r.b.ID] {
					missing = append(missing, r.b.ID)
					at = r.msg
				}
			}
			if len(missing) > 0 {
				return anthropicViolation(RuleToolPairing, fmt.Sprintf("messages.%d: `tool_use` ids were found without `tool_result` blocks immediately after: %s. Each `tool_use` block must have a corresponding `tool_result` block in the next message.", at, strings.Join(missing, ", ")))
			}
		case "user":
			issued := map[string]bool{}
			if t > 0 {
				for _, r := range turns[t-1].blocks {
					if r.b.Type == "tool_use" {
						issued[r.b.ID] = true
					}
				}
			}
			for _, r := range turn.blocks {
				if r.b.Type == "tool_result" && !issued[r.b.ToolUseID] {
					return anthropicViolation(RuleToolPairing, fmt.Sprintf("messages.%d.content.%d: unexpected `tool_use_id` found in `tool_result` blocks: %s. Each `tool_result` block must have a corresponding `tool_use` block in the previous message.", r.msg, r.idx, r.b.ToolUseID))
				}
			}
		}
	}
	return nil
}

// thinkingFirst checks, with thinking enabled, that a request in the middle of a tool loop (its
// last turn starts with tool results) has its last assistant turn start with a thinking block.
func thinkingFirst(turns []aTurn) *violation {
	n := len(turns)
	if n < 2 || turns[n-1].role != "user" || len(turns[n-1].blocks) == 0 || turns[n-1].blocks[0].b.Type != "tool_result" {
		return nil
	}
	a := &turns[n-2]
	if len(a.blocks) == 0 {
		return nil
	}
	first := a.blocks[0]
	if first.b.Type == "thinking" || first.b.Type == "redacted_thinking" {
		return nil
	}
	return anthropicViolation(RuleThinkingFirst, fmt.Sprintf("messages.%d.content.%d.type: Expected `thinking` or `redacted_thinking`, but found `%s`. When `thinking` is enabled, a final `assistant` message must start with a thinking block (preceeding the lastmost set of `tool_use` and `tool_result` blocks). We recommend you include thinking blocks from previous turns. To avoid this requirement, disable `thinking`. Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking", first.msg, first.idx, first.b.Type))
}

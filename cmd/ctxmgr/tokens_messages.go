package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/ctxmgr/ctxmgr/tokens"
	"github.com/ctxmgr/ctxmgr/wire"
)

// messagesOutput is what `tokens --messages` prints: the breakdown, the model of the body (if
// any), the counter that counted, and whether the count is an estimate (not the model's own
// tokenizer).
type messagesOutput struct {
	tokens.Breakdown
	Model    string `json:"model,omitempty"`
	Counter  string `json:"counter"`
	Estimate bool   `json:"estimate"`
}

// countMessages decodes, checks and counts a request body for `tokens --messages`.
func countMessages(o *tokensOptions, body []byte, format wire.Format) (*messagesOutput, error) {
	top, err := inspectBody(body)
	if err != nil {
		return nil, err
	}
	if format != "" {
		if other, why := top.evidence(); other != "" && other != format {
			article := map[wire.Format]string{wire.OpenAI: "an OpenAI", wire.Anthropic: "an Anthropic"}[other]
			return nil, fmt.Errorf("--format %s: the body is %s body (%s); drop --format to detect it, or give --format %s",
				format, article, why, other)
		}
	}
	out := &messagesOutput{Model: top.Model}
	counter, err := messagesCounter(o, top.Model, out)
	if err != nil {
		return nil, err
	}
	b, err := countRequest(counter, body, format)
	if err != nil {
		return nil, err
	}
	out.Breakdown = b
	return out, nil
}

// messagesCounter picks the counter for --messages: the flags when given, else the body's
// model: exact for OpenAI models, the heuristic (an estimate) for models whose tokenizer is
// not public, o200k_base (an estimate) for unknown ones.
func messagesCounter(o *tokensOptions, bodyModel string, out *messagesOutput) (tokens.Counter, error) {
	model := o.model
	if model == "" && o.encoding == "" && !o.heuristic {
		model = bodyModel
	}
	switch {
	case o.heuristic:
		out.Estimate = true
		return newCounter(o)
	case o.encoding != "":
		c, err := newCounter(o)
		if err != nil {
			return nil, err
		}
		out.Counter = o.encoding
		// Exact for the encoding; an estimate for a body whose model uses another tokenizer.
		if enc, ok := tokens.EncodingForModel(bodyModel); bodyModel != "" && (!ok || enc != o.encoding) {
			out.Estimate = true
		}
		return c, nil
	case model == "":
		out.Counter = tokens.O200kBase
		return tokens.ForEncoding(tokens.O200kBase)
	}
	if enc, ok := tokens.EncodingForModel(model); ok {
		out.Counter = enc
		return tokens.ForEncoding(enc)
	}
	out.Estimate = true
	if isNonOpenAIModel(model) {
		var ho tokens.HeuristicOptions
		if isAnthropicModel(model) {
			ho.Images = tokens.ImagesAnthropic
		}
		out.Counter = "heuristic"
		return tokens.NewHeuristic(ho), nil
	}
	out.Counter = tokens.O200kBase
	return tokens.ForEncoding(tokens.O200kBase)
}

// bodyTop is what inspectBody reads of a request body's top level.
type bodyTop struct {
	Model    string
	array    bool
	system   bool // top-level "system" (Anthropic)
	messages []json.RawMessage
	tools    []json.RawMessage
}

// inspectBody reads the top level of a request body: a bare message array, or an object with
// "messages". A body with no messages at all is an error: there is nothing to count, and
// neither API accepts it. Malformed JSON is left for the decoder, which locates the error.
func inspectBody(body []byte) (*bodyTop, error) {
	t := bytes.TrimSpace(body)
	top := &bodyTop{}
	if len(t) > 0 && t[0] == '[' {
		top.array = true
		if json.Unmarshal(t, &top.messages) == nil && len(top.messages) == 0 {
			return nil, fmt.Errorf("no messages: the array is empty")
		}
		return top, nil
	}
	var obj map[string]json.RawMessage
	if len(t) == 0 || t[0] != '{' || json.Unmarshal(t, &obj) != nil {
		return top, nil
	}
	if m, ok := obj["model"]; ok {
		_ = json.Unmarshal(m, &top.Model)
	}
	if sys, ok := obj["system"]; ok && !bytes.Equal(bytes.TrimSpace(sys), []byte("null")) {
		top.system = true
	}
	_ = json.Unmarshal(obj["tools"], &top.tools)
	raw, ok := obj["messages"]
	if !ok {
		keys := make([]string, 0, len(obj))
		for k := range obj {
			keys = append(keys, fmt.Sprintf("%q", k))
		}
		sort.Strings(keys)
		return nil, fmt.Errorf("no messages: the body has no \"messages\" field (it has %s); want a chat request body or an array of messages",
			orNone(strings.Join(keys, ", ")))
	}
	if json.Unmarshal(raw, &top.messages) == nil && len(top.messages) == 0 && !top.system {
		return nil, fmt.Errorf("no messages: \"messages\" is empty")
	}
	return top, nil
}

func orNone(s string) string {
	if s == "" {
		return "no fields"
	}
	return s
}

// evidence returns the format the body's shape proves, if any, and why: a top-level "system"
// or Anthropic content blocks or tool definitions prove Anthropic; developer, tool or function
// roles, "tool_calls" or OpenAI content parts prove OpenAI.
func (t *bodyTop) evidence() (wire.Format, string) {
	if t.system {
		return wire.Anthropic, `it has a top-level "system"`
	}
	for _, tool := range t.tools {
		if bytes.Contains(tool, []byte(`"input_schema"`)) {
			return wire.Anthropic, `its tools have "input_schema"`
		}
		if bytes.Contains(tool, []byte(`"function"`)) {
			return wire.OpenAI, `its tools are {"type":"function",...}`
		}
	}
	for i, raw := range t.messages {
		var m struct {
			Role      string          `json:"role"`
			Content   json.RawMessage `json:"content"`
			ToolCalls json.RawMessage `json:"tool_calls"`
		}
		if json.Unmarshal(raw, &m) != nil {
			continue
		}
		switch m.Role {
		case "developer", "tool", "function":
			// ("system" proves nothing: Anthropic bodies may carry mid-conversation system
			// entries.)
			return wire.OpenAI, fmt.Sprintf("message %d has role %q", i, m.Role)
		}
		if len(m.ToolCalls) > 0 && !bytes.Equal(m.ToolCalls, []byte("null")) {
			return wire.OpenAI, fmt.Sprintf("message %d has \"tool_calls\"", i)
		}
		var blocks []struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(m.Content, &blocks) != nil {
			continue
		}
		for _, b := range blocks {
			switch b.Type {
			case "tool_use", "tool_result", "thinking", "redacted_thinking", "document":
				return wire.Anthropic, fmt.Sprintf("message %d has a %q block", i, b.Type)
			case "image_url", "input_audio", "file":
				return wire.OpenAI, fmt.Sprintf("message %d has an %q part", i, b.Type)
			}
		}
	}
	return "", ""
}

// countingThreshold: inputs this large get a "counting..." line on a terminal.
const countingThreshold = 4 << 20

// showCounting writes, when w is a terminal and the input is large, a line on w that says
// what is being counted and for how long, redrawn every half second; the returned stop clears
// it. Otherwise it does nothing.
func showCounting(w io.Writer, size int) (stop func()) {
	if size < countingThreshold || !isTerminal(w) {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		start := time.Now()
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			fmt.Fprintf(w, "\r\033[Kctxmgr: counting %.1f MB (about 3 MB a second)... %.0fs", float64(size)/1e6, time.Since(start).Seconds())
			select {
			case <-done:
				fmt.Fprint(w, "\r\033[K")
				return
			case <-t.C:
			}
		}
	}()
	return func() {
		close(done)
		wg.Wait()
	}
}

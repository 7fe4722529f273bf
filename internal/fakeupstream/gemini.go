package fakeupstream

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/ctxmgr/ctxmgr/wire"
)

// The Gemini API (POST /v1beta/models/{model}:generateContent, :streamGenerateContent with
// ?alt=sse or as a JSON array, :countTokens), as strict as the real one:
//   - an API key is required (x-goog-api-key or ?key=): 403 PERMISSION_DENIED without;
//   - contents is required and not empty; roles are "user" and "model" (or absent); every
//     content has parts, and every part exactly one kind of data (text, inlineData, fileData,
//     functionCall, functionResponse, ...);
//   - a function call turn comes right after a user turn or a function response turn; it is
//     answered by the next content, a user turn of exactly as many functionResponse parts,
//     paired by id where the call has one, else by name; a function response turn follows a
//     function call turn;
//   - on Gemini 3 models (model names starting "gemini-3"), the first functionCall part of
//     each model content of the current turn (since the last user text) carries the
//     thoughtSignature the fake issued with it, unaltered: a call sent back without it, or
//     with another, is refused as the real API refuses it;
//   - input over the window: 400 INVALID_ARGUMENT "The input token count (N) exceeds the
//     maximum number of tokens allowed (W)." (Gemini checks the input alone).
//
// The fake issues functionCall parts without ids (as the Gemini Developer API does), the first
// of an answer carrying a signed thoughtSignature. Its usageMetadata.promptTokenCount is its
// exact o200k_base count (a tokenizer the proxy does not assume for Gemini models).

// RuleSignatureGemini: a Gemini 3 functionCall part sent back without the thoughtSignature
// the fake issued with it, or with another.
const RuleSignatureGemini = "thought_signature"

// Gemini401 is the Gemini API's answer to a bad API key.
const Gemini401 = `{"error":{"code":400,"message":"API key not valid. Please pass a valid API key.","status":"INVALID_ARGUMENT","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"API_KEY_INVALID","domain":"googleapis.com","metadata":{"service":"generativelanguage.googleapis.com"}}]}}`

// Gemini429 is the Gemini API's answer when a quota is exhausted.
const Gemini429 = `{"error":{"code":429,"message":"You exceeded your current quota, please check your plan and billing details.","status":"RESOURCE_EXHAUSTED"}}`

// geminiViolation is an error in the Gemini API's shape.
func geminiViolation(rule string, status int, msg string) *violation {
	st := "INVALID_ARGUMENT"
	if status == http.StatusForbidden {
		st = "PERMISSION_DENIED"
	}
	return &violation{rule: rule, status: status, msg: msg,
		body: fmt.Sprintf(`{"error":{"code":%d,"message":%s,"status":%q}}`, status, jsonString(msg), st)}
}

func (s *Server) serveGemini(w http.ResponseWriter, r *http.Request) {
	action := r.PathValue("action")
	i := strings.LastIndexByte(action, ':')
	if i < 0 {
		writeRaw(w, 404, `{"error":{"code":404,"message":"Method not found.","status":"NOT_FOUND"}}`)
		return
	}
	model, method := action[:i], action[i+1:]
	switch method {
	case "generateContent", "streamGenerateContent", "countTokens":
	default:
		writeRaw(w, 404, `{"error":{"code":404,"message":"Method not found.","status":"NOT_FOUND"}}`)
		return
	}
	body, ok := s.readRequest(w, r)
	if !ok {
		return
	}
	rec := Record{Format: string(wire.Gemini), Path: r.URL.Path, Model: model, Stream: method == "streamGenerateContent", Headers: map[string]string{}}
	for _, h := range append(recordedHeaders, "X-Goog-Api-Key", "X-Goog-Api-Client") {
		if v := r.Header.Get(h); v != "" {
			rec.Headers[h] = v
		}
	}
	if s.opts.KeepBodies {
		rec.Body = json.RawMessage(body)
	}
	if r.Header.Get("X-Goog-Api-Key") == "" && r.URL.Query().Get("key") == "" {
		s.refuse(w, &rec, geminiViolation(RuleParse, http.StatusForbidden,
			"Method doesn't allow unregistered callers (callers without established identity). Please use API Key or other form of API consumer identity to call this API."))
		return
	}
	if method == "countTokens" {
		s.geminiCount(w, &rec, body)
		return
	}
	top, v := s.checkGemini(model, body)
	if top != nil {
		rec.Extra = map[string]json.RawMessage{}
		for k, raw := range top {
			if k != "contents" && k != "systemInstruction" && k != "tools" {
				rec.Extra[k] = raw
			}
		}
		var gc struct {
			MaxOutputTokens int `json:"maxOutputTokens"`
		}
		_ = json.Unmarshal(top["generationConfig"], &gc)
		rec.MaxTokens = gc.MaxOutputTokens
	}
	if v != nil && v.rule == RuleParse {
		s.refuse(w, &rec, v)
		return
	}
	switch model {
	case "error-401":
		rec.Status, rec.Reply = 400, "error"
		s.record(&rec)
		writeRaw(w, 400, Gemini401)
		return
	case "error-429":
		rec.Status, rec.Reply = 429, "error"
		s.record(&rec)
		writeRaw(w, 429, Gemini429)
		return
	}
	req, err := wire.DecodeGemini(body)
	if err == nil {
		for _, t := range req.Tools {
			rec.Tools = append(rec.Tools, t.Name)
		}
		rec.Messages = len(req.Messages)
		rec.Tokens = s.counter.Request(req).Total
	}
	if v != nil {
		s.refuse(w, &rec, v)
		return
	}
	if err != nil {
		s.refuse(w, &rec, geminiViolation(RuleParse, 400, "the fake upstream could not decode the request: "+err.Error()))
		return
	}
	if lim := s.geminiLimit(); lim > 0 && rec.Tokens > lim {
		s.refuse(w, &rec, geminiViolation(RuleWindow, 400,
			fmt.Sprintf("The input token count (%d) exceeds the maximum number of tokens allowed (%d).", rec.Tokens, lim)))
		return
	}
	rep := s.decide(req)
	if last := lastSpoken(req.Messages); last != nil && strings.Contains(last.Text(), "slowly") {
		rep.slow = true
	}
	rec.Status, rec.Reply = 200, rep.kind
	s.record(&rec)
	parts := s.geminiParts(rep)
	switch {
	case !rec.Stream:
		w.Header().Set("Content-Type", "application/json; charset=UTF-8")
		_ = json.NewEncoder(w).Encode(s.geminiChunk(model, parts, true, rec.Tokens))
	case r.URL.Query().Get("alt") == "sse":
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		chunks := s.geminiChunks(model, parts, rec.Tokens)
		for _, c := range chunks {
			b, _ := json.Marshal(c)
			_, _ = w.Write([]byte("data: " + string(b) + "\r\n\r\n"))
			flush(w)
			s.pause(rep.slow)
		}
	default:
		w.Header().Set("Content-Type", "application/json; charset=UTF-8")
		w.WriteHeader(200)
		chunks := s.geminiChunks(model, parts, rec.Tokens)
		for i, c := range chunks {
			b, _ := json.Marshal(c)
			sep := ",\r\n"
			if i == 0 {
				sep = "["
			}
			_, _ = w.Write([]byte(sep + string(b)))
			flush(w)
			s.pause(rep.slow)
		}
		_, _ = w.Write([]byte("]"))
	}
}

func (s *Server) pause(slow bool) {
	if s.opts.ChunkDelay > 0 {
		time.Sleep(s.opts.ChunkDelay)
	}
	if slow {
		time.Sleep(100 * time.Millisecond)
	}
}

// geminiLimit is the input limit: the smaller of Window and RejectAbove that is set.
func (s *Server) geminiLimit() int {
	lim := s.opts.Window
	if s.opts.RejectAbove > 0 && (lim == 0 || s.opts.RejectAbove < lim) {
		lim = s.opts.RejectAbove
	}
	return lim
}

// geminiCount answers countTokens: {contents} or {generateContentRequest}, counted exactly.
func (s *Server) geminiCount(w http.ResponseWriter, rec *Record, body []byte) {
	top, err := topLevel(body)
	if err == nil {
		if g, ok := top["generateContentRequest"]; ok {
			body = g
		}
	}
	req, err := wire.DecodeGemini(body)
	if err != nil {
		s.refuse(w, rec, geminiViolation(RuleParse, 400, "Invalid JSON payload received. "+err.Error()))
		return
	}
	rec.Tokens = s.counter.Request(req).Total
	rec.Messages = len(req.Messages)
	rec.Status, rec.Reply = 200, "count"
	s.record(rec)
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	_, _ = fmt.Fprintf(w, `{"totalTokens":%d,"promptTokensDetails":[{"modality":"TEXT","tokenCount":%d}]}`, rec.Tokens, rec.Tokens)
}

// geminiParts renders a reply as model parts: the text, then the calls, the first carrying
// a signed thoughtSignature.
func (s *Server) geminiParts(rep reply) []map[string]any {
	var parts []map[string]any
	if rep.text != "" {
		parts = append(parts, map[string]any{"text": rep.text})
	}
	for i, c := range rep.calls {
		var args any = map[string]any{}
		_ = json.Unmarshal([]byte(c.args), &args)
		p := map[string]any{"functionCall": map[string]any{"name": c.name, "args": args}}
		if i == 0 {
			p["thoughtSignature"] = s.redactedData("call " + c.id + " " + c.name)
		}
		parts = append(parts, p)
	}
	if parts == nil {
		parts = []map[string]any{{"text": ""}}
	}
	return parts
}

func (s *Server) geminiChunk(model string, parts []map[string]any, last bool, prompt int) map[string]any {
	cand := map[string]any{"content": map[string]any{"role": "model", "parts": parts}, "index": 0}
	usage := map[string]any{"promptTokenCount": prompt, "totalTokenCount": prompt}
	if last {
		cand["finishReason"] = "STOP"
		usage = map[string]any{"promptTokenCount": prompt, "candidatesTokenCount": 12, "totalTokenCount": prompt + 12,
			"promptTokensDetails": []any{map[string]any{"modality": "TEXT", "tokenCount": prompt}}}
	}
	return map[string]any{"candidates": []any{cand}, "usageMetadata": usage, "modelVersion": model, "responseId": s.id("resp")}
}

// geminiChunks streams the text in pieces, the calls whole in the last chunk.
func (s *Server) geminiChunks(model string, parts []map[string]any, prompt int) []map[string]any {
	var out []map[string]any
	var rest []map[string]any
	for _, p := range parts {
		if t, ok := p["text"].(string); ok && t != "" {
			for _, piece := range pieces(t, 3) {
				out = append(out, s.geminiChunk(model, []map[string]any{{"text": piece}}, false, prompt))
			}
			continue
		}
		rest = append(rest, p)
	}
	if rest == nil {
		rest = []map[string]any{}
	}
	return append(out, s.geminiChunk(model, rest, true, prompt))
}

// gemContent is a content as the fake reads it.
type gemContent struct {
	Role  *string           `json:"role"`
	Parts []json.RawMessage `json:"parts"`
}

// gemPart is a part as the fake reads it.
type gemPart struct {
	Text             *string         `json:"text"`
	InlineData       json.RawMessage `json:"inlineData"`
	FileData         json.RawMessage `json:"fileData"`
	FunctionCall     *gemCall        `json:"functionCall"`
	FunctionResponse *gemCall        `json:"functionResponse"`
	ExecutableCode   json.RawMessage `json:"executableCode"`
	CodeResult       json.RawMessage `json:"codeExecutionResult"`
	ThoughtSignature *string         `json:"thoughtSignature"`
}

type gemCall struct {
	ID       string          `json:"id"`
	Name     string          `json:"name"`
	Args     json.RawMessage `json:"args"`
	Response json.RawMessage `json:"response"`
}

func (p *gemPart) kinds() int {
	n := 0
	for _, set := range []bool{p.Text != nil, len(p.InlineData) > 0, len(p.FileData) > 0, p.FunctionCall != nil,
		p.FunctionResponse != nil, len(p.ExecutableCode) > 0, len(p.CodeResult) > 0} {
		if set {
			n++
		}
	}
	return n
}

// checkGemini checks a generateContent body by the real API's rules.
func (s *Server) checkGemini(model string, body []byte) (map[string]json.RawMessage, *violation) {
	top, err := topLevel(body)
	if err != nil {
		return nil, geminiViolation(RuleParse, 400, "Invalid JSON payload received. "+err.Error())
	}
	var contents []gemContent
	if raw, ok := top["contents"]; ok {
		if err := json.Unmarshal(raw, &contents); err != nil {
			return top, geminiViolation(RuleParse, 400, "Invalid JSON payload received. Unknown name \"contents\": "+err.Error())
		}
	}
	if len(contents) == 0 {
		return top, geminiViolation(RuleParse, 400, "* GenerateContentRequest.contents: contents is not specified\n")
	}
	type turn struct {
		role  string
		parts []gemPart
	}
	turns := make([]turn, len(contents))
	for i, c := range contents {
		role := "user"
		if c.Role != nil {
			role = *c.Role
		}
		if role != "user" && role != "model" {
			return top, geminiViolation(RuleRole, 400, fmt.Sprintf("Please use a valid role: user, model. (contents[%d].role %q)", i, role))
		}
		if len(c.Parts) == 0 {
			return top, geminiViolation(RuleEmpty, 400, fmt.Sprintf("* GenerateContentRequest.contents[%d].parts: contents.parts must not be empty.\n", i))
		}
		t := turn{role: role}
		for j, raw := range c.Parts {
			var p gemPart
			if err := json.Unmarshal(raw, &p); err != nil {
				return top, geminiViolation(RuleParse, 400, fmt.Sprintf("Invalid JSON payload received. contents[%d].parts[%d]: %v", i, j, err))
			}
			if p.kinds() != 1 && !(p.kinds() == 0 && p.ThoughtSignature != nil) {
				return top, geminiViolation(RuleParse, 400, fmt.Sprintf("* GenerateContentRequest.contents[%d].parts[%d].data: required oneof field 'data' must have one initialized field\n", i, j))
			}
			if p.FunctionCall != nil && role != "model" || p.FunctionResponse != nil && role != "user" {
				return top, geminiViolation(RuleRole, 400, fmt.Sprintf("contents[%d]: function calls come from the model, function responses from the user", i))
			}
			t.parts = append(t.parts, p)
		}
		turns[i] = t
	}
	calls := func(t turn) []*gemCall {
		var out []*gemCall
		for k := range t.parts {
			if t.parts[k].FunctionCall != nil {
				out = append(out, t.parts[k].FunctionCall)
			}
		}
		return out
	}
	responses := func(t turn) []*gemCall {
		var out []*gemCall
		for k := range t.parts {
			if t.parts[k].FunctionResponse != nil {
				out = append(out, t.parts[k].FunctionResponse)
			}
		}
		return out
	}
	for i, t := range turns {
		fc, fr := calls(t), responses(t)
		if len(fc) > 0 && i > 0 && turns[i-1].role != "user" {
			return top, geminiViolation(RuleToolPairing, 400, "Please ensure that function call turn comes immediately after a user turn or after a function response turn.")
		}
		if len(fr) > 0 && (i == 0 || len(calls(turns[i-1])) == 0) {
			return top, geminiViolation(RuleToolPairing, 400, "Please ensure that function response turn comes immediately after a function call turn.")
		}
		if len(fc) > 0 && i+1 < len(turns) {
			next := responses(turns[i+1])
			if len(next) != len(fc) {
				return top, geminiViolation(RuleToolPairing, 400, "Please ensure that the number of function response parts is equal to the number of function call parts of the function call turn.")
			}
			used := make([]bool, len(fc))
			for _, r := range next {
				k := -1
				for j, c := range fc {
					if !used[j] && (r.ID != "" && c.ID == r.ID || c.ID == "" && c.Name == r.Name) {
						k = j
						break
					}
				}
				if k < 0 {
					return top, geminiViolation(RuleToolPairing, 400, fmt.Sprintf("Please ensure that function response %q answers a function call of the function call turn.", r.Name))
				}
				used[k] = true
			}
		}
	}
	if strings.HasPrefix(model, "gemini-3") {
		// The current turn: the contents after the last user text.
		start := 0
		for i, t := range turns {
			if t.role == "user" && len(responses(t)) == 0 {
				start = i + 1
			}
		}
		for i := start; i < len(turns); i++ {
			for j, p := range turns[i].parts {
				if p.FunctionCall == nil {
					continue
				}
				if p.ThoughtSignature == nil || !s.verifyRedacted(*p.ThoughtSignature) {
					return top, geminiViolation(RuleSignatureGemini, 400, fmt.Sprintf("Function call is missing a thought_signature in functionCall parts. This is required for tools to work correctly, and missing thought_signature may lead to degraded model performance. Additional data, function call `default_api:%s` , position %d. Please refer to https://ai.google.dev/gemini-api/docs/thought-signatures for more details.", p.FunctionCall.Name, j+1))
				}
				break // the first call of each step carries it
			}
		}
	}
	return top, nil
}

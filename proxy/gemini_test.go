package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/ctxmgr/ctxmgr/internal/fakeupstream"
	"github.com/ctxmgr/ctxmgr/proxy/sse"
)

// geminiAgent is a Gemini API client as Gemini CLI is one: it keeps its contents, sends them
// whole with its system instruction and function declarations, keeps every part the model
// sent (thoughtSignature included) and answers function calls by name, in order.
type geminiAgent struct {
	t        testing.TB
	url      string
	model    string
	key      string
	contents []json.RawMessage
	out      toolOutput
	turns    int
	calls    []string
	header   http.Header
}

func newGeminiAgent(t testing.TB, url, model string, out toolOutput) *geminiAgent {
	return &geminiAgent{t: t, url: url, model: model, key: "AIza-test-key", out: out, header: http.Header{}}
}

func (a *geminiAgent) body() []byte {
	b, _ := json.Marshal(map[string]any{
		"contents":          a.contents,
		"systemInstruction": map[string]any{"parts": []any{map[string]any{"text": "You are a coding agent. Use the tools."}}},
		"tools": []any{map[string]any{"functionDeclarations": []any{map[string]any{"name": "run_shell", "description": "run a command",
			"parametersJsonSchema": map[string]any{"type": "object", "properties": map[string]any{"cmd": map[string]any{"type": "string"}}}}}}},
		"generationConfig": map[string]any{"temperature": 0, "maxOutputTokens": 1024},
	})
	return b
}

// send posts the contents; mode is "json", "sse" or "array". It returns the model's parts.
func (a *geminiAgent) send(ctx context.Context, mode string) ([]json.RawMessage, http.Header, error) {
	method, q := "generateContent", ""
	switch mode {
	case "sse":
		method, q = "streamGenerateContent", "?alt=sse"
	case "array":
		method = "streamGenerateContent"
	}
	req, _ := http.NewRequestWithContext(ctx, "POST", a.url+"/v1beta/models/"+a.model+":"+method+q, bytes.NewReader(a.body()))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Goog-Api-Key", a.key)
	for k, v := range a.header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		return nil, resp.Header, fmt.Errorf("status %d: %s", resp.StatusCode, data)
	}
	var chunks []json.RawMessage
	switch mode {
	case "json":
		chunks = []json.RawMessage{data}
	case "array":
		if err := json.Unmarshal(data, &chunks); err != nil {
			return nil, nil, fmt.Errorf("not a JSON array: %v: %s", err, data)
		}
	case "sse":
		if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			return nil, nil, fmt.Errorf("content type %q", resp.Header.Get("Content-Type"))
		}
		rd := sse.NewReader(bytes.NewReader(data))
		for {
			ev, err := rd.Next()
			if err != nil {
				break
			}
			if len(bytes.TrimSpace(ev.Data)) > 0 {
				chunks = append(chunks, ev.Data)
			}
		}
	}
	var parts []json.RawMessage
	finished := false
	for _, c := range chunks {
		var v struct {
			Candidates []struct {
				Content struct {
					Parts []json.RawMessage `json:"parts"`
				} `json:"content"`
				FinishReason string `json:"finishReason"`
			} `json:"candidates"`
		}
		if err := json.Unmarshal(c, &v); err != nil {
			return nil, nil, fmt.Errorf("chunk %s: %v", c, err)
		}
		if finished {
			return nil, nil, fmt.Errorf("a chunk after the finish reason: %s", c)
		}
		if len(v.Candidates) > 0 {
			parts = append(parts, v.Candidates[0].Content.Parts...)
			finished = v.Candidates[0].FinishReason != ""
		}
	}
	if !finished {
		return nil, nil, fmt.Errorf("the answer has no finish reason: %s", data)
	}
	return parts, resp.Header, nil
}

func (a *geminiAgent) add(role string, parts []json.RawMessage) {
	b, _ := json.Marshal(map[string]any{"role": role, "parts": parts})
	a.contents = append(a.contents, b)
}

func (a *geminiAgent) turn(ctx context.Context, text, mode string) (string, error) {
	a.add("user", []json.RawMessage{mustMarshal(map[string]string{"text": text})})
	for iter := 0; iter < 6; iter++ {
		parts, _, err := a.send(ctx, mode)
		if err != nil {
			return "", err
		}
		a.add("model", parts)
		var text strings.Builder
		var responses []json.RawMessage
		for _, p := range parts {
			var v struct {
				Text         string `json:"text"`
				FunctionCall *struct {
					ID   string `json:"id"`
					Name string `json:"name"`
				} `json:"functionCall"`
			}
			_ = json.Unmarshal(p, &v)
			if v.FunctionCall == nil {
				text.WriteString(v.Text)
				continue
			}
			a.calls = append(a.calls, v.FunctionCall.Name)
			fr := map[string]any{"name": v.FunctionCall.Name, "response": map[string]any{"output": a.out(a.turns, len(responses))}}
			if v.FunctionCall.ID != "" {
				fr["id"] = v.FunctionCall.ID
			}
			responses = append(responses, mustMarshal(map[string]any{"functionResponse": fr}))
		}
		if len(responses) == 0 {
			a.turns++
			return text.String(), nil
		}
		a.add("user", responses)
	}
	return "", fmt.Errorf("tool loop did not end")
}

func geminiEnv(t *testing.T, fo fakeupstream.Options, cfg Config) *env {
	e := newEnv(t, fo, cfg)
	e.cfg.UpstreamGemini = e.up.URL
	e.start()
	return e
}

// TestGeminiLongConversation: a Gemini conversation far larger than the window, through the
// proxy, as a response, an event stream and a JSON array, on a Gemini 3 model: every upstream
// request fits and pairs its calls and carries the calls' thought signatures (the fake refuses
// otherwise), history was compacted and offloaded, ctxmgr_read is answered without the client
// seeing it, and the calibrator learned from usageMetadata.
func TestGeminiLongConversation(t *testing.T) {
	const window = 8192
	for _, mode := range []string{"json", "sse", "array"} {
		t.Run(mode, func(t *testing.T) {
			e := geminiEnv(t, fakeupstream.Options{Window: window}, Config{Window: window, Tune: smallTune})
			big := bigOutput(2500)
			a := newGeminiAgent(t, e.px.URL, "gemini-3-pro-preview", func(turn, call int) string {
				if turn%6 == 3 {
					return bigOutput(14000)(turn, call)
				}
				return big(turn, call)
			})
			turn := func(ctx context.Context, text string) (string, error) { return a.turn(ctx, text, mode) }
			recs, st, raw := longConversation(t, e, window, "gemini", turn, func() []string { return a.calls })
			for _, r := range recs {
				if r.Headers["X-Goog-Api-Key"] != a.key {
					t.Errorf("request %d: the API key did not reach the upstream", r.Seq)
				}
			}
			if n, _ := histogram(e.srv.metrics.usageRatio.WithLabelValues("heuristic")); n == 0 {
				t.Errorf("usageMetadata was never fed to the calibrator")
			}
			if got := counterValue(e.srv.metrics.unmanaged.WithLabelValues(ReasonDecode)); got != 0 {
				t.Errorf("%v requests not decoded", got)
			}
			t.Logf("history %d tokens in %d messages; %d upstream requests, largest %d tokens; %d evicted, %d masked, %d offloaded",
				raw, st.Total, len(recs), maxTokens(recs), st.Evicted, st.Masked, len(st.Offloads))
		})
	}
}

// TestGeminiFakeStrict: the fake refuses what the real API refuses: a Gemini 3 call sent
// back without its signature, unpaired calls, a missing key, input over its window.
func TestGeminiFakeStrict(t *testing.T) {
	fake := fakeupstream.New(fakeupstream.Options{Window: 2000})
	e := &env{t: t, fake: fake}
	_ = e
	post := func(path, body string, key bool) (int, string) {
		req, _ := http.NewRequest("POST", path, strings.NewReader(body))
		if key {
			req.Header.Set("X-Goog-Api-Key", "k")
		}
		w := &bufRecorder{header: http.Header{}}
		fake.ServeHTTP(w, req)
		return w.status, w.buf.String()
	}
	const call = `{"role":"model","parts":[{"functionCall":{"name":"ls","args":{}}}]}`
	cases := []struct {
		name, model, body string
		key               bool
		status            int
		want              string
	}{
		{"no key", "gemini-2.5-flash", `{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}`, false, 403, "unregistered callers"},
		{"no contents", "gemini-2.5-flash", `{}`, true, 400, "contents is not specified"},
		{"empty parts", "gemini-2.5-flash", `{"contents":[{"role":"user","parts":[]}]}`, true, 400, "must not be empty"},
		{"bad role", "gemini-2.5-flash", `{"contents":[{"role":"assistant","parts":[{"text":"x"}]}]}`, true, 400, "valid role"},
		{"unanswered", "gemini-2.5-flash", `{"contents":[{"role":"user","parts":[{"text":"x"}]},` + call + `,{"role":"user","parts":[{"text":"y"}]}]}`, true, 400, "number of function response parts"},
		{"orphan", "gemini-2.5-flash", `{"contents":[{"role":"user","parts":[{"functionResponse":{"name":"ls","response":{}}}]}]}`, true, 400, "immediately after a function call turn"},
		{"unsigned on gemini 3", "gemini-3-pro-preview", `{"contents":[{"role":"user","parts":[{"text":"x"}]},` + call + `,{"role":"user","parts":[{"functionResponse":{"name":"ls","response":{"output":"a"}}}]}]}`, true, 400, "missing a thought_signature"},
		{"unsigned before gemini 3", "gemini-2.5-flash", `{"contents":[{"role":"user","parts":[{"text":"x"}]},` + call + `,{"role":"user","parts":[{"functionResponse":{"name":"ls","response":{"output":"a"}}}]}]}`, true, 200, "candidates"},
		{"window", "gemini-2.5-flash", `{"contents":[{"role":"user","parts":[{"text":"` + strings.Repeat("word ", 3000) + `"}]}]}`, true, 400, "The input token count ("},
	}
	for _, c := range cases {
		status, body := post("/v1beta/models/"+c.model+":generateContent", c.body, c.key)
		if status != c.status || !strings.Contains(body, c.want) {
			t.Errorf("%s: %d %s", c.name, status, body)
		}
	}
	status, body := post("/v1beta/models/gemini-2.5-flash:countTokens", `{"contents":[{"role":"user","parts":[{"text":"hello world"}]}]}`, true)
	if status != 200 || !strings.Contains(body, `"totalTokens":`) {
		t.Errorf("countTokens: %d %s", status, body)
	}
}

type bufRecorder struct {
	header http.Header
	status int
	buf    bytes.Buffer
}

func (r *bufRecorder) Header() http.Header { return r.header }
func (r *bufRecorder) WriteHeader(s int) {
	if r.status == 0 {
		r.status = s
	}
}
func (r *bufRecorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = 200
	}
	return r.buf.Write(b)
}

// TestGeminiCommands: /context and /compact answered in Gemini's shape (a response, an event
// stream, a JSON array) without calling the upstream.
func TestGeminiCommands(t *testing.T) {
	e := geminiEnv(t, fakeupstream.Options{}, Config{Window: 20000, Tune: smallTune})
	ctx := ctxT(t)
	a := newGeminiAgent(t, e.px.URL, "gemini-2.5-flash", bigOutput(1500))
	a.header.Set(SessionHeader, "cmd-gemini")
	for i := 0; i < 8; i++ {
		if _, err := a.turn(ctx, fmt.Sprintf("turn %d: build it", i), "sse"); err != nil {
			t.Fatal(err)
		}
	}
	for _, mode := range []string{"json", "sse", "array"} {
		n := len(e.fake.Records())
		out, err := a.turn(ctx, "/context", mode)
		if err != nil || !strings.Contains(out, "/context: session cmd-gemini") || !strings.Contains(out, "of window 20000") {
			t.Fatalf("/context (%s): %q %v", mode, out, err)
		}
		out, err = a.turn(ctx, "/compact keep the decisions", mode)
		if err != nil || !strings.Contains(out, "/compact") {
			t.Fatalf("/compact (%s): %q %v", mode, out, err)
		}
		if got := len(e.fake.Records()); got != n {
			t.Fatalf("commands called the upstream (%d requests)", got-n)
		}
		if _, err := a.turn(ctx, "next: build it again", mode); err != nil {
			t.Fatal(err)
		}
	}
	checkRecords(t, e.fake.Records(), 20000)
}

// TestGeminiOverflowRecovery: the upstream's limit is below the configured window; its
// "The input token count (N) exceeds the maximum number of tokens allowed (M)" makes the proxy
// compact and retry, and the client never sees the error.
func TestGeminiOverflowRecovery(t *testing.T) {
	const limit = 9000
	e := geminiEnv(t, fakeupstream.Options{RejectAbove: limit}, Config{Window: 40000, Tune: smallTune})
	ctx := ctxT(t)
	a := newGeminiAgent(t, e.px.URL, "gemini-2.5-pro", bigOutput(2500))
	for i := 0; i < 14; i++ {
		text, err := a.turn(ctx, fmt.Sprintf("turn %d: run the build", i), []string{"json", "sse"}[i%2])
		if err != nil {
			t.Fatalf("turn %d: %v", i, err)
		}
		if !strings.HasPrefix(text, "Done: ") {
			t.Fatalf("turn %d: %q", i, text)
		}
	}
	checkRecoveredCounted(t, e)
}

// TestGeminiCachedContent: a request naming cachedContent keeps history on the provider:
// forwarded byte for byte, counted unmanaged (provider_state).
func TestGeminiCachedContent(t *testing.T) {
	e := geminiEnv(t, fakeupstream.Options{KeepBodies: true}, Config{Window: 20000})
	body := `{"cachedContent":"cachedContents/abc","contents":[{"role":"user","parts":[{"text":"a"}]},{"role":"model","parts":[{"text":"b"}]},{"role":"user","parts":[{"text":"c"}]}]}`
	resp, out := postJSON(t, e.px.URL+"/v1beta/models/gemini-2.5-flash:generateContent?key=k", body)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, out)
	}
	recs := e.fake.Records()
	if len(recs) != 1 || string(recs[0].Body) != body {
		t.Fatalf("not forwarded as sent: %+v", recs)
	}
	if got := counterValue(e.srv.metrics.unmanaged.WithLabelValues(ReasonProviderState)); got != 1 {
		t.Errorf("provider_state count %v", got)
	}
}

// TestGeminiCountTokens: :countTokens of a known history is answered with what the proxy would
// forward (below the client's own history); an unknown one goes to the upstream.
func TestGeminiCountTokens(t *testing.T) {
	const window = 8192
	e := geminiEnv(t, fakeupstream.Options{Window: window}, Config{Window: window, Tune: smallTune})
	ctx := ctxT(t)
	a := newGeminiAgent(t, e.px.URL, "gemini-2.5-flash", bigOutput(2500))
	for i := 0; i < 10; i++ {
		if _, err := a.turn(ctx, fmt.Sprintf("turn %d: run", i), "sse"); err != nil {
			t.Fatal(err)
		}
	}
	n := len(e.fake.Records())
	for _, wrap := range []bool{false, true} {
		var body []byte
		if wrap {
			var inner map[string]json.RawMessage
			_ = json.Unmarshal(a.body(), &inner)
			inner["model"] = mustMarshal("models/gemini-2.5-flash")
			body = mustMarshal(map[string]any{"generateContentRequest": inner})
		} else {
			body = a.body()
		}
		resp, out := postJSON(t, e.px.URL+"/v1beta/models/gemini-2.5-flash:countTokens", string(body), "X-Goog-Api-Key", "k")
		var v struct {
			TotalTokens int `json:"totalTokens"`
		}
		if resp.StatusCode != 200 || json.Unmarshal(out, &v) != nil || v.TotalTokens <= 0 || v.TotalTokens > window || resp.Header.Get(SessionHeader) == "" {
			t.Fatalf("countTokens (wrapped %v): %d %s %v", wrap, resp.StatusCode, out, resp.Header)
		}
	}
	if len(e.fake.Records()) != n {
		t.Fatalf("a known history was counted upstream")
	}
	resp, out := postJSON(t, e.px.URL+"/v1beta/models/gemini-2.5-flash:countTokens", `{"contents":[{"role":"user","parts":[{"text":"unknown"}]}]}`, "X-Goog-Api-Key", "k")
	if resp.StatusCode != 200 || !strings.Contains(string(out), "totalTokens") || len(e.fake.Records()) != n+1 {
		t.Fatalf("unknown history: %d %s", resp.StatusCode, out)
	}
}

// TestGeminiMaxOutputLowered: generationConfig.maxOutputTokens is the reply reserve, lowered
// in the forwarded body when it does not fit beside the input.
func TestGeminiMaxOutputLowered(t *testing.T) {
	e := geminiEnv(t, fakeupstream.Options{KeepBodies: true}, Config{Window: 4000})
	a := newGeminiAgent(t, e.px.URL, "gemini-2.5-flash", bigOutput(100))
	a.add("user", []json.RawMessage{mustMarshal(map[string]string{"text": strings.Repeat("context ", 1500)})})
	a.add("model", []json.RawMessage{mustMarshal(map[string]string{"text": "ok"})})
	a.add("user", []json.RawMessage{mustMarshal(map[string]string{"text": "no tools please"})})
	body := strings.Replace(string(a.body()), `"maxOutputTokens":1024`, `"maxOutputTokens":3900`, 1)
	resp, out := postJSON(t, e.px.URL+"/v1beta/models/gemini-2.5-flash:generateContent", body, "X-Goog-Api-Key", "k")
	if resp.StatusCode != 200 || resp.Header.Get(MaxTokensHeader) == "" {
		t.Fatalf("%d %s %v", resp.StatusCode, out, resp.Header)
	}
	recs := e.fake.Records()
	last := recs[len(recs)-1]
	if last.MaxTokens >= 3900 || last.MaxTokens <= 0 || !strings.Contains(string(last.Body), `"temperature":0`) {
		t.Fatalf("forwarded maxOutputTokens %d: %s", last.MaxTokens, last.Body)
	}
}

// TestGeminiKeyRedacted: the API key in ?key= never reaches the logs, nor the error the
// client gets when the upstream is unreachable.
func TestGeminiKeyRedacted(t *testing.T) {
	var logs bytes.Buffer
	srv, err := New(Config{UpstreamGemini: "http://127.0.0.1:1", Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})), Window: 20000})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	for _, path := range []string{":generateContent", ":streamGenerateContent", ":countTokens", ":embedContent"} {
		req, _ := http.NewRequest("POST", "/v1beta/models/gemini-2.5-flash"+path+"?key=AIzaSECRET&alt=sse",
			strings.NewReader(`{"contents":[{"role":"user","parts":[{"text":"a`+path+`"}]},{"role":"model","parts":[{"text":"b"}]},{"role":"user","parts":[{"text":"c"}]}]}`))
		req.Header.Set("X-Goog-Api-Key", "AIzaHEADERSECRET")
		w := &bufRecorder{header: http.Header{}}
		srv.Handler().ServeHTTP(w, req)
		if w.status != http.StatusBadGateway || strings.Contains(w.buf.String(), "SECRET") || !strings.Contains(w.buf.String(), `"status":"UNAVAILABLE"`) {
			t.Errorf("%s: %d %s", path, w.status, w.buf.String())
		}
	}
	if strings.Contains(logs.String(), "SECRET") || !strings.Contains(logs.String(), "gemini") {
		t.Fatalf("logs:\n%s", logs.String())
	}
}

// geminiChunkEvent is an event of a Gemini stream holding parts and a finish reason.
func geminiChunkEvent(finish string, parts ...string) sse.Event {
	cand := `{"content":{"role":"model","parts":[` + strings.Join(parts, ",") + `]},"index":0`
	if finish != "" {
		cand += `,"finishReason":"` + finish + `"`
	}
	data := []byte(`{"candidates":[` + cand + `}],"usageMetadata":{"promptTokenCount":77}}`)
	return sse.Event{Data: data, Raw: geminiEvent(data)}
}

// TestGeminiFilter: a stream's ctxmgr_read calls are taken out of the chunks; an answer whose
// only calls are reads is held (its finish reason withheld) and its parts, signature included,
// make the assistant message of the follow-up; beside another call the reads are dropped and
// the stream ends as the upstream ends it.
func TestGeminiFilter(t *testing.T) {
	read := `{"functionCall":{"name":"ctxmgr_read","args":{"ref":"x"}},"thoughtSignature":"c2ln"}`
	other := `{"functionCall":{"name":"ls","args":{}}}`
	f := newFilter(FormatGemini, true)
	var out []byte
	for _, ev := range []sse.Event{geminiChunkEvent("", `{"text":"Let me "}`), geminiChunkEvent("STOP", `{"text":"look."}`, read)} {
		out = append(out, f.event(ev)...)
	}
	if bytes.Contains(out, []byte("ctxmgr_read")) || bytes.Contains(out, []byte("finishReason")) || !bytes.Contains(out, []byte("look.")) {
		t.Fatalf("client got:\n%s", out)
	}
	if f.usage().Input != 77 {
		t.Errorf("usage %d", f.usage())
	}
	asst, calls := f.pending()
	if len(calls) != 1 || calls[0].Args != `{"ref":"x"}` || len(asst.ToolCalls) != 1 || string(asst.ToolCalls[0].Extra["thoughtSignature"]) != `"c2ln"` || asst.Text() != "Let me \nlook." {
		t.Fatalf("pending %+v %+v", asst, calls)
	}
	f.next()
	if end := f.event(geminiChunkEvent("STOP", `{"text":"Read back."}`)); !bytes.Contains(end, []byte(`"finishReason":"STOP"`)) {
		t.Fatalf("follow-up end %s", end)
	}
	if _, calls := f.pending(); calls != nil {
		t.Fatalf("a finished stream has reads pending")
	}

	f = newFilter(FormatGemini, true)
	out = f.event(geminiChunkEvent("STOP", read, other))
	if bytes.Contains(out, []byte("ctxmgr_read")) || !bytes.Contains(out, []byte(`"name":"ls"`)) || !bytes.Contains(out, []byte("STOP")) {
		t.Fatalf("mixed: %s", out)
	}
	if _, calls := f.pending(); calls != nil {
		t.Fatalf("mixed answer held")
	}
	// Without the read tool, every event goes through byte for byte.
	f = newFilter(FormatGemini, false)
	ev := geminiChunkEvent("STOP", read)
	if got := f.event(ev); !bytes.Equal(got, ev.Raw) {
		t.Fatalf("changed: %s", got)
	}
}

// TestGeminiStripReads: a non-streamed answer (or a JSON array) loses its ctxmgr_read calls;
// left without calls, it ends (STOP) with a note when nothing else is left.
func TestGeminiStripReads(t *testing.T) {
	body := `{"candidates":[{"content":{"role":"model","parts":[{"functionCall":{"name":"ctxmgr_read","args":{}}}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":5}}`
	got := stripReads(FormatGemini, []byte(body))
	if bytes.Contains(got, []byte("ctxmgr_read")) || !bytes.Contains(got, []byte("could not be read back")) || !bytes.Contains(got, []byte("promptTokenCount")) {
		t.Fatalf("%s", got)
	}
	arr := `[{"candidates":[{"content":{"role":"model","parts":[{"text":"a"}]}}]},{"candidates":[{"content":{"role":"model","parts":[{"functionCall":{"name":"ctxmgr_read","args":{}}},{"functionCall":{"name":"ls","args":{}}}]},"finishReason":"STOP"}]}]`
	got = stripReads(FormatGemini, []byte(arr))
	var v []map[string]any
	if json.Unmarshal(got, &v) != nil || len(v) != 1 || bytes.Contains(got, []byte("ctxmgr_read")) || !bytes.Contains(got, []byte(`"ls"`)) || !bytes.Contains(got, []byte(`"text":"a"`)) {
		t.Fatalf("%s", got)
	}
	m, calls, mixed, ok := findReads(FormatGemini, []byte(arr))
	if !ok || !mixed || len(calls) != 1 || len(m.ToolCalls) != 2 {
		t.Fatalf("findReads: %+v %+v %v %v", m, calls, mixed, ok)
	}
}

func FuzzGeminiFilter(f *testing.F) {
	f.Add([]byte(geminiChunkEvent("STOP", `{"functionCall":{"name":"ctxmgr_read","args":{}}}`).Data))
	f.Add([]byte(`{"candidates":[{"content":{"parts":7},"finishReason":"STOP"}]}`))
	f.Add([]byte(`{"candidates":null,"usageMetadata":{"promptTokenCount":"x"}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		fl := newFilter(FormatGemini, true)
		for _, ev := range []sse.Event{geminiChunkEvent("", `{"text":"a"}`), {Data: data, Raw: geminiEvent(data)}} {
			out := fl.event(ev)
			if len(out) > 0 && !bytes.HasSuffix(out, []byte("\r\n\r\n")) {
				t.Fatalf("partial event %q", out)
			}
		}
		fl.pending()
		fl.next()
		_ = fl.abort("x")
		_ = stripReads(FormatGemini, data)
		findReads(FormatGemini, data)
	})
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestServeRefusesBadSettings: broken settings are refused when serve starts, with the flag
// named and exit code 2, and nothing is created on disk.
func TestServeRefusesBadSettings(t *testing.T) {
	dir := t.TempDir()
	db := "sqlite:" + filepath.Join(dir, "ok.db")
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"not a URL", []string{"--upstream-openai", "not-a-url"}, []string{`--upstream-openai "not-a-url"`, "http:// or https://"}},
		{"ftp URL", []string{"--upstream-openai", "ftp://x"}, []string{`--upstream-openai "ftp://x"`, "http:// or https://"}},
		{"no host", []string{"--upstream-anthropic", "http://"}, []string{"--upstream-anthropic", "no host"}},
		{"gemini no host", []string{"--upstream-gemini", "https://"}, []string{"--upstream-gemini", "no host"}},
		{"zero body", []string{"--upstream-openai", "http://127.0.0.1:1", "--max-body-bytes", "0"}, []string{"--max-body-bytes 0: must be positive"}},
		{"negative window", []string{"--upstream-openai", "http://127.0.0.1:1", "--window", "-1"}, []string{"--window -1: must be positive"}},
		{"output above window", []string{"--upstream-openai", "http://127.0.0.1:1", "--window", "1000", "--max-output", "1000"}, []string{"--max-output 1000: must be smaller than --window 1000"}},
		{"missing store dir", []string{"--upstream-openai", "http://127.0.0.1:1", "--store", "sqlite:" + filepath.Join(dir, "nonexistent-dir", "x.db")},
			[]string{"nonexistent-dir does not exist"}},
		{"missing files parent", []string{"--upstream-openai", "http://127.0.0.1:1", "--store", "files:" + filepath.Join(dir, "a", "b")},
			[]string{"does not exist"}},
		{"summarizer without model", []string{"--upstream-openai", "http://127.0.0.1:1", "--summarizer", "openai"}, []string{"--summarizer-model"}},
		{"summarizer bad url", []string{"--upstream-openai", "http://127.0.0.1:1", "--summarizer-model", "m", "--summarizer-url", "ftp://x"}, []string{"--summarizer-url"}},
		{"summarizer key env unset", []string{"--upstream-openai", "http://127.0.0.1:1", "--summarizer-model", "m", "--summarizer-key-env", "CTXMGR_TEST_UNSET_KEY"},
			[]string{"CTXMGR_TEST_UNSET_KEY", "not set"}},
		{"summarizer no upstream of format", []string{"--upstream-openai", "http://127.0.0.1:1", "--summarizer", "anthropic", "--summarizer-model", "claude-haiku-4-5"},
			[]string{"--summarizer-url"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"serve", "--listen", "127.0.0.1:0", "--store", db}, tt.args...)
			r := runCmd(t, "", args...)
			if r.code != exitUsage {
				t.Fatalf("exit %d, want %d; stderr %q", r.code, exitUsage, r.stderr)
			}
			for _, w := range tt.want {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("stderr %q does not contain %q", r.stderr, w)
				}
			}
			if strings.Contains(r.stderr, "listening") {
				t.Errorf("serve started: %q", r.stderr)
			}
		})
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		t.Errorf("refused settings left %s behind", e.Name())
	}
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader in different goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startServe runs `ctxmgr serve args...` until the test ends and returns its address and its
// stderr (the log).
func startServe(t *testing.T, args ...string) (addr string, log *syncBuffer) {
	t.Helper()
	addrFile := filepath.Join(t.TempDir(), "addr")
	ctx, cancel := context.WithCancel(context.Background())
	log = &syncBuffer{}
	done := make(chan int, 1)
	all := append([]string{"serve", "--listen", "127.0.0.1:0", "--addr-file", addrFile}, args...)
	go func() { done <- runContext(ctx, all, strings.NewReader(""), &bytes.Buffer{}, log) }()
	t.Cleanup(func() {
		cancel()
		select {
		case code := <-done:
			if code != 0 {
				t.Errorf("serve exited %d: %s", code, log.String())
			}
		case <-time.After(10 * time.Second):
			t.Errorf("serve did not stop")
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(addrFile); err == nil && len(b) > 0 {
			return strings.TrimSpace(string(b)), log
		}
		select {
		case code := <-done:
			t.Fatalf("serve exited %d: %s", code, log.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatalf("serve did not start: %s", log.String())
	return "", nil
}

// TestServeStartLog: the start-up log says what the window is instead of "window=0".
func TestServeStartLog(t *testing.T) {
	_, log := startServe(t, "--upstream-openai", "http://127.0.0.1:1", "--store", "sqlite:"+filepath.Join(t.TempDir(), "x.db"))
	got := log.String()
	if strings.Contains(got, "window=0") || !strings.Contains(got, "per model") {
		t.Errorf("start-up log %q: want the window described, not 0", got)
	}
	if !strings.Contains(got, "summarizer=extractive") {
		t.Errorf("start-up log %q does not name the summarizer", got)
	}
}

// fakeLLM is an OpenAI-compatible chat-completions server: as the upstream it answers "ok";
// as the summarizer (a request whose system prompt asks for a summary) it answers a valid
// summary, or fails with status when status is set.
type fakeLLM struct {
	mu        sync.Mutex
	summaries int
	auth      []string
	status    int
	failFrom  int // with status: fail only the summaries from this one on (1-based; 0: all)
}

func (f *fakeLLM) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Model    string `json:"model"`
		Messages []struct {
			Role    string `json:"role"`
			Content any    `json:"content"`
		} `json:"messages"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || r.URL.Path != "/v1/chat/completions" {
		http.Error(w, `{"error":{"message":"bad request"}}`, http.StatusBadRequest)
		return
	}
	text := "ok"
	if len(body.Messages) > 0 && strings.Contains(fmt.Sprint(body.Messages[0].Content), "## Goal") {
		f.mu.Lock()
		f.summaries++
		f.auth = append(f.auth, r.Header.Get("Authorization"))
		status := f.status
		if f.failFrom > 0 && f.summaries < f.failFrom {
			status = 0
		}
		f.mu.Unlock()
		if status != 0 {
			http.Error(w, `{"error":{"message":"invalid api key"}}`, status)
			return
		}
		text = "## Goal\nFix the parser.\n## Constraints & Preferences\nNone.\n## Progress\nRead main.go.\n" +
			"## Key Decisions\nKeep the API.\n## Next Steps\nRun the tests.\n## Critical Context\nmain.go line 12."
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"id": "c1", "object": "chat.completion", "model": body.Model,
		"choices": []any{map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": text}, "finish_reason": "stop"}},
		"usage":   map[string]any{"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}})
}

// chatOnce sends an OpenAI chat request with the conversation msgs plus the user message last
// and returns the answer's text.
func chatOnce(t *testing.T, addr, session string, msgs []map[string]string, last string) string {
	t.Helper()
	all := append(append([]map[string]string{}, msgs...), map[string]string{"role": "user", "content": last})
	b, _ := json.Marshal(map[string]any{"model": "gpt-4o", "messages": all})
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/chat/completions", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Ctxmgr-Session", session)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
	}
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || json.Unmarshal(raw, &out) != nil || len(out.Choices) == 0 {
		t.Fatalf("%s: status %d, body %s", last, resp.StatusCode, raw)
	}
	return out.Choices[0].Message.Content
}

// TestServeLLMSummarizer: serve with --summarizer-model summarizes /compact with the LLM at
// --summarizer-url, sending the key from --summarizer-key-env, and /context names it; when the
// LLM refuses, the extractive summary stands in and /context says which wrote it.
func TestServeLLMSummarizer(t *testing.T) {
	for _, tc := range []struct {
		name      string
		status    int
		writtenBy string
	}{
		{"llm answers", 0, "written by llm:tiny-summarizer"},
		{"llm fails, extractive stands in", http.StatusUnauthorized, "written by extractive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			upstream := httptest.NewServer(&fakeLLM{})
			defer upstream.Close()
			sum := &fakeLLM{status: tc.status}
			llm := httptest.NewServer(sum)
			defer llm.Close()
			t.Setenv("CTXMGR_TEST_SUM_KEY", "sk-test-123")
			addr, log := startServe(t, "--upstream-openai", upstream.URL, "--store", "sqlite:"+filepath.Join(t.TempDir(), "s.db"),
				"--summarizer-model", "tiny-summarizer", "--summarizer-url", llm.URL+"/v1", "--summarizer-key-env", "CTXMGR_TEST_SUM_KEY",
				"--summarizer-timeout", "5s", "--window", "8192", "--max-output", "1024")
			var msgs []map[string]string
			for i := range 6 {
				q := fmt.Sprintf("step %d: read file%d.go and tell me what parse() does there. ", i, i) + strings.Repeat(fmt.Sprintf("line %d of the listing; ", i), 120)
				a := chatOnce(t, addr, "s1", msgs, q)
				msgs = append(msgs, map[string]string{"role": "user", "content": q}, map[string]string{"role": "assistant", "content": a})
			}
			compact := chatOnce(t, addr, "s1", msgs, "/compact")
			if !strings.Contains(compact, "compacted") {
				t.Fatalf("/compact answered %q", compact)
			}
			report := chatOnce(t, addr, "s1", msgs, "/context")
			t.Logf("/context:\n%s", report)
			for _, w := range []string{tc.writtenBy, "Summarizer: LLM tiny-summarizer (openai) at " + llm.URL + "/v1", "key from $CTXMGR_TEST_SUM_KEY", "reserved for the reply"} {
				if !strings.Contains(report, w) {
					t.Errorf("/context %q does not contain %q", report, w)
				}
			}
			sum.mu.Lock()
			defer sum.mu.Unlock()
			if sum.summaries == 0 {
				t.Fatalf("the summarizer was never called; log %s", log.String())
			}
			for _, a := range sum.auth {
				if a != "Bearer sk-test-123" {
					t.Errorf("summarizer got Authorization %q", a)
				}
			}
			if strings.Contains(log.String(), "sk-test-123") {
				t.Errorf("the API key appears in the log")
			}
		})
	}
}

// TestSessionsShowMatchesContext: for a session made by serve, `sessions show` reads the
// configuration serve recorded and prints the regions, window and use /context prints.
func TestSessionsShowMatchesContext(t *testing.T) {
	upstream := httptest.NewServer(&fakeLLM{})
	defer upstream.Close()
	db := "sqlite:" + filepath.Join(t.TempDir(), "s.db")
	addr, _ := startServe(t, "--upstream-openai", upstream.URL, "--store", db)
	msgs := []map[string]string{{"role": "system", "content": "You are a careful coding agent. Answer briefly."}}
	a := chatOnce(t, addr, "same", msgs, "What does parse() do in main.go?")
	msgs = append(msgs, map[string]string{"role": "user", "content": "What does parse() do in main.go?"}, map[string]string{"role": "assistant", "content": a})
	report := chatOnce(t, addr, "same", msgs, "/context")
	var sys, tools, summ, hist, input, window int
	i := strings.Index(report, "Tokens: ")
	if i < 0 {
		t.Fatalf("/context: %q", report)
	}
	if _, err := fmt.Sscanf(report[i:], "Tokens: system %d, tools %d, summary %d, history %d; input %d of window %d (",
		&sys, &tools, &summ, &hist, &input, &window); err != nil {
		t.Fatalf("/context %q: %v", report, err)
	}
	if !strings.Contains(report, "(under 0.1% used), 32000 more reserved for the reply") {
		t.Errorf("/context %q: want a tiny share of the window shown as under 0.1%%, the reply reserve apart", report)
	}
	if window != 128000 || sys == 0 {
		t.Errorf("/context: window %d, system %d; want gpt-4o's 128000 and a counted system prompt", window, sys)
	}
	r := runCmd(t, "", "sessions", "show", "same", "--store", db)
	if r.code != 0 {
		t.Fatalf("sessions show: %+v", r)
	}
	var got showOutput
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatal(err)
	}
	if got.Regions.System != sys || got.Regions.Tools != tools || got.Window != window || got.ConfigFrom != "snapshot" || got.Counter != "o200k_base" {
		t.Errorf("sessions show: system %d tools %d window %d from %s counter %s; /context: system %d tools %d window %d\n%s\n%s",
			got.Regions.System, got.Regions.Tools, got.Window, got.ConfigFrom, got.Counter, sys, tools, window, r.stdout, report)
	}
	if got.Input != input || got.Regions.History != hist || got.Regions.Summary != summ {
		t.Errorf("sessions show input %d, history %d, summary %d; /context: %d, %d, %d", got.Input, got.Regions.History, got.Regions.Summary, input, hist, summ)
	}
	if want := float64(got.Input) * 100 / float64(got.Window); got.UsePercent != want {
		t.Errorf("use_percent %v, want input/window %v (the reply reserve is not used)", got.UsePercent, want)
	}
}

// TestServeSummarizerFromConfig: the config file's "summarizer" object configures the LLM
// summarizer as the flags do; "key_env": "" sends no key; a flag overrides the file.
func TestServeSummarizerFromConfig(t *testing.T) {
	dir := t.TempDir()
	cfg := writeFile(t, dir, "ctxmgr.json", `{"upstream_anthropic": "http://127.0.0.1:1", "store": "sqlite:`+filepath.Join(dir, "s.db")+`",
		"summarizer": {"model": "claude-haiku-4-5", "key_env": "", "timeout": "20s"}}`)
	_, log := startServe(t, "--config", cfg)
	want := `summarizer="LLM claude-haiku-4-5 (anthropic) at http://127.0.0.1:1, no API key, timeout 20s per attempt`
	if !strings.Contains(log.String(), want) {
		t.Errorf("log %q does not contain %q", log.String(), want)
	}
	_, log = startServe(t, "--config", cfg, "--summarizer-timeout", "5s", "--store", "sqlite:"+filepath.Join(dir, "t.db"))
	if !strings.Contains(log.String(), "timeout 5s per attempt") {
		t.Errorf("the flag did not override the file: %q", log.String())
	}
	bad := writeFile(t, dir, "bad.json", `{"upstream_openai": "http://127.0.0.1:1", "summarizer": {"url": "http://127.0.0.1:2"}}`)
	if r := runCmd(t, "", "serve", "--config", bad, "--store", "sqlite:"+filepath.Join(dir, "u.db")); r.code != exitUsage || !strings.Contains(r.stderr, "summarizer: needs a model") {
		t.Errorf("a summarizer without a model: exit %d, stderr %q", r.code, r.stderr)
	}
}

// TestServeGeminiUpstream: a Gemini upstream alone, from the configuration file, serves the
// Gemini API; the key in ?key= reaches the upstream and never the log.
func TestServeGeminiUpstream(t *testing.T) {
	var got []string
	var mu sync.Mutex
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.URL.Path+"?"+r.URL.RawQuery)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"candidates":[{"content":{"role":"model","parts":[{"text":"ok"}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":9}}`)
	}))
	defer up.Close()
	dir := t.TempDir()
	cfg := writeFile(t, dir, "ctxmgr.json", `{"upstream_gemini": "`+up.URL+`", "store": "sqlite:`+filepath.Join(dir, "s.db")+`"}`)
	addr, log := startServe(t, "--config", cfg)
	body := `{"contents":[{"role":"user","parts":[{"text":"a"}]},{"role":"model","parts":[{"text":"b"}]},{"role":"user","parts":[{"text":"c"}]}]}`
	resp, err := http.Post("http://"+addr+"/v1beta/models/gemini-2.5-flash:generateContent?key=AIzaSECRET", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(out), `"ok"`) {
		t.Fatalf("%d %s", resp.StatusCode, out)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || got[0] != "/v1beta/models/gemini-2.5-flash:generateContent?key=AIzaSECRET" {
		t.Fatalf("upstream got %v", got)
	}
	if l := log.String(); strings.Contains(l, "SECRET") || !strings.Contains(l, "gemini") {
		t.Fatalf("log: %s", l)
	}
}

package replay

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/internal/sample"
	"github.com/ctxmgr/ctxmgr/turns"
)

// loadSample loads the embedded sample of real runs (package internal/sample); paths are
// paths under its trajectories directory ("mini-swe-agent/django__django-9296.traj.json"),
// all of it when none is given.
func loadSample(tb testing.TB, paths ...string) ([]Trajectory, []Skipped) {
	tb.Helper()
	full := []string{sample.Dir}
	if len(paths) > 0 {
		full = full[:0]
		for _, p := range paths {
			full = append(full, path.Join(sample.Dir, p))
		}
	}
	var out []Trajectory
	skipped, err := LoadEachFS(sample.FS(), full, "", func(t Trajectory) error {
		out = append(out, t)
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	return out, skipped
}

// The embedded sample loads whole: every run converts to a valid history, with its system
// prompt, a user message first and LLM calls; nothing in it is skipped.
func TestLoadSample(t *testing.T) {
	trajs, skipped := loadSample(t)
	sets := map[string]int{}
	for i := range trajs {
		tr := &trajs[i]
		sets[tr.Set]++
		// A run may end with the last call's answer, its tool calls never run (the OpenHands
		// logs: the last call's history with its answer appended).
		if err := turns.Validate(tr.Messages, turns.ValidateOptions{AllowPendingTail: true}); err != nil {
			t.Errorf("%s: converted history is invalid: %v", tr.Name, err)
		}
		if err := chat.Validate(append(append([]chat.Message{}, tr.System...), tr.Messages...)); err != nil {
			t.Errorf("%s: %v", tr.Name, err)
		}
		if len(tr.System) != 1 || tr.Messages[0].Role != chat.RoleUser {
			t.Errorf("%s: want one system message and a user message first, got %d system, first %q", tr.Name, len(tr.System), tr.Messages[0].Role)
		}
		if tr.Calls() == 0 {
			t.Errorf("%s: no assistant messages", tr.Name)
		}
	}
	mswe, err := fs.Glob(sample.FS(), path.Join(sample.Dir, "mini-swe-agent", "*.traj.json"))
	if err != nil {
		t.Fatal(err)
	}
	if sets["mini-swe-agent"] != len(mswe) || len(mswe) != 12 {
		t.Errorf("mini-swe-agent: loaded %d runs of %d files (want 12)", sets["mini-swe-agent"], len(mswe))
	}
	if sets["tau-bench"] != 30 {
		t.Errorf("tau-bench: loaded %d runs, want 30", sets["tau-bench"])
	}
	if len(trajs) != sample.Runs || len(sets) != len(sample.Sets()) {
		t.Errorf("%d runs in %d sets, the sample says %d runs in %v", len(trajs), len(sets), sample.Runs, sample.Sets())
	}
	for _, set := range sample.Sets() {
		if sets[set] == 0 {
			t.Errorf("set %s: no runs", set)
		}
	}
	if len(skipped) != 0 {
		t.Errorf("skipped = %+v, want nothing", skipped)
	}
	byName := map[string]*Trajectory{}
	for i := range trajs {
		byName[trajs[i].Name] = &trajs[i]
	}
	if tr := byName["tau-bench/gpt-4o-airline.json#0"]; tr == nil || tr.Calls() == 0 {
		t.Errorf("tau-bench run #0 missing or empty")
	} else if len(tr.Tools) == 0 || string(tr.Tools[0].Parameters) != `{"type":"object"}` {
		// The file records no tool definitions: the tools the run calls, at their smallest.
		t.Errorf("tau-bench run #0: tools %+v, want the ones it calls, inferred", tr.Tools)
	}

	// One mini-swe-agent run in detail.
	tr := byName["mini-swe-agent/django__django-11149.traj.json"]
	if tr == nil {
		t.Fatal("django__django-11149 not loaded")
	}
	if len(tr.Tools) != 1 || tr.Tools[0].Name != "bash" {
		t.Fatalf("tools = %+v, want the synthetic bash tool", tr.Tools)
	}
	a, res := tr.Messages[1], tr.Messages[2]
	if a.Role != chat.RoleAssistant || len(a.ToolCalls) != 1 || a.ToolCalls[0].Name != "bash" ||
		!strings.HasPrefix(a.ToolCalls[0].ID, "mswea_") || !strings.HasSuffix(a.ToolCalls[0].ID, "_2") {
		t.Fatalf("message 1 = %+v, want an assistant message with one bash call", a)
	}
	if a.ToolCalls[0].Arguments != `{"command":"ls -la"}` {
		t.Errorf("arguments = %s", a.ToolCalls[0].Arguments)
	}
	if !strings.Contains(a.Text(), "```bash\nls -la\n```") {
		t.Errorf("assistant text not kept: %q", a.Text())
	}
	if res.Role != chat.RoleTool || res.ToolCallID != a.ToolCalls[0].ID || !strings.HasPrefix(res.Text(), "<returncode>0</returncode>\n<output>") {
		t.Errorf("message 2 = %+v, want the tool result verbatim", res)
	}
	if len(tr.Recorded) == 0 {
		t.Errorf("no recorded usage")
	}
	if u, ok := tr.Recorded[1]; !ok || u.InputTokens == 0 {
		t.Errorf("recorded usage of message 1 = %+v, %v", u, ok)
	}
	for i := range tr.Messages {
		if tr.Messages[i].Extra["extra"] != nil {
			t.Fatalf("message %d keeps the raw API response", i)
		}
	}
	// The last message is the submitted diff, the result of the submit command.
	last := tr.Messages[len(tr.Messages)-1]
	if last.Role != chat.RoleTool || !strings.HasPrefix(last.Text(), "diff --git") {
		t.Errorf("last message = %q %q, want the submission as a tool result", last.Role, last.Text()[:min(40, len(last.Text()))])
	}
}

// LoadEachFS reads an fs.FS as LoadEach reads the same files on disk: the same runs, names and
// sets, in the same order; only Path differs (a path of the FS, not of the disk).
func TestLoadEachFSMatchesDisk(t *testing.T) {
	dir := t.TempDir()
	if err := os.CopyFS(dir, sample.FS()); err != nil {
		t.Fatal(err)
	}
	fromDisk, err := load([]string{filepath.Join(dir, sample.Dir)}, "")
	if err != nil {
		t.Fatal(err)
	}
	fromFS, _ := loadSample(t)
	if len(fromDisk) != len(fromFS) || len(fromFS) != sample.Runs {
		t.Fatalf("%d runs from disk, %d from the FS, want %d", len(fromDisk), len(fromFS), sample.Runs)
	}
	for i := range fromFS {
		d, f := fromDisk[i], fromFS[i]
		if want := path.Join(sample.Dir, f.Name); f.Path != strings.SplitN(want, "#", 2)[0] {
			t.Errorf("run %d: path %q, want %q", i, f.Path, want)
		}
		d.Path, f.Path = "", ""
		if !reflect.DeepEqual(d, f) {
			t.Errorf("run %d (%s on disk, %s in the FS) differs", i, d.Name, f.Name)
		}
	}
	// One file of the FS, and an error naming a path the FS does not have.
	one, _ := loadSample(t, "tau-bench/gpt-4o-airline.json")
	if len(one) != 30 || one[0].Name != "tau-bench/gpt-4o-airline.json#0" {
		t.Errorf("tau-bench file: %d runs, first %q", len(one), one[0].Name)
	}
	var le *LoadError
	if _, err := LoadEachFS(sample.FS(), []string{"nowhere"}, "", func(Trajectory) error { return nil }); !errors.As(err, &le) || le.Path != "nowhere" {
		t.Errorf("missing path: %v", err)
	}
}

func compact(s string) string {
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(s)); err != nil {
		panic(err)
	}
	return b.String()
}

func write(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

const (
	openaiMsgs = `[
 {"role":"system","content":"You are a bot."},
 {"role":"user","content":"Read src/main.go"},
 {"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"read","arguments":"{\"path\":\"src/main.go\"}"}}]},
 {"role":"tool","tool_call_id":"c1","content":"package main"},
 {"role":"assistant","content":"It is package main."}
]`
	openaiBody    = `{"model":"gpt-4o","tools":[{"type":"function","function":{"name":"read","description":"read a file","parameters":{"type":"object"}}}],"messages":` + openaiMsgs + `}`
	anthropicBody = `{"model":"claude","system":"You are a bot.","max_tokens":100,"messages":[
 {"role":"user","content":"Read src/main.go"},
 {"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"read","input":{"path":"src/main.go"}}]},
 {"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"package main"}]},
 {"role":"assistant","content":"It is package main."}]}`
	tauRecords = `[{"task_id":1,"reward":1.0,"info":{},"trial":0,"traj":` + openaiMsgs + `},
 {"task_id":2,"reward":0.0,"info":{},"trial":0,"traj":[{"role":"system","content":"s"},{"role":"user","content":"hi"},{"role":"assistant","content":"hello"}]}]`
	msweTraj = `{"trajectory_format":"mini-swe-agent-1","instance_id":"x","info":{},"messages":[
 {"role":"system","content":"Use exactly one bash block."},
 {"role":"user","content":"<pr_description>fix it</pr_description>"},
 {"role":"assistant","content":"THOUGHT: look\n\n` + "```bash\\nls -la && cat a<b.txt\\n```" + `","extra":{"response":{"usage":{"prompt_tokens":120,"completion_tokens":10,"prompt_tokens_details":{"cached_tokens":100}}}}},
 {"role":"user","content":"<returncode>2</returncode>\n<output>\nls: cannot access\n</output>"},
 {"role":"assistant","content":"Two blocks: ` + "```bash\\nls\\n```" + ` and ` + "```bash\\npwd\\n```" + `"},
 {"role":"user","content":"Please always provide EXACTLY ONE action in triple backticks."},
 {"role":"assistant","content":"No block at all."},
 {"role":"user","content":"Please always provide EXACTLY ONE action in triple backticks."},
 {"role":"assistant","content":"` + "```bash\\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git diff\\n```" + `"},
 {"role":"user","content":"diff --git a/x b/x"}]}`
)

func TestDetectFormats(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name, file, content, format string
		runs                        int
		names                       []string
		check                       func(t *testing.T, ts []Trajectory)
	}{
		{name: "bare OpenAI array", file: "d/a.json", content: openaiMsgs, runs: 1, names: []string{"d/a.json"},
			check: func(t *testing.T, ts []Trajectory) {
				if len(ts[0].System) != 1 || len(ts[0].Messages) != 4 || len(ts[0].Tools) != 1 { // inferred from its one call
					t.Errorf("got %d system, %d messages, %d tools", len(ts[0].System), len(ts[0].Messages), len(ts[0].Tools))
				}
			}},
		{name: "OpenAI body", file: "d/body.json", content: openaiBody, runs: 1,
			check: func(t *testing.T, ts []Trajectory) {
				if len(ts[0].Tools) != 1 || ts[0].Tools[0].Name != "read" || len(ts[0].Messages) != 4 {
					t.Errorf("tools %+v, %d messages", ts[0].Tools, len(ts[0].Messages))
				}
			}},
		{name: "trajectory object with tools", file: "d/traj.json", content: `{"id":"run-7","score":1,"tools":[{"type":"function","function":{"name":"read"}}],"messages":` + openaiMsgs + `}`, runs: 1},
		{name: "Anthropic body", file: "d/anth.json", content: anthropicBody, runs: 1,
			check: func(t *testing.T, ts []Trajectory) {
				m := ts[0].Messages
				if len(ts[0].System) != 1 || len(m) != 4 || m[1].ToolCalls[0].ID != "t1" || m[2].Role != chat.RoleTool {
					t.Errorf("system %d, messages %+v", len(ts[0].System), m)
				}
			}},
		{name: "JSONL", file: "d/runs.jsonl", content: compact(openaiBody) + "\n\n" + compact(anthropicBody) + "\n", runs: 2, names: []string{"d/runs.jsonl#1", "d/runs.jsonl#3"}},
		{name: "JSON lines in a .json file", file: "d/lines.json", content: openaiBody + "\n" + openaiBody + "\n", runs: 2},
		{name: "single-line JSONL", file: "d/one.jsonl", content: openaiBody, runs: 1, names: []string{"d/one.jsonl#1"}},
		{name: "array of bodies", file: "d/bodies.json", content: "[" + openaiBody + "," + anthropicBody + "]", runs: 2, names: []string{"d/bodies.json#0", "d/bodies.json#1"}},
		{name: "tau-bench", file: "tau/res.json", content: tauRecords, runs: 2, names: []string{"tau/res.json#0", "tau/res.json#1"},
			check: func(t *testing.T, ts []Trajectory) {
				if ts[0].Set != "tau" || len(ts[0].Messages) != 4 || len(ts[1].Messages) != 2 {
					t.Errorf("set %q, %d and %d messages", ts[0].Set, len(ts[0].Messages), len(ts[1].Messages))
				}
			}},
		{name: "tau-bench forced", file: "tau/res2.json", content: tauRecords, format: FormatTauBench, runs: 2},
		{name: "mini-swe-agent", file: "m/x.traj.json", content: msweTraj, runs: 1,
			check: func(t *testing.T, ts []Trajectory) {
				m := ts[0].Messages
				if len(m) != 9 {
					t.Fatalf("%d messages, want 9", len(m))
				}
				if len(m[1].ToolCalls) != 1 || m[1].ToolCalls[0].Arguments != `{"command":"ls -la && cat a<b.txt"}` {
					t.Errorf("one block: %+v", m[1].ToolCalls)
				}
				if m[2].Role != chat.RoleTool || !m[2].IsError || m[2].Text() != "<returncode>2</returncode>\n<output>\nls: cannot access\n</output>" {
					t.Errorf("observation: %+v", m[2])
				}
				if len(m[3].ToolCalls) != 0 || m[4].Role != chat.RoleUser || len(m[5].ToolCalls) != 0 || m[6].Role != chat.RoleUser {
					t.Errorf("no or several blocks must make no call: %+v %+v", m[3], m[5])
				}
				if len(m[7].ToolCalls) != 1 || m[8].Role != chat.RoleTool || m[8].IsError {
					t.Errorf("submission: %+v %+v", m[7], m[8])
				}
				if u := ts[0].Recorded[1]; u != (Usage{InputTokens: 120, CachedTokens: 100, OutputTokens: 10}) {
					t.Errorf("recorded = %+v", ts[0].Recorded)
				}
				if err := turns.Validate(m, turns.ValidateOptions{}); err != nil {
					t.Error(err)
				}
			}},
		{name: "mini-swe-agent forced", file: "m/y.traj.json", content: msweTraj, format: FormatMiniSWEAgent, runs: 1},
		{name: "OpenAI forced on a body", file: "d/f.json", content: openaiBody, format: FormatOpenAI, runs: 1},
		{name: "JSONL forced", file: "d/f2.json", content: openaiBody, format: FormatJSONL, runs: 1, names: []string{"d/f2.json#1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := write(t, dir, tc.file, tc.content)
			ts, err := load([]string{p}, tc.format)
			if err != nil {
				t.Fatal(err)
			}
			if len(ts) != tc.runs {
				t.Fatalf("%d runs, want %d", len(ts), tc.runs)
			}
			for i, n := range tc.names {
				if ts[i].Name != n {
					t.Errorf("name %d = %q, want %q", i, ts[i].Name, n)
				}
			}
			for i := range ts {
				if ts[i].Path != p {
					t.Errorf("path = %q", ts[i].Path)
				}
			}
			if tc.check != nil {
				tc.check(t, ts)
			}
		})
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name, file, content, format string
		is                          error
		want                        []string // substrings of the message
	}{
		{name: "malformed JSON", file: "bad.json", content: "[\n {\"role\":\"user\",\"content\":\"hi\"},\n {\"role\" \"user\"}\n]",
			is: ErrMalformed, want: []string{"bad.json", "line 3, column 10", "invalid character"}},
		{name: "truncated JSON", file: "cut.json", content: "[{\"role\":\"user\",\n\"content\":\"hi\"",
			is: ErrMalformed, want: []string{"cut.json", "line 2"}},
		{name: "unknown object", file: "summary.json", content: `{"total":3,"passed":2}`,
			is: ErrUnknownFormat, want: []string{"summary.json", `without "messages"`, `"passed"`}},
		{name: "scalar", file: "n.json", content: `42`, is: ErrUnknownFormat, want: []string{"n.json", "number"}},
		{name: "unknown trajectory format", file: "tf.json", content: `{"trajectory_format":"swe-agent-2","messages":[]}`,
			is: ErrUnknownFormat, want: []string{"tf.json", "trajectory_format", "mini-swe-agent-1"}},
		{name: "orphan tool result", file: "orphan.json", content: `[{"role":"system","content":"s"},{"role":"user","content":"u"},{"role":"tool","tool_call_id":"x","content":"r"}]`,
			is: ErrInvalidHistory, want: []string{"orphan.json", "message 2", "tool result without a preceding call"}},
		{name: "unknown role", file: "role.json", content: `[{"role":"robot","content":"beep"}]`,
			is: chat.ErrUnknownRole, want: []string{"role.json", "message 0", "robot"}},
		{name: "bad JSONL line", file: "x.jsonl", content: compact(openaiBody) + "\n" + compact(openaiBody) + "\n{\"messages\": [}\n",
			is: ErrMalformed, want: []string{"x.jsonl", "line 3, column"}},
		{name: "JSONL line of no format", file: "y.jsonl", content: compact(openaiBody) + "\n{\"a\":1}\n",
			is: ErrUnknownFormat, want: []string{"y.jsonl", "line 2"}},
		{name: "bad tau record", file: "tau.json", content: `[{"traj":[{"role":"user","content":"hi"}]},{"traj":[{"role":"user","content":"hi"},{"role":"tool","tool_call_id":"z","content":"r"}]}]`,
			is: ErrInvalidHistory, want: []string{"tau.json", "[1].traj", "message 1"}},
		{name: "forced format mismatch", file: "f.json", content: openaiMsgs, format: FormatTauBench,
			is: ErrUnknownFormat, want: []string{"f.json", "tau-bench"}},
		{name: "array of numbers", file: "nums.json", content: `[1,2]`, is: ErrUnknownFormat, want: []string{"nums.json", "[0]"}},
		{name: "empty", file: "empty.json", content: " \n", is: ErrUnknownFormat, want: []string{"empty.json", "empty file"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := write(t, dir, tc.file, tc.content)
			_, err := load([]string{p}, tc.format)
			if err == nil {
				t.Fatal("no error")
			}
			var le *LoadError
			if !errors.As(err, &le) || le.Path != p {
				t.Errorf("error %T %v does not name the file", err, err)
			}
			if !errors.Is(err, tc.is) {
				t.Errorf("error %v is not %v", err, tc.is)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}

	if _, err := load([]string{filepath.Join(dir, "missing.json")}, ""); err == nil || !strings.Contains(err.Error(), "missing.json") {
		t.Errorf("missing file: %v", err)
	}
	if _, err := load([]string{dir}, "yaml"); err == nil || !strings.Contains(err.Error(), `"yaml"`) {
		t.Errorf("unknown format: %v", err)
	}

	// In a directory, well-formed JSON of no known format is skipped; malformed JSON is not.
	d2 := t.TempDir()
	write(t, d2, "a/run.json", openaiMsgs)
	write(t, d2, "a/results_summary.json", `{"total":3}`)
	write(t, d2, "a/notes.txt", "not json")
	ts, skipped, err := loadAll([]string{d2}, "")
	if err != nil || len(ts) != 1 || len(skipped) != 1 || !strings.HasSuffix(skipped[0].Path, "results_summary.json") {
		t.Errorf("directory: %d runs, skipped %+v, %v", len(ts), skipped, err)
	}
	write(t, d2, "b/broken.json", "{")
	if _, err := load([]string{d2}, ""); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "broken.json") {
		t.Errorf("malformed file in a directory: %v", err)
	}
}

func TestLoadNamesUnique(t *testing.T) {
	dir := t.TempDir()
	p := write(t, dir, "s/a.json", openaiMsgs)
	ts, err := load([]string{p, p}, "")
	if err != nil {
		t.Fatal(err)
	}
	if ts[0].Name == ts[1].Name {
		t.Errorf("duplicate names %q", ts[0].Name)
	}
}

// The mini-swe-agent conversion keeps content byte for byte.
func TestMiniSWEAgentVerbatim(t *testing.T) {
	p := "mini-swe-agent/django__django-9296.traj.json"
	raw, err := fs.ReadFile(sample.FS(), path.Join(sample.Dir, p))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Messages []struct {
			Role, Content string
		}
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	ts, _ := loadSample(t, p)
	got := append(append([]chat.Message{}, ts[0].System...), ts[0].Messages...)
	if len(got) != len(f.Messages) {
		t.Fatalf("%d messages, file has %d", len(got), len(f.Messages))
	}
	for i, m := range f.Messages {
		if got[i].Text() != m.Content {
			t.Errorf("message %d text changed", i)
		}
		if m.Role == "user" && got[i].Role == chat.RoleTool {
			continue
		}
		if string(got[i].Role) != m.Role {
			t.Errorf("message %d: role %q, file %q", i, got[i].Role, m.Role)
		}
	}
}

// loadAll is load that also returns the files LoadEach skipped.
func loadAll(paths []string, format string) ([]Trajectory, []Skipped, error) {
	var out []Trajectory
	skipped, err := LoadEach(paths, format, func(t Trajectory) error {
		out = append(out, t)
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return out, skipped, nil
}

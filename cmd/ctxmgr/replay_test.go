package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeTrajectory writes a run of turns user/assistant pairs, each of about 150 tokens, as a
// JSON array of OpenAI messages, and returns its directory.
func writeTrajectory(t *testing.T, turns int) string {
	t.Helper()
	dir := t.TempDir()
	var msgs []map[string]string
	for i := range turns {
		msgs = append(msgs,
			map[string]string{"role": "user", "content": fmt.Sprintf("step %d: look at file_%d.go. ", i, i) + strings.Repeat(fmt.Sprintf("detail %d of the task; ", i), 30)},
			map[string]string{"role": "assistant", "content": fmt.Sprintf("done with step %d: function_%d is fixed. ", i, i) + strings.Repeat("checked. ", 20)})
	}
	b, _ := json.Marshal(msgs)
	writeFile(t, dir, "run.json", string(b))
	return dir
}

func TestReplaySummarizerOptions(t *testing.T) {
	traj := writeTrajectory(t, 30)
	small := []string{"--window", "4096", "--max-output", "512", "--strategy", "default"}

	if r := runCmd(t, "", "replay", "--help"); !strings.Contains(r.stdout, "OPENAI_API_KEY") || !strings.Contains(r.stdout, "ANTHROPIC_API_KEY") {
		t.Errorf("replay --help does not name the API key variables:\n%s", r.stdout)
	}

	t.Run("key variable unset", func(t *testing.T) {
		t.Setenv("OPENAI_API_KEY", "")
		r := runCmd(t, "", append([]string{"replay", "--summarizer", "openai", "--model", "m", traj}, small...)...)
		if r.code != exitUsage || !strings.Contains(r.stderr, "OPENAI_API_KEY is not set") {
			t.Errorf("exit %d, stderr %q", r.code, r.stderr)
		}
	})

	t.Run("summarizer refuses every call", func(t *testing.T) {
		llm := httptest.NewServer(&fakeLLM{status: http.StatusUnauthorized})
		defer llm.Close()
		t.Setenv("CTXMGR_TEST_KEY", "k")
		r := runCmd(t, "", append([]string{"replay", "--summarizer", "openai", "--model", "m", "--base-url", llm.URL + "/v1", "--key-env", "CTXMGR_TEST_KEY", "-q", traj}, small...)...)
		if r.code != exitError || !strings.Contains(r.stderr, "not answering") || !strings.Contains(r.stderr, "401") {
			t.Errorf("exit %d, stderr %q; want exit 1 naming the failure", r.code, r.stderr)
		}
		if r.stdout != "" {
			t.Errorf("figures printed for a run measured with the fallback: %q", r.stdout)
		}
	})

	t.Run("quiet hides fallback lines", func(t *testing.T) {
		for _, quiet := range []bool{false, true} {
			llm := httptest.NewServer(&fakeLLM{status: http.StatusUnauthorized, failFrom: 2})
			args := append([]string{"replay", "--summarizer", "openai", "--model", "m", "--base-url", llm.URL + "/v1", "--key-env", "", traj}, small...)
			if quiet {
				args = append(args, "-q")
			}
			r := runCmd(t, "", args...)
			llm.Close()
			if r.code != 0 {
				t.Fatalf("quiet=%v: exit %d, stderr %q", quiet, r.code, r.stderr)
			}
			fallback := strings.Contains(r.stderr, "fell back") || strings.Contains(r.stderr, "fallback")
			if quiet && r.stderr != "" {
				t.Errorf("-q: stderr %q", r.stderr)
			}
			if !quiet && !fallback {
				t.Errorf("without -q the fallbacks are not reported: %q", r.stderr)
			}
		}
	})
}

func TestReplayRejectsUnknownReportTrajectory(t *testing.T) {
	traj := writeTrajectory(t, 3)
	out := filepath.Join(t.TempDir(), "report")
	r := runCmd(t, "", "replay", "--report", out, "--report-trajectory", "nope.json", traj)
	if r.code != exitUsage || !strings.Contains(r.stderr, `"nope.json": no such trajectory`) {
		t.Errorf("exit %d, stderr %q", r.code, r.stderr)
	}
	if _, err := os.Stat(out); err == nil {
		t.Errorf("a report was written")
	}
}

// With no PATH, replay replays the sample embedded in the binary, wherever it runs, and says
// so in one line on stderr (none with -q); the report's first pass reads it too.
func TestReplayEmbeddedSample(t *testing.T) {
	t.Chdir(t.TempDir()) // nothing beside the working directory
	r := runCmd(t, "", "replay", "--strategy", "raw,default", "--json")
	if r.code != 0 {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	if want := "ctxmgr: replay: replaying the embedded sample of 42 real runs (mini-swe-agent, tau-bench); pass a PATH to replay your own\n"; r.stderr != want {
		t.Errorf("stderr %q, want %q", r.stderr, want)
	}
	var res struct {
		Trajectories int `json:"trajectories"`
		Calls        int `json:"calls"`
		Sets         []struct {
			Name         string `json:"name"`
			Trajectories int    `json:"trajectories"`
		} `json:"sets"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
		t.Fatalf("%v: %s", err, r.stdout)
	}
	sets := map[string]int{}
	for _, s := range res.Sets {
		sets[s.Name] = s.Trajectories
	}
	if res.Trajectories != 42 || res.Calls == 0 || len(sets) != 2 || sets["mini-swe-agent"] != 12 || sets["tau-bench"] != 30 {
		t.Errorf("%d trajectories, %d calls, sets %v; want 42 runs: 12 mini-swe-agent, 30 tau-bench", res.Trajectories, res.Calls, sets)
	}

	r = runCmd(t, "", "replay", "-q", "--strategy", "raw")
	if r.code != 0 || r.stderr != "" || !strings.Contains(r.stdout, "replay: 42 trajectories") {
		t.Errorf("-q: exit %d, stderr %q, stdout %q", r.code, r.stderr, r.stdout)
	}

	// The charted trajectory is looked up in the sample: the help's example name exists,
	// an unknown one is refused before anything runs.
	out := filepath.Join(t.TempDir(), "report")
	r = runCmd(t, "", "replay", "-q", "--strategy", "raw", "--report", out, "--report-trajectory", "mini-swe-agent/django__django-11149.traj.json")
	if r.code != 0 {
		t.Fatalf("--report: exit %d, stderr %q", r.code, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(out, "index.html")); err != nil {
		t.Error(err)
	}
	r = runCmd(t, "", "replay", "-q", "--strategy", "raw", "--report", out, "--report-trajectory", "nope.json")
	if r.code != exitUsage || !strings.Contains(r.stderr, `"nope.json": no such trajectory (names look like "mini-swe-agent/`) {
		t.Errorf("unknown --report-trajectory: exit %d, stderr %q", r.code, r.stderr)
	}
}

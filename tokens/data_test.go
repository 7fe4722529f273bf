package tokens_test

import (
	"bufio"
	"encoding/json"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"sync"
	"testing"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/internal/sample"
)

// goldenPath is the golden token counts, in the repository's testdata (the package directory
// is one level below the repository root).
var goldenPath = filepath.Join("..", "testdata", "golden", "token-counts.jsonl")

type goldenLine struct {
	Source string `json:"source"`
	Text   string `json:"text"`
	O200k  int    `json:"o200k_base"`
	CL100k int    `json:"cl100k_base"`
}

func (g goldenLine) want(enc string) int {
	if enc == "o200k_base" {
		return g.O200k
	}
	return g.CL100k
}

func loadGolden(tb testing.TB) []goldenLine {
	tb.Helper()
	path := goldenPath
	f, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	var out []goldenLine
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var g goldenLine
		if err := json.Unmarshal(sc.Bytes(), &g); err != nil {
			tb.Fatalf("%s:%d: %v", path, len(out)+1, err)
		}
		out = append(out, g)
	}
	if err := sc.Err(); err != nil {
		tb.Fatal(err)
	}
	if len(out) == 0 {
		tb.Fatalf("%s is empty", path)
	}
	return out
}

// trajStep is one assistant step of a mini-swe-agent run: the messages before it were its
// prompt, and the provider reported Reported prompt tokens for it.
type trajStep struct {
	Index    int // index of the assistant message in Messages
	Reported int
}

type trajRun struct {
	Name     string
	Messages []chat.Message
	Steps    []trajStep
}

var trajCache struct {
	sync.Mutex
	runs []trajRun
}

// loadTrajectories parses the mini-swe-agent runs of the embedded sample (package
// internal/sample) once per test binary; callers must not modify them.
func loadTrajectories(tb testing.TB) []trajRun {
	tb.Helper()
	trajCache.Lock()
	defer trajCache.Unlock()
	if trajCache.runs == nil {
		trajCache.runs = parseTrajectories(tb, sample.FS(), path.Join(sample.Dir, "mini-swe-agent"))
	}
	return trajCache.runs
}

func parseTrajectories(tb testing.TB, fsys fs.FS, dir string) []trajRun {
	files, err := fs.Glob(fsys, path.Join(dir, "*.traj.json"))
	if err != nil || len(files) == 0 {
		tb.Fatalf("no *.traj.json in %s: %v", dir, err)
	}
	sort.Strings(files)
	var runs []trajRun
	for _, file := range files {
		b, err := fs.ReadFile(fsys, file)
		if err != nil {
			tb.Fatal(err)
		}
		var raw struct {
			Messages []struct {
				Role    string `json:"role"`
				Content string `json:"content"`
				Extra   struct {
					Response struct {
						Usage struct {
							PromptTokens int `json:"prompt_tokens"`
						} `json:"usage"`
					} `json:"response"`
				} `json:"extra"`
			} `json:"messages"`
		}
		if err := json.Unmarshal(b, &raw); err != nil {
			tb.Fatalf("%s: %v", file, err)
		}
		run := trajRun{Name: path.Base(file)}
		for i, m := range raw.Messages {
			run.Messages = append(run.Messages, chat.TextMessage(chat.Role(m.Role), m.Content))
			if m.Role == "assistant" && m.Extra.Response.Usage.PromptTokens > 0 {
				run.Steps = append(run.Steps, trajStep{Index: i, Reported: m.Extra.Response.Usage.PromptTokens})
			}
		}
		runs = append(runs, run)
	}
	return runs
}

// promptOf is the request of a step: the leading system message as System, the rest of the
// messages before the step as Messages.
func promptOf(run *trajRun, step trajStep) *chat.Request {
	msgs := run.Messages[:step.Index]
	r := &chat.Request{}
	for len(msgs) > 0 && msgs[0].Role == chat.RoleSystem {
		r.System = append(r.System, msgs[0])
		msgs = msgs[1:]
	}
	r.Messages = msgs
	return r
}

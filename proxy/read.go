package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	ctxmgr "github.com/ctxmgr/ctxmgr"
	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/internal/readtool"
	"github.com/ctxmgr/ctxmgr/store"
	"github.com/ctxmgr/ctxmgr/tokens"
)

// readToolName is the tool the proxy injects and answers itself.
const readToolName = readtool.Name

func withReadTool(tools []chat.Tool) []chat.Tool { return readtool.With(tools) }

// stripReadTool removes the injected tool (a client never offers it itself).
func stripReadTool(tools []chat.Tool) []chat.Tool {
	if !slices.ContainsFunc(tools, func(t chat.Tool) bool { return t.Name == readToolName }) {
		return tools // the same slice: see psession.setupHash
	}
	return slices.DeleteFunc(slices.Clone(tools), func(t chat.Tool) bool { return t.Name == readToolName })
}

type readCall struct {
	ID, Args string
}

type readArgs struct {
	Ref      string `json:"ref"`
	FromLine int    `json:"from_line"`
	Lines    int    `json:"lines"`
}

var (
	messagesRef = regexp.MustCompile(`^messages?\s+(\d+)\s*-\s*(\d+)`)
	archiveLine = regexp.MustCompile(`^messages (\d+)-(\d+): (.*)$`)
)

// answerRead answers one ctxmgr_read call of session id from the Store, within maxTokens
// tokens by counter.
//
// also names other sessions whose archives the request may read: those of the summaries the
// request's compaction tokens stand for (native_token.go); a range the session has not
// archived is read from them.
func (s *Server) answerRead(ctx context.Context, id string, also []string, mgr *managed, sess *ctxmgr.Session, rawArgs string, maxTokens int, counter tokens.Counter) (string, bool) {
	s.metrics.reads.Inc()
	var a readArgs
	if err := json.Unmarshal([]byte(rawArgs), &a); err != nil || strings.TrimSpace(a.Ref) == "" {
		return "ctxmgr_read: arguments must be {\"ref\": string, \"from_line\": int, \"lines\": int}", true
	}
	ref := strings.TrimSpace(a.Ref)
	if a.FromLine < 1 {
		a.FromLine = 1
	}
	if a.Lines <= 0 {
		a.Lines = 200
	}
	a.Lines = min(a.Lines, 2000)
	st := sess.Stats()
	st0 := s.cfg.Store

	var full string
	var fetch func(from, n int) (string, int, error)
	for _, off := range st.Offloads {
		loc := string(off.Location)
		if ref == off.Ref() || ref == off.Key || ref == loc || strings.Contains(ref, off.Ref()) {
			key := off.Key
			fetch = func(from, n int) (string, int, error) { return st0.ReadOffload(ctx, id, key, from, n) }
			// A read-back is a use of that result: the cost model learns from it whether
			// this agent looks back.
			sess.NoteReadBack(key)
			break
		}
	}
	if fetch == nil && strings.HasPrefix(ref, "cleared-") {
		// A tool result cleared by context editing (native_anthropic.go).
		fetch = func(from, n int) (string, int, error) { return st0.ReadOffload(ctx, id, ref, from, n) }
	}
	if fetch == nil {
		var ranges [][2]int
		if m := messagesRef.FindStringSubmatch(ref); m != nil {
			a1, _ := strconv.Atoi(m[1])
			b1, _ := strconv.Atoi(m[2])
			ranges = append(ranges, [2]int{a1, b1 + 1})
		} else {
			for _, line := range st.Archives {
				if m := archiveLine.FindStringSubmatch(line); m != nil && (m[3] == ref || strings.Contains(ref, m[3])) {
					a1, _ := strconv.Atoi(m[1])
					b1, _ := strconv.Atoi(m[2])
					ranges = append(ranges, [2]int{a1, b1 + 1})
				}
			}
		}
		if len(ranges) > 0 {
			var b strings.Builder
			for _, r := range ranges {
				msgs, err := st0.ReadArchive(ctx, id, r[0], r[1])
				for _, other := range also {
					if err != nil || len(msgs) > 0 {
						break
					}
					msgs, err = st0.ReadArchive(ctx, other, r[0], r[1])
				}
				if err != nil {
					return "ctxmgr_read: " + err.Error(), true
				}
				for i := range msgs {
					renderMessage(&b, msgs[i].Pos, &msgs[i].Message)
				}
			}
			full = b.String()
			if full == "" {
				return fmt.Sprintf("ctxmgr_read: no archived messages in %q (%s)", ref, knownRefs(st)), true
			}
			fetch = func(from, n int) (string, int, error) {
				t, total := store.SplitLines(full, from, n)
				return t, total, nil
			}
		}
	}
	if fetch == nil {
		return fmt.Sprintf("ctxmgr_read: unknown ref %q (%s)", ref, knownRefs(st)), true
	}
	// The result, its header and "more" line included, fits maxTokens (unless those two alone
	// do not): the caller sized the window's room for it, and a result over it made the
	// follow-up fall back to asking without the read tool, the read lost. Fewer lines first,
	// then a cut line.
	n := a.Lines
	for {
		text, total, err := fetch(a.FromLine, n)
		if err != nil {
			return "ctxmgr_read: " + err.Error(), true
		}
		out := readResult(ref, a.FromLine, text, total)
		if counter.Text(out) <= maxTokens {
			return out, false
		}
		if n > 1 {
			n /= 2
			continue
		}
		for text != "" && counter.Text(out) > maxTokens {
			text = text[:chat.RuneStart(text, len(text)/2)]
			out = readResult(ref, a.FromLine, text, total)
		}
		return out, false
	}
}

// readResult is the text of a ctxmgr_read result: a header naming the lines shown, the text,
// and where to read on when there is more.
func readResult(ref string, from int, text string, total int) string {
	last := from + store.CountLines(text) - 1
	var b strings.Builder
	fmt.Fprintf(&b, "[ctxmgr_read %s: lines %d-%d of %d]\n", ref, from, last, total)
	b.WriteString(text)
	if last < total {
		fmt.Fprintf(&b, "\n[more: call ctxmgr_read with ref %q and from_line %d]", ref, last+1)
	}
	return b.String()
}

func knownRefs(st ctxmgr.Stats) string {
	var refs []string
	for _, off := range st.Offloads {
		refs = append(refs, off.Ref())
	}
	for _, a := range st.Archives {
		if m := archiveLine.FindStringSubmatch(a); m != nil {
			refs = append(refs, "messages "+m[1]+"-"+m[2])
		}
	}
	if len(refs) == 0 {
		return "nothing is offloaded or archived"
	}
	if len(refs) > 20 {
		refs = append(refs[:20], "...")
	}
	return "known refs: " + strings.Join(refs, ", ")
}

// renderMessage writes an archived message as text lines.
func renderMessage(b *strings.Builder, pos int, m *chat.Message) {
	fmt.Fprintf(b, "--- message %d (%s", pos, m.Role)
	if m.Role == chat.RoleTool {
		fmt.Fprintf(b, " result of %s %s", m.Name, m.ToolCallID)
		if m.IsError {
			b.WriteString(", error")
		}
	}
	b.WriteString(") ---\n")
	if t := m.Text(); t != "" {
		b.WriteString(t)
		if !strings.HasSuffix(t, "\n") {
			b.WriteByte('\n')
		}
	}
	for _, tc := range m.ToolCalls {
		fmt.Fprintf(b, "[tool call %s %s(%s)]\n", tc.ID, tc.Name, tc.Arguments)
	}
}

package summarize

import (
	"context"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/ctxmgr/ctxmgr/chat"
)

// testPathRe finds file paths for the recall measurement, independently of the summarizer's
// own tokenizer: slash paths ending in a file name with an extension, and bare file names
// with common extensions.
var testPathRe = regexp.MustCompile(`(?:[A-Za-z0-9_.-]+/)+[A-Za-z0-9_-]+\.[A-Za-z0-9]{1,6}\b|\b[A-Za-z0-9_-]+\.(?:py|txt|cfg|toml|rst|json|ini|yaml|yml)\b`)

func pathsIn(msgs []chat.Message, role chat.Role) map[string]bool {
	out := map[string]bool{}
	for i := range msgs {
		if msgs[i].Role != role {
			continue
		}
		for _, p := range testPathRe.FindAllString(msgs[i].Text(), -1) {
			out[p] = true
		}
	}
	return out
}

// TestTrajectoryRecall summarizes the first 60% of each mini-swe-agent run of the embedded
// sample (12 runs, 63 paths referenced again) and checks that the file paths of the evicted
// messages that the assistant mentions again later are in the summary. On the sample, recall
// is 0.968 at 1,000 tokens, 1.0 at 2,000 and 4,000, 0.984 incremental; on the 42 runs of
// the project's larger data set it is 0.964, 0.988, 0.988 and 0.960.
func TestTrajectoryRecall(t *testing.T) {
	trajs := loadTrajectories(t)
	names := make([]string, 0, len(trajs))
	for n := range trajs {
		names = append(names, n)
	}
	sort.Strings(names)
	s := NewExtractive(ExtractiveOptions{})
	const archive = "Messages 0-N are archived in dialog/2025-11-18.jsonl."
	type traj struct {
		name    string
		evicted []chat.Message
		refs    []string
	}
	var cases []traj
	for _, name := range names {
		msgs := trajs[name]
		cut := len(msgs) * 6 / 10
		evicted, later := msgs[:cut], msgs[cut:]
		var b strings.Builder
		for i := range evicted {
			b.WriteString(evicted[i].Text())
			b.WriteByte('\n')
		}
		before := b.String()
		var refs []string
		for p := range pathsIn(later, chat.RoleAssistant) {
			if strings.Contains(before, p) {
				refs = append(refs, p)
			}
		}
		sort.Strings(refs)
		if len(refs) > 0 {
			cases = append(cases, traj{name, evicted, refs})
		}
	}
	if len(cases) == 0 {
		t.Fatal("no referenced paths found in the trajectories")
	}
	for _, target := range []int{1000, 2000, 4000} {
		hits, total := 0, 0
		worst, worstName := 1.0, ""
		for _, c := range cases {
			name, evicted, refs := c.name, c.evicted, c.refs
			r, err := s.Summarize(context.Background(), Request{Messages: evicted, TargetTokens: target, ArchiveGuide: archive})
			if err != nil {
				t.Fatal(err)
			}
			if n := (ByteCounter{}).Text(r.Text); n > target {
				t.Errorf("%s: %d tokens over the target %d", name, n, target)
			}
			h := 0
			var missed []string
			for _, p := range refs {
				if strings.Contains(r.Text, p) {
					h++
				} else {
					missed = append(missed, p)
				}
			}
			hits += h
			total += len(refs)
			if rec := float64(h) / float64(len(refs)); rec < worst {
				worst, worstName = rec, name
			}
			if target == 2000 && len(missed) > 0 {
				sort.Strings(missed)
				t.Logf("target %d %s: %d/%d, missed %v", target, name, h, len(refs), missed)
			}
		}
		recall := float64(hits) / float64(total)
		t.Logf("target %4d tokens: path recall %d/%d = %.3f over %d trajectories (worst %.2f: %s)", target, hits, total, recall, len(cases), worst, worstName)
		if recall < 0.9 {
			t.Errorf("target %d: path recall %.3f < 0.9", target, recall)
		}
	}
	// Incremental: the same 60% summarized in rounds of 8 messages, each from the previous
	// summary, as the pipeline does it.
	const target = 2000
	hits, total := 0, 0
	for _, c := range cases {
		prev := ""
		for first := 0; first < len(c.evicted); first += 8 {
			end := min(first+8, len(c.evicted))
			r, err := s.Summarize(context.Background(), Request{Previous: prev, Messages: c.evicted[first:end], First: first, TargetTokens: target, ArchiveGuide: archive})
			if err != nil {
				t.Fatal(err)
			}
			if n := (ByteCounter{}).Text(r.Text); n > target {
				t.Errorf("%s round at %d: %d tokens over the target", c.name, first, n)
			}
			prev = r.Text
		}
		for _, p := range c.refs {
			if strings.Contains(prev, p) {
				hits++
			}
		}
		total += len(c.refs)
	}
	recall := float64(hits) / float64(total)
	t.Logf("incremental, rounds of 8 messages, target %d: path recall %d/%d = %.3f", target, hits, total, recall)
	if recall < 0.9 {
		t.Errorf("incremental path recall %.3f < 0.9", recall)
	}
}

package replay

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"unicode/utf8"
)

// The text output is readable on an 100-column terminal without the manual: short lines, the
// main table first, a legend for every abbreviated column, and a note saying why a strategy
// made no summary.
func TestWriteTextReadable(t *testing.T) {
	trajs := sampleRuns(t)
	for _, tc := range []struct {
		name           string
		window, output int
		wantNote       bool
	}{
		{"default window: nothing compacts", 200000, 32000, true},
		{"small window", 8000, 1024, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Run(context.Background(), trajs, Options{Window: tc.window, MaxOutput: tc.output, Counter: measuring(t)})
			if err != nil {
				t.Fatal(err)
			}
			var b bytes.Buffer
			if err := res.WriteText(&b); err != nil {
				t.Fatal(err)
			}
			out := b.String()
			for i, line := range strings.Split(out, "\n") {
				if n := utf8.RuneCountInString(line); n >= 100 {
					t.Errorf("line %d has %d columns: %q", i+1, n, line)
				}
			}
			for _, w := range []string{"strategy", "cost", "vs raw", "recall", "lost", "compact", "sum in", "per million", "\nrecall    ", "\nlost      ", "\ncompact   "} {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			if strings.Index(out, "recall") > strings.Index(out, "sum in") {
				t.Errorf("recall comes after the token columns:\n%s", out)
			}
			note := strings.Contains(out, "made no summary") && strings.Contains(out, "--window 32768")
			if note != tc.wantNote {
				t.Errorf("no-summary note shown %v, want %v:\n%s", note, tc.wantNote, out)
			}
		})
	}
}

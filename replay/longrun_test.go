package replay

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/turns"
	"github.com/ctxmgr/ctxmgr/wire"
)

// longRunSets are the generated sets: tuning and held-out, coding and read-and-quote.
func longRunSets(t testing.TB) map[string][]Trajectory {
	t.Helper()
	out := map[string][]Trajectory{}
	for _, k := range []struct {
		kind, set string
		seeds     []uint64
	}{
		{LongRunCoding, "coding-tuning", LongRunTuningSeeds()},
		{LongRunCoding, "coding-heldout", LongRunHeldOutSeeds()},
		{LongRunQuote, "quote-tuning", LongRunTuningSeeds()[:4]},
		{LongRunQuote, "quote-heldout", LongRunHeldOutSeeds()[:4]},
	} {
		tr, err := LongRuns(k.kind, k.set, k.seeds)
		if err != nil {
			t.Fatal(err)
		}
		out[k.set] = tr
	}
	return out
}

// The generated runs are valid, deterministic, long, and the two seed sets are disjoint.
func TestLongRunsShape(t *testing.T) {
	for _, s := range LongRunTuningSeeds() {
		for _, h := range LongRunHeldOutSeeds() {
			if s == h {
				t.Fatalf("seed %d is in both the tuning and the held-out set", s)
			}
		}
	}
	c := measuring(t)
	for set, trs := range longRunSets(t) {
		for _, tr := range trs {
			if err := turns.Validate(tr.Messages, turns.ValidateOptions{}); err != nil {
				t.Fatalf("%s: invalid: %v", tr.Name, err)
			}
			again, _ := LongRuns(map[bool]string{true: LongRunQuote, false: LongRunCoding}[set[0] == 'q'], set, []uint64{seedOf(t, tr.Name)})
			if len(again[0].Messages) != len(tr.Messages) || fullTextOf(&again[0].Messages[len(tr.Messages)-1]) != fullTextOf(&tr.Messages[len(tr.Messages)-1]) {
				t.Fatalf("%s: not deterministic", tr.Name)
			}
			total := 0
			for i := range tr.Messages {
				total += c.Message(&tr.Messages[i])
			}
			calls := tr.Calls()
			t.Logf("%s: %d calls, %d tokens", tr.Name, calls, total)
			if set[0] == 'c' && (calls < 50 || calls > 160 || total < 60000) {
				t.Errorf("%s: %d calls, %d tokens: want 50-150 calls and a long run", tr.Name, calls, total)
			}
		}
	}
}

func seedOf(t testing.TB, name string) uint64 {
	var s uint64
	for i := len(name) - 1; i >= 0 && name[i] >= '0' && name[i] <= '9'; i-- {
		s = 0
		for _, c := range name[i:] {
			s = s*10 + uint64(c-'0')
		}
	}
	return s
}

func fullTextOf(m *chat.Message) string {
	s := ""
	for _, p := range m.Content {
		s += p.Text
	}
	return s
}

// TestWriteLongRuns writes the generated sets as OpenAI bodies, one directory per set, and
// reads them back as `ctxmgr replay DIR` does: every run comes back whole, under its name and
// set, and encodes to the very body written. The files go to $CTXMGR_LONGRUNS_DIR when it is
// set (to measure them with `ctxmgr replay DIR`), else to a temporary directory.
func TestWriteLongRuns(t *testing.T) {
	dir := os.Getenv("CTXMGR_LONGRUNS_DIR")
	if dir == "" {
		dir = t.TempDir()
	}
	bodies := map[string][]byte{} // by run name, as LoadEach names it
	for set, trs := range longRunSets(t) {
		if err := os.MkdirAll(filepath.Join(dir, set), 0o755); err != nil {
			t.Fatal(err)
		}
		for _, tr := range trs {
			body, err := wire.EncodeOpenAI(&chat.Request{System: tr.System, Tools: tr.Tools, Messages: tr.Messages})
			if err != nil {
				t.Fatal(err)
			}
			name := filepath.Base(tr.Name) + ".json"
			if err := os.WriteFile(filepath.Join(dir, set, name), body, 0o644); err != nil {
				t.Fatal(err)
			}
			bodies[set+"/"+name] = body
		}
	}
	var sets []string
	for set := range longRunSets(t) {
		sets = append(sets, filepath.Join(dir, set))
	}
	read := 0
	if _, err := LoadEach(sets, "", func(tr Trajectory) error {
		want, ok := bodies[tr.Name]
		if !ok {
			t.Errorf("read back %s, which was not written", tr.Name)
			return nil
		}
		read++
		got, err := wire.EncodeOpenAI(&chat.Request{System: tr.System, Tools: tr.Tools, Messages: tr.Messages})
		if err != nil {
			return err
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: read back, it encodes to a different body (%d bytes, written %d)", tr.Name, len(got), len(want))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if read != len(bodies) {
		t.Errorf("read back %d runs of %d written", read, len(bodies))
	}
}

// Recoverable recall counts what a strategy dropped from the request but left readable
// through a reference: never below recall, and every missed term of default on a
// read-and-quote run is in reach (nothing is lost), at a read-back cost.
func TestRecoverableRecall(t *testing.T) {
	trs, err := LongRuns(LongRunQuote, "quote-tuning", LongRunTuningSeeds()[1:2])
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(context.Background(), trs, Options{Window: 16384, MaxOutput: 2048, Strategies: []string{StrategyRaw, "default"}, Counter: measuring(t), Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	raw, def := res.Strategies[0], res.Strategies[1]
	if raw.RecoverableRecall != 1 || raw.ReadBackTokens != 0 {
		t.Fatalf("raw: recoverable %v, read back %d", raw.RecoverableRecall, raw.ReadBackTokens)
	}
	t.Logf("default at 16K: recall %.4f, recoverable %.4f, read back %d tokens, cost %.3f -> %.3f", def.Recall, def.RecoverableRecall, def.ReadBackTokens, def.Cost, def.CostWithReadBack)
	if def.Recall >= 1 {
		t.Fatal("default recalls everything at 16K: the test proves nothing")
	}
	if def.RecoverableRecall < def.Recall || def.RecoverableRecall < 0.99 || def.ReadBackTokens <= 0 || def.CostWithReadBack <= def.Cost {
		t.Fatalf("default: recall %.4f, recoverable %.4f, read back %d", def.Recall, def.RecoverableRecall, def.ReadBackTokens)
	}
}

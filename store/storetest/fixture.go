package storetest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/store"
)

// The fixture: a small store of every kind of row, written by a release's code and kept in a
// backend's testdata, so that the backend's tests can check that databases made before a
// change still open and read back the same (the SQLite file and the PostgreSQL dump of
// testdata/v1.* were made by commit 46012b1, before package sqlstore, with WriteFixture).

// FixtureTime is the clock of WriteFixture: every time it stores.
var FixtureTime = time.Date(2025, 1, 2, 3, 4, 5, 123456789, time.UTC)

// FixtureMessages are the messages of session "s1" of the fixture: Kinds without its 1 MiB
// text.
func FixtureMessages() []chat.Message {
	kinds := Kinds()
	return append(kinds[:6:6], kinds[7:]...)
}

func fixtureSummary(v int) store.Summary {
	return store.Summary{Version: v, Text: fmt.Sprintf("summary %d\x00", v), From: 0, To: v,
		Created: FixtureTime.Add(time.Duration(v) * time.Hour).In(time.FixedZone("X", 3600)), Summarizer: "extractive"}
}

var fixtureOffloads = []struct {
	key, text string
	exp       time.Time
}{{"call_1", "one\ntwo\n", time.Time{}}, {"call_2", "kept\n", FixtureTime.Add(24 * time.Hour)}, {"call_3", "gone\n", FixtureTime.Add(-time.Hour)}}

// WriteFixture writes the fixture into s, whose clock must be FixtureTime, and closes s.
func WriteFixture(s store.Store) error {
	ctx := context.Background()
	msgs := FixtureMessages()
	if err := s.Append(ctx, "s1", 0, msgs); err != nil {
		return err
	}
	if err := s.Append(ctx, "s2", 0, []chat.Message{chat.TextMessage(chat.RoleUser, "only")}); err != nil {
		return err
	}
	for v := 1; v <= 2; v++ {
		if err := s.PutSummary(ctx, "s1", fixtureSummary(v)); err != nil {
			return err
		}
	}
	if _, err := s.Archive(ctx, "s1", 0, msgs[:3]); err != nil {
		return err
	}
	for _, o := range fixtureOffloads {
		if _, err := s.Offload(ctx, "s1", o.key, o.text, o.exp); err != nil {
			return err
		}
	}
	if err := s.PutState(ctx, "s1", []byte(`{"state":1}`)); err != nil {
		return err
	}
	if err := s.PutConfig(ctx, "s1", "gpt-4o", []byte(`{"window":128000}`)); err != nil {
		return err
	}
	for _, k := range []string{"append", "prepare"} {
		if err := s.AppendEvent(ctx, "s1", k, []byte(`{"kind":"`+k+`"}`)); err != nil {
			return err
		}
	}
	return s.Close()
}

// FixtureNow is the clock of the stores CheckFixture checks: a minute after the fixture was
// written, when one of its offloaded results has expired and the other has not.
var FixtureNow = FixtureTime.Add(time.Minute)

// CheckFixture checks that s, opened with its clock at FixtureNow on a fixture WriteFixture
// made, reads back everything it wrote, and that it takes new writes where the
// fixture left off.
func CheckFixture(t *testing.T, s store.Store) {
	t.Helper()
	ctx := context.Background()
	msgs := FixtureMessages()
	EqualMessages(t, "Messages s1", mustMessages(t, s, "s1", 0, -1), RoundTrip(t, msgs))
	EqualMessages(t, "Messages s2", mustMessages(t, s, "s2", 0, -1), RoundTrip(t, []chat.Message{chat.TextMessage(chat.RoleUser, "only")}))

	infos, err := s.Sessions(ctx)
	if err != nil || len(infos) != 2 {
		t.Fatalf("Sessions: %+v, %v", infos, err)
	}
	for i, want := range []store.SessionInfo{{ID: "s1", Messages: len(msgs), Summary: 2}, {ID: "s2", Messages: 1}} {
		got := infos[i]
		if got.ID != want.ID || got.Messages != want.Messages || got.Summary != want.Summary ||
			!fixtureTime(got.Created) || !fixtureTime(got.Updated) {
			t.Errorf("Sessions[%d] = %+v, want %+v created and updated at %v", i, got, want, FixtureTime)
		}
	}

	sums, err := s.Summaries(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	want := []store.Summary{}
	for v := 1; v <= 2; v++ {
		n, err := fixtureSummary(v).Normalized()
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, n)
	}
	equalSummaries(t, "Summaries", sums, want)

	arch, err := s.ReadArchive(ctx, "s1", 0, -1)
	if err != nil || len(arch) != 3 || arch[0].Pos != 0 || arch[2].Pos != 2 {
		t.Fatalf("ReadArchive: %d rows, %v", len(arch), err)
	}
	EqualMessages(t, "ReadArchive", ArchivedMessages(arch), RoundTrip(t, msgs[:3]))

	for _, o := range fixtureOffloads[:2] {
		text, total, err := s.ReadOffload(ctx, "s1", o.key, 1, 0)
		if err != nil || text != o.text || total != store.CountLines(o.text) {
			t.Errorf("ReadOffload %s: %q, %d, %v", o.key, text, total, err)
		}
	}
	if _, _, err := s.ReadOffload(ctx, "s1", "call_3", 1, 0); !errors.Is(err, store.ErrExpired) {
		t.Errorf("ReadOffload of the expired result: %v, want ErrExpired", err)
	}
	if o, err := s.Offload(ctx, "s1", "call_2", "other\n", time.Time{}); err != nil || o.Bytes != 5 || !o.Expires.Equal(fixtureOffloads[1].exp) {
		t.Errorf("Offload over the kept result: %+v, %v", o, err)
	}
	if state, err := s.State(ctx, "s1"); err != nil || string(state) != `{"state":1}` {
		t.Errorf("State: %q, %v", state, err)
	}
	if model, cfg, err := s.Config(ctx, "s1"); err != nil || model != "gpt-4o" || string(cfg) != `{"window":128000}` {
		t.Errorf("Config: %q, %q, %v", model, cfg, err)
	}
	evs, err := s.Events(ctx, "s1")
	if err != nil || len(evs) != 2 || evs[0].Kind != "append" || string(evs[1].Body) != `{"kind":"prepare"}` ||
		!fixtureTime(evs[0].At) || evs[0].ID >= evs[1].ID {
		t.Fatalf("Events: %+v, %v", evs, err)
	}

	// New writes continue where the fixture left off.
	if err := s.Append(ctx, "s1", len(msgs)-1, texts("late", 1)); !errors.Is(err, store.ErrConflict) {
		t.Errorf("Append at a stale position: %v, want ErrConflict", err)
	}
	mustAppend(t, s, "s1", len(msgs), texts("next", 2))
	if err := s.PutSummary(ctx, "s1", store.Summary{Version: 3, Text: "third", To: len(msgs)}); err != nil {
		t.Errorf("PutSummary 3: %v", err)
	}
	if err := s.AppendEvent(ctx, "s1", "compact", nil); err != nil {
		t.Fatal(err)
	}
	if evs, err := s.Events(ctx, "s1"); err != nil || len(evs) != 3 || evs[2].ID <= evs[1].ID {
		t.Errorf("Events after a new one: %+v, %v", evs, err)
	}
	if got := mustMessages(t, s, "s1", len(msgs), -1); len(got) != 2 {
		t.Errorf("%d new messages, want 2", len(got))
	}
	pruned, err := s.Prune(ctx, FixtureTime.Add(time.Second), false)
	if err != nil || len(pruned) != 1 || pruned[0].ID != "s2" {
		t.Errorf("Prune: %+v, %v", pruned, err)
	}
}

// fixtureTime reports whether t is FixtureTime as a backend stores times: PostgreSQL keeps
// microseconds.
func fixtureTime(t time.Time) bool {
	return t.Sub(FixtureTime).Abs() < time.Microsecond
}

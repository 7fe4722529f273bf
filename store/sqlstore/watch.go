package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"time"
)

// watchLimit is how long a call waits for another process to apply the appends its
// journal holds before it fails. That process applies them within its WriteBehind (20 ms
// for ctxmgr serve) unless its applies fail (disk full), which it logs.
const watchLimit = 10 * time.Second

// ErrJournalBehind is returned by a call of a store that does not journal when another
// process journals the database and has not applied its appends within watchLimit.
var ErrJournalBehind = errors.New("another process journals this database and has not applied its appends")

// watcher is what a store that does not journal (Config.Journal set, but no WriteBehind or
// another process holds the journal's lock) keeps of the journal, so that its calls see the
// appends another process journaled before them: the CLI reading sessions while ctxmgr
// serve runs sees each turn as soon as serve has answered it, not WriteBehind later.
type watcher struct {
	s      *Store
	prefix string
	log    *slog.Logger
}

// settle waits until the records the journal holds at the call are in the database. If the
// journal's lock is free, the process that held it is gone (or closed): settle applies what
// it left, as Open does. With the files empty, as between a journaling process's batches
// and always when none runs, it costs two stat(2) calls.
func (w *watcher) settle(ctx context.Context) error {
	if !w.holdsBytes() {
		return nil
	}
	var target uint64
	deadline := time.Now().Add(watchLimit)
	for pause, first := time.Millisecond, true; ; pause, first = min(2*pause, 20*time.Millisecond), false {
		recs, err := w.read()
		if err != nil {
			return err
		}
		if first {
			for _, r := range recs {
				target = max(target, r.seq)
			}
		}
		// Records are taken out only by their file's truncation, after they are applied;
		// records written since the call have higher seqs (a restarted process's lower
		// ones are waited for too, which costs at most its WriteBehind).
		if !slices.ContainsFunc(recs, func(r jrec) bool { return r.seq <= target }) {
			return nil
		}
		held, err := recoverJournal(ctx, w.s, w.prefix, w.log)
		if err != nil || !held {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("journal %s: %w within %v", w.prefix, ErrJournalBehind, watchLimit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pause):
		}
	}
}

// holdsBytes reports whether a journal file is not empty.
func (w *watcher) holdsBytes() bool {
	for i := range journalFiles {
		if fi, err := os.Stat(fmt.Sprintf("%s-%d", w.prefix, i)); err == nil && fi.Size() > 0 {
			return true
		}
	}
	return false
}

// read decodes the whole records the journal's files hold.
func (w *watcher) read() ([]jrec, error) {
	var recs []jrec
	for i := range journalFiles {
		data, err := os.ReadFile(fmt.Sprintf("%s-%d", w.prefix, i))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("journal: %w", err)
		}
		recs = append(recs, decodeRecords(data)...)
	}
	return recs, nil
}

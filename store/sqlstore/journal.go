package sqlstore

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/ctxmgr/ctxmgr/store"
)

// The append journal (Config.Journal, Config.WriteBehind).
//
// A transaction costs about the same whatever it holds: in SQLite, through modernc.org/sqlite,
// most of an append's CPU is the commit's fixed part (WAL frames, locks), and the proxy's
// answer waits for it. With write-behind,
// Append checks its position, writes one record to the journal with one write(2) and
// returns; a goroutine applies what the journal holds to the database at most WriteBehind
// later, every record in one transaction, and empties the journal.
//
// What holds:
//
//   - Durability is the journal's: a returned Append is in the operating system's cache, so
//     it survives the process's death (SIGKILL included), not a power cut, like SQLite's
//     synchronous=NORMAL. Open applies what a journal left by a dead process holds before
//     anything else.
//   - This process reads what it wrote: every other call first waits until the appends
//     made before it are in the database (settle), so that the store.Store contract holds
//     unchanged; only Append is faster. Another process's store sees them too: its calls
//     but Append first wait until the records the journal holds are applied, at most the
//     journaling process's WriteBehind, and apply them if that process is gone (watch.go).
//   - Position checks: Append compares at with the session's length, its records in flight
//     included. Only one process at a time journals a database (an exclusive flock on the
//     journal's first file; another process appends directly). Should another process
//     append to a session this one journals, the check has passed on a stale length: the
//     record then fails its check when applied and is dropped, logged at Error level with
//     its session and position (its client, which resends its history, appends it again).
//     ctxmgr serve is the only writer of its sessions; the CLI reads them, and its prune
//     removes sessions idle for --older-than, days in practice against WriteBehind's 20 ms.
//   - A failing apply (I/O error, disk full) drops nothing: the records stay in the journal
//     and are retried, and every call that must see them fails with the error meanwhile.
//
// The journal is two files, Config.Journal+"-0" and "-1". Appends go to one while the
// other's records are applied; once they are committed it is truncated, and the two
// swap. A record is length, CRC-32C and payload; a record cut short by a crash or that fails
// its checksum ends its file's reading (no append that returned is after it: each is written
// whole before it returns).

// journalFiles is how many files the journal alternates between.
const journalFiles = 2

// jrec is one Append, as journaled.
type jrec struct {
	seq     uint64 // order of the Appends in this process (across the two files)
	session string
	at      int
	t       int64 // Unix nanoseconds
	hashes  [][]byte
	bodies  [][]byte
}

// jnext is a session's length counting its records not yet in the database.
type jnext struct {
	n   int
	seq uint64 // of its last record
}

type journal struct {
	s     *Store
	delay time.Duration
	log   *slog.Logger
	files [journalFiles]*os.File
	buf   []byte

	mu      sync.Mutex
	settled *sync.Cond // on mu: broadcast when applied or failure changes
	active  int        // the file appends go to
	size    [journalFiles]int64
	seq     uint64           // of the last record written
	applied uint64           // every record up to it is in the database (or dropped)
	pending []jrec           // written to files[active], not yet taken by the applier
	next    map[string]jnext // sessions with records not yet in the database
	failure error            // the applier's last error, nil once an apply succeeds
	broken  error            // a write that could not be undone: appends fail

	kick, urgent chan struct{}
	stop, done   chan struct{}
	dropped      int
}

// journalLockWait is how long openJournal waits for a lock another process holds: a
// process that only recovers (Open without WriteBehind, a watcher) holds it for the time of
// an apply, a process that journals for its life.
const journalLockWait = 2 * time.Second

// openJournal opens the journal at prefix: it takes the journal's lock, applies what the
// files hold (a process that died left it) and empties them. With delay > 0 it keeps the
// lock and returns the journal, running; otherwise it releases the lock and returns nil.
// If another process holds the lock (for journalLockWait, when delay > 0) it returns nil:
// that process journals, this one appends directly.
func openJournal(ctx context.Context, s *Store, prefix string, delay time.Duration, log *slog.Logger) (*journal, error) {
	if delay <= 0 {
		_, err := recoverJournal(ctx, s, prefix, log)
		return nil, err
	}
	deadline := time.Now().Add(journalLockWait)
	for {
		j, err := lockJournal(ctx, s, prefix, delay, log)
		if err != nil {
			return nil, err
		}
		if j != nil {
			j.kick, j.urgent = make(chan struct{}, 1), make(chan struct{}, 1)
			j.stop, j.done = make(chan struct{}), make(chan struct{})
			go j.run()
			return j, nil
		}
		if time.Now().After(deadline) {
			return nil, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// recoverJournal applies what the journal at prefix holds and empties it, if no process
// holds its lock; held reports that one does.
func recoverJournal(ctx context.Context, s *Store, prefix string, log *slog.Logger) (held bool, err error) {
	// Nothing to do if no journal was ever written here.
	if _, err := os.Stat(prefix + "-0"); errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	j, err := lockJournal(ctx, s, prefix, 0, log)
	if err != nil || j == nil {
		return err == nil, err
	}
	j.closeFiles()
	return false, nil
}

// lockJournal opens the journal's files, takes its lock and recovers: nil if another
// process holds the lock.
func lockJournal(ctx context.Context, s *Store, prefix string, delay time.Duration, log *slog.Logger) (*journal, error) {
	j := &journal{s: s, delay: delay, log: log, next: map[string]jnext{}}
	j.settled = sync.NewCond(&j.mu)
	for i := range j.files {
		f, err := os.OpenFile(fmt.Sprintf("%s-%d", prefix, i), os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			j.closeFiles()
			return nil, fmt.Errorf("journal: %w", err)
		}
		j.files[i] = f
	}
	locked, err := tryLock(j.files[0])
	if err != nil || !locked {
		j.closeFiles()
		if err != nil {
			return nil, fmt.Errorf("journal: %w", err)
		}
		return nil, nil
	}
	if err := j.recover(ctx); err != nil {
		j.closeFiles()
		return nil, err
	}
	return j, nil
}

func (j *journal) closeFiles() {
	for _, f := range j.files {
		if f != nil {
			f.Close()
		}
	}
}

// recover applies the records the files hold, in the order they were appended, and
// truncates the files.
func (j *journal) recover(ctx context.Context) error {
	var recs []jrec
	for _, f := range j.files {
		data, err := io.ReadAll(io.NewSectionReader(f, 0, 1<<62))
		if err != nil {
			return fmt.Errorf("journal: %w", err)
		}
		recs = append(recs, decodeRecords(data)...)
	}
	if len(recs) > 0 {
		slices.SortStableFunc(recs, func(a, b jrec) int { return cmp.Compare(a.seq, b.seq) })
		if err := j.apply(ctx, recs); err != nil {
			return fmt.Errorf("journal: applying %d records left by a previous process: %w", len(recs), err)
		}
		j.log.Info("sqlstore: applied the appends a previous process left in its journal", slog.Int("records", len(recs)))
	}
	for i, f := range j.files {
		if err := f.Truncate(0); err != nil {
			return fmt.Errorf("journal: %w", err)
		}
		j.size[i] = 0
	}
	return nil
}

// count is the session's length: its records not yet in the database included. Called with
// mu held.
func (j *journal) count(ctx context.Context, session string) (int, error) {
	if n, ok := j.next[session]; ok {
		return n.n, nil
	}
	return j.s.count(ctx, session)
}

// append is Store.Append with write-behind.
func (j *journal) append(ctx context.Context, session string, at int, t time.Time, hashes, bodies [][]byte) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.broken != nil {
		return j.broken
	}
	n, err := j.count(ctx, session)
	if err != nil {
		return err
	}
	if n != at {
		return conflictAt(at, session, n)
	}
	if len(bodies) == 0 {
		return nil
	}
	r := jrec{seq: j.seq + 1, session: session, at: at, t: t.UnixNano(), hashes: hashes, bodies: bodies}
	j.buf = appendRecord(j.buf[:0], &r)
	if int64(len(j.buf))-8 > maxRecord {
		return fmt.Errorf("journal: an append of %d bytes is larger than a record may be", len(j.buf))
	}
	f := j.files[j.active]
	if _, err := f.Write(j.buf); err != nil {
		// A record written in part would end the file's reading at recovery, and the
		// records after it with it: cut it off.
		if terr := f.Truncate(j.size[j.active]); terr != nil {
			j.broken = fmt.Errorf("journal: a failed write could not be undone (%w) after: %w", terr, err)
		}
		return fmt.Errorf("journal: %w", err)
	}
	if cap(j.buf) > 1<<20 {
		j.buf = nil // a huge record's buffer is not kept
	}
	j.size[j.active] += int64(len(j.buf))
	j.seq = r.seq
	j.pending = append(j.pending, r)
	j.next[session] = jnext{n: at + len(bodies), seq: r.seq}
	select {
	case j.kick <- struct{}{}:
	default:
	}
	return nil
}

// settle waits until every record appended before the call is in the database. It returns
// the applier's error while applying fails.
func (j *journal) settle() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	target := j.seq
	for j.applied < target {
		if j.failure != nil {
			return j.failure
		}
		select {
		case j.urgent <- struct{}{}:
		default:
		}
		j.settled.Wait()
	}
	return nil
}

// run is the applier: it applies the pending records WriteBehind after the first of them
// (at once when a call settles), until close.
//
// An Append's kick and a settling call's urgent can both be pending when run looks, and a
// select takes either: when urgent is taken it applies at once. (It once waited WriteBehind
// then, for an urgent already consumed: a settling call waits for its wake-up without
// sending another, so each such call waited WriteBehind, and forever in tests that set it
// to an hour.)
func (j *journal) run() {
	defer close(j.done)
	for {
		select {
		case <-j.stop:
			j.mu.Lock()
			stuck := j.failure != nil
			j.mu.Unlock()
			if !stuck { // records after a batch that failed must not be applied before it
				j.flush(true)
			}
			return
		case <-j.kick:
			t := time.NewTimer(j.delay)
			select {
			case <-t.C:
			case <-j.urgent:
			case <-j.stop:
			}
			t.Stop()
		case <-j.urgent:
		}
		j.flush(false)
	}
}

// flush takes the pending records, swaps the files, and applies the records until that
// succeeds (or, when closing, once), then truncates their file.
func (j *journal) flush(closing bool) {
	j.mu.Lock()
	batch, from := j.pending, j.active
	j.pending = nil
	if len(batch) > 0 {
		j.active = 1 - j.active
	}
	j.mu.Unlock()
	if len(batch) == 0 {
		return
	}
	wait := 10 * time.Millisecond
	for {
		err := j.apply(context.Background(), batch)
		if err == nil {
			err = j.files[from].Truncate(0)
		}
		j.mu.Lock()
		if err == nil {
			j.size[from] = 0
			last := batch[len(batch)-1].seq
			j.applied = last
			for _, r := range batch {
				if n, ok := j.next[r.session]; ok && n.seq <= last {
					delete(j.next, r.session)
				}
			}
			j.failure = nil
			j.settled.Broadcast()
			j.mu.Unlock()
			return
		}
		j.failure = fmt.Errorf("journal: applying %d appends: %w", len(batch), err)
		j.settled.Broadcast()
		j.mu.Unlock()
		j.log.Error("sqlstore: applying journaled appends failed; they stay in the journal and are retried", slog.String("error", err.Error()))
		if closing {
			return // the files keep them: the next Open applies them
		}
		select {
		case <-time.After(wait):
		case <-j.stop:
			closing = true
		}
		wait = min(2*wait, time.Second)
	}
}

// apply writes records to the database, in one transaction when none fails its position
// check. Otherwise each record goes in its own: one that is already there (the process died
// between the commit and the truncation) is skipped, one that fails its check is dropped and
// logged, the others are applied.
func (j *journal) apply(ctx context.Context, recs []jrec) error {
	s := j.s
	err := s.tx(ctx, func(ctx context.Context, tx writer) error {
		for i := range recs {
			r := &recs[i]
			if err := s.appendRows(ctx, tx, r.session, r.at, time.Unix(0, r.t), r.hashes, r.bodies); err != nil {
				return err
			}
		}
		return nil
	})
	if !errors.Is(err, store.ErrConflict) {
		return err
	}
	for i := range recs {
		r := &recs[i]
		err := s.tx(ctx, func(ctx context.Context, tx writer) error {
			return s.appendRows(ctx, tx, r.session, r.at, time.Unix(0, r.t), r.hashes, r.bodies)
		})
		if !errors.Is(err, store.ErrConflict) {
			if err != nil {
				return err
			}
			continue
		}
		there, herr := j.holds(ctx, r)
		if herr != nil {
			return herr
		}
		if !there {
			j.mu.Lock()
			j.dropped++
			j.mu.Unlock()
			j.log.Error("sqlstore: a journaled append conflicts with what another writer stored; dropped",
				slog.String("session", r.session), slog.Int("at", r.at), slog.Int("messages", len(r.bodies)), slog.String("error", err.Error()))
		}
	}
	return nil
}

// holds reports whether the database holds r's messages at r's positions.
func (j *journal) holds(ctx context.Context, r *jrec) (bool, error) {
	rows, err := j.s.r.QueryContext(ctx, j.s.q.hashes, r.session, r.at, r.at+len(r.hashes))
	if err != nil {
		return false, err
	}
	defer rows.Close()
	i := 0
	for rows.Next() {
		var h []byte
		if err := rows.Scan(&h); err != nil {
			return false, err
		}
		if i >= len(r.hashes) || string(h) != string(r.hashes[i]) {
			return false, nil
		}
		i++
	}
	return i == len(r.hashes), rows.Err()
}

// close applies what is pending and stops the applier. Records that could not be applied
// stay in the files for the next Open.
func (j *journal) close() {
	close(j.stop)
	<-j.done
	j.closeFiles()
}

// Dropped is how many journaled appends were dropped because another writer had stored
// something else at their positions (see the journal's doc).
func (s *Store) Dropped() int {
	if s.j == nil {
		return 0
	}
	s.j.mu.Lock()
	defer s.j.mu.Unlock()
	return s.j.dropped
}

// Journaling reports whether this store's appends go through the journal (write-behind).
func (s *Store) Journaling() bool { return s.j != nil }

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// appendRecord appends r's encoding: payload length (uint32), CRC-32C of the payload
// (uint32), both little-endian, then the payload: seq, at, t, the session, the message count
// and each message's hash and body, integers as varints and byte strings length-prefixed.
func appendRecord(b []byte, r *jrec) []byte {
	start := len(b)
	b = append(b, 0, 0, 0, 0, 0, 0, 0, 0)
	b = binary.AppendUvarint(b, r.seq)
	b = binary.AppendUvarint(b, uint64(r.at))
	b = binary.AppendVarint(b, r.t)
	b = appendBytes(b, []byte(r.session))
	b = binary.AppendUvarint(b, uint64(len(r.bodies)))
	for i := range r.bodies {
		b = appendBytes(b, r.hashes[i])
		b = appendBytes(b, r.bodies[i])
	}
	payload := b[start+8:]
	binary.LittleEndian.PutUint32(b[start:], uint32(len(payload)))
	binary.LittleEndian.PutUint32(b[start+4:], crc32.Checksum(payload, castagnoli))
	return b
}

func appendBytes(b, s []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// maxRecord bounds a record's payload (its length is a uint32).
const maxRecord = 1<<32 - 1

// decodeRecords returns the records of a journal file, up to the first that is cut short,
// fails its checksum or does not parse.
func decodeRecords(data []byte) []jrec {
	var out []jrec
	for len(data) >= 8 {
		n := binary.LittleEndian.Uint32(data)
		sum := binary.LittleEndian.Uint32(data[4:])
		if uint64(len(data)-8) < uint64(n) {
			break
		}
		payload := data[8 : 8+n]
		if crc32.Checksum(payload, castagnoli) != sum {
			break
		}
		r, ok := decodePayload(payload)
		if !ok || !bytes.Equal(appendRecord(nil, &r)[8:], payload) { // encoded as we encode
			break
		}
		out = append(out, r)
		data = data[8+n:]
	}
	return out
}

func decodePayload(p []byte) (jrec, bool) {
	d := decoder{p: p}
	r := jrec{seq: d.uvarint()}
	at := d.uvarint()
	r.t = d.varint()
	r.session = string(d.bytes())
	count := d.uvarint()
	if d.bad || at > 1<<40 || count == 0 || count > uint64(len(d.p)) {
		return jrec{}, false
	}
	r.at = int(at)
	r.hashes, r.bodies = make([][]byte, count), make([][]byte, count)
	for i := range r.bodies {
		r.hashes[i] = d.bytes()
		r.bodies[i] = d.bytes()
	}
	if d.bad || len(d.p) != 0 || store.CheckID(r.session) != nil {
		return jrec{}, false
	}
	return r, true
}

type decoder struct {
	p   []byte
	bad bool
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.p)
	if n <= 0 {
		d.bad = true
		return 0
	}
	d.p = d.p[n:]
	return v
}

func (d *decoder) varint() int64 {
	v, n := binary.Varint(d.p)
	if n <= 0 {
		d.bad = true
		return 0
	}
	d.p = d.p[n:]
	return v
}

func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if d.bad || n > uint64(len(d.p)) {
		d.bad = true
		return nil
	}
	b := d.p[:n:n]
	d.p = d.p[n:]
	return b
}

// Package files is the file backend of store.Store: every session a directory of JSONL and
// JSON files in the layout of the systems ctxmgr learns from, readable with a text editor,
// durable (fsynced) when a call returns, and shareable by several processes on one directory
// (flock). See Store for the layout and the guarantees.
package files

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/store"
)

// Options configures a file store.
type Options struct {
	// Now is the store's clock: it dates archive files (in UTC), stamps session creation and
	// summaries stored without a Created time, and decides whether ReadOffload sees a result
	// as expired. Nil means time.Now.
	Now func() time.Time
}

// Store is the file store, in the seed systems' layout under one directory:
//
//	<dir>/sessions/<session>/messages.jsonl          full history, one JSON message a line
//	<dir>/sessions/<session>/summaries.jsonl         every summary version, one a line
//	<dir>/sessions/<session>/dialog/YYYY-MM-DD.jsonl archive of evicted messages:
//	    {"index":N,"time":"<RFC 3339>","session":"<id>","message":{...}} a line
//	<dir>/sessions/<session>/tool_result/<key>.txt   an offloaded result's full text
//	<dir>/sessions/<session>/tool_result/<key>.meta.json  its size and expiry
//	<dir>/sessions/<session>/session.json            the session's creation time
//	<dir>/sessions/<session>/events.jsonl            the pipeline's events, one a line
//	<dir>/sessions/<session>/config.json             the model and configuration snapshot
//	<dir>/sessions/<session>/.lock                   the lock file writers flock
//
// Directories are created 0700 and files 0600. Messages are stored as their json.Marshal
// encoding, which decodes to an equal chat.Message.
//
// Durability: when a writing method returns nil, what it wrote has been fsynced, file and
// (when it created a file or directory) the directory holding it, so it survives a crash of
// the process or the machine. JSONL files are only appended to (O_APPEND), one write per call;
// a line torn by a crash is ignored by readers and cut off by the next writer, so the files
// stay valid JSONL and nothing written before is lost. After a crash in the middle of an
// Append, the history holds a prefix of that call's messages (whole messages only);
// Append's compare-and-swap tells the caller where to continue. store.Offloaded texts are written
// to a temporary file, fsynced and renamed into place, so they are whole or absent.
//
// Concurrency: all methods are safe for concurrent use, and on Linux and the BSDs several
// processes (or several Files values) may share one directory: writers of a session hold an
// exclusive flock(2) on its lock file and re-read the files' lengths under it, so compare-and-
// swap, summary versions and archive idempotency hold across processes. Per-session state
// (message offsets, summary versions, archived positions) is kept in memory, loaded lazily
// from the files and caught up incrementally when another process has appended.
type Store struct {
	dir  string // absolute and clean
	root string // dir/sessions
	now  func() time.Time

	gate   sync.RWMutex // shared by every call in progress, exclusive for Close
	closed bool

	mu       sync.Mutex // guards sessions
	sessions map[string]*fileSession
}

// fileSession is the in-memory state of one session, guarded by mu.
type fileSession struct {
	mu  sync.Mutex
	id  string
	dir string

	dirReady bool // the session directory exists
	// dirFI and nonce (from session.json) identify the directory the state below was loaded
	// from: a directory pruned, and maybe recreated, by another Files value or process is a
	// new session. The nonce is needed because a new directory may reuse the inode number.
	dirFI   os.FileInfo
	nonce   string
	created time.Time // from session.json; zero until read or written

	msgSize int64  // bytes of messages.jsonl consumed (whole lines only)
	msgs    []span // where each message's line is

	sumSize int64
	sums    []store.Summary

	archSize map[string]int64 // dialog file name -> bytes consumed
	archived map[int]archRef  // position -> where its first archived copy is
}

type span struct{ off, n int64 }

type archRef struct {
	file string
	span
}

const (
	messagesFile  = "messages.jsonl"
	summariesFile = "summaries.jsonl"
	stateFile     = "state.json"
	eventsFile    = "events.jsonl"
	configFile    = "config.json"
	sessionFile   = "session.json"
	lockFile      = ".lock"
	dialogDir     = "dialog"
	toolResultDir = "tool_result"
	txtSuffix     = ".txt"
	metaSuffix    = ".meta.json"
	tmpPrefix     = ".tmp-"
)

var _ store.Store = (*Store)(nil)

// Open opens (creating it 0700 if needed) the file store in dir. Nothing is read until a
// session is used.
func Open(dir string, opts Options) (*Store, error) {
	if dir == "" {
		return nil, errors.New("store: empty directory")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	f := &Store{dir: abs, root: filepath.Join(abs, "sessions"), now: opts.Now, sessions: make(map[string]*fileSession)}
	if f.now == nil {
		f.now = time.Now
	}
	if err := mkdirSync(abs); err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	if err := mkdirSync(f.root); err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	return f, nil
}

// Dir returns the store's directory (absolute).
func (f *Store) Dir() string { return f.dir }

// begin validates the context and ids and enters the gate; on success the caller must call
// f.end.
func (f *Store) begin(ctx context.Context, ids ...string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	for _, id := range ids {
		if err := store.CheckID(id); err != nil {
			return err
		}
	}
	f.gate.RLock()
	if f.closed {
		f.gate.RUnlock()
		return store.ErrClosed
	}
	return nil
}

func (f *Store) end() { f.gate.RUnlock() }

// childPath joins a checked id (plus suffix) to parent and verifies, as a second line of
// defence behind store.CheckID, that the result is a direct child of parent.
func childPath(parent, id, suffix string) (string, error) {
	if err := store.CheckID(id); err != nil {
		return "", err
	}
	p := filepath.Join(parent, id+suffix)
	if filepath.Dir(p) != parent || !within(parent, p) {
		return "", fmt.Errorf("%w: %q leaves %s", store.ErrInvalidID, id, parent)
	}
	return p, nil
}

// within reports whether p lies strictly inside root (both clean).
func within(root, p string) bool {
	rel, err := filepath.Rel(root, p)
	if err != nil || rel == "." || filepath.IsAbs(rel) {
		return false
	}
	return rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// session returns the state of a session, creating it in memory (not on disk).
func (f *Store) session(id string) (*fileSession, error) {
	dir, err := childPath(f.root, id, "")
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.sessions[id]
	if s == nil {
		s = &fileSession{id: id, dir: dir, archSize: make(map[string]int64), archived: make(map[int]archRef)}
		f.sessions[id] = s
	}
	return s, nil
}

func (s *fileSession) path(name string) string { return filepath.Join(s.dir, name) }

// exists reports whether the session directory exists. When the directory is not the one
// the cached state was loaded from (it was pruned, and maybe recreated, by another Files value
// or process), the state is dropped first, so it is reloaded from what is on disk now.
func (s *fileSession) exists() (bool, error) {
	fi, nonce, err := s.identity()
	if errors.Is(err, fs.ErrNotExist) {
		if s.dirReady {
			s.reset()
		}
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if s.dirReady && !s.same(fi, nonce) {
		s.reset()
	}
	s.dirFI, s.nonce, s.dirReady = fi, nonce, true
	return true, nil
}

// identity returns the session directory's file info and the nonce of its session.json (""
// when there is none yet).
func (s *fileSession) identity() (os.FileInfo, string, error) {
	fi, err := os.Stat(s.dir)
	if err != nil {
		return nil, "", err
	}
	m, _ := readSessionFile(s)
	return fi, m.Nonce, nil
}

func (s *fileSession) same(fi os.FileInfo, nonce string) bool {
	return s.dirFI != nil && os.SameFile(s.dirFI, fi) && nonce == s.nonce
}

// reset forgets everything cached about the session, as if it had never been read.
func (s *fileSession) reset() {
	s.dirReady, s.dirFI, s.nonce, s.created = false, nil, "", time.Time{}
	s.msgSize, s.msgs = 0, nil
	s.sumSize, s.sums = 0, nil
	s.archSize, s.archived = make(map[string]int64), make(map[int]archRef)
}

// errGone: the session directory changed between exists and taking its lock (a prune by
// another Files value or process); the cached state has been reset.
var errGone = errors.New("store: session directory removed")

// lock takes the session's flock, exclusive or shared; the directory must exist. The
// returned function releases it.
func (s *fileSession) lock(ctx context.Context, exclusive bool) (func(), error) {
	fh, err := os.OpenFile(s.path(lockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if errors.Is(err, fs.ErrNotExist) { // the directory is gone
		s.reset()
		return nil, errGone
	}
	if err != nil {
		return nil, err
	}
	if err := lockFD(ctx, fh, exclusive); err != nil {
		fh.Close()
		return nil, err
	}
	// Prune renames a directory away under its exclusive lock: a lock taken on a directory
	// that is no longer the session's is worthless.
	if fi, nonce, err := s.identity(); err != nil || !s.same(fi, nonce) {
		fh.Close()
		s.reset()
		return nil, errGone
	}
	return func() { fh.Close() }, nil
}

// beginWrite creates the session directory if needed and takes the exclusive lock; the
// caller holds s.mu and must call the returned function.
func (f *Store) beginWrite(ctx context.Context, s *fileSession) (func(), error) {
	var unlock func()
	for attempt := 0; ; attempt++ {
		// A directory pruned since the caller's exists() shows when the lock is taken.
		if !s.dirReady {
			if err := mkdirSync(s.dir); err != nil {
				return nil, err
			}
			if _, err := s.exists(); err != nil {
				return nil, err
			}
		}
		var err error
		unlock, err = s.lock(ctx, true)
		if errors.Is(err, errGone) && attempt == 0 {
			continue // pruned meanwhile: start the session afresh
		}
		if err != nil {
			return nil, err
		}
		break
	}
	if s.created.IsZero() {
		if err := f.ensureSessionFile(s); err != nil {
			unlock()
			return nil, err
		}
	}
	return unlock, nil
}

type sessionMeta struct {
	ID      string    `json:"id"`
	Created time.Time `json:"created"`
	Nonce   string    `json:"nonce,omitempty"` // random, written once: tells incarnations of an id apart
}

// ensureSessionFile reads session.json, writing it first if it is missing or unreadable.
// The caller holds the exclusive lock.
func (f *Store) ensureSessionFile(s *fileSession) error {
	if m, err := readSessionFile(s); err == nil {
		s.created = m.Created
		return nil
	}
	m := sessionMeta{ID: s.id, Created: f.now().UTC(), Nonce: rand.Text()}
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if err := writeFileAtomic(s.dir, sessionFile, append(b, '\n')); err != nil {
		return err
	}
	if err := syncDir(s.dir); err != nil {
		return err
	}
	s.created, s.nonce = m.Created, m.Nonce
	return nil
}

func readSessionFile(s *fileSession) (sessionMeta, error) {
	var m sessionMeta
	b, err := os.ReadFile(s.path(sessionFile))
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, err
	}
	if m.Created.IsZero() {
		return m, errors.New("store: session.json without a creation time")
	}
	return m, nil
}

// catchUp brings state kept for the file at name up to date when the file's size differs
// from what has been consumed, under a shared lock (so that no writer is cutting a torn
// line meanwhile). The caller holds s.mu.
func (s *fileSession) catchUp(ctx context.Context, name string, consumed int64, refresh func(repair bool) error) error {
	fi, err := os.Stat(s.path(name))
	if errors.Is(err, fs.ErrNotExist) {
		if consumed != 0 {
			return fmt.Errorf("store: %s disappeared", s.path(name))
		}
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Size() == consumed {
		return nil
	}
	unlock, err := s.lock(ctx, false)
	if errors.Is(err, errGone) {
		return nil // pruned meanwhile: the state is reset, the session empty
	}
	if err != nil {
		return err
	}
	defer unlock()
	return refresh(false)
}

func (s *fileSession) refreshMessages(repair bool) error {
	return scanLines(s.path(messagesFile), &s.msgSize, repair, func(off int64, line []byte) error {
		s.msgs = append(s.msgs, span{off, int64(len(line))})
		return nil
	})
}

func (s *fileSession) refreshSummaries(repair bool) error {
	return scanLines(s.path(summariesFile), &s.sumSize, repair, func(off int64, line []byte) error {
		var sm store.Summary
		if err := json.Unmarshal(line, &sm); err != nil {
			return fmt.Errorf("store: %s at byte %d: %w", s.path(summariesFile), off, err)
		}
		s.sums = append(s.sums, sm)
		return nil
	})
}

// archiveLine is one line of a dialog file.
type archiveLine struct {
	Index   int          `json:"index"`
	Time    time.Time    `json:"time"`
	Session string       `json:"session"`
	Message chat.Message `json:"message"`
}

// isDialogFile reports whether name looks like YYYY-MM-DD.jsonl.
func isDialogFile(name string) bool {
	date, ok := strings.CutSuffix(name, ".jsonl")
	if !ok {
		return false
	}
	_, err := time.Parse("2006-01-02", date)
	return err == nil
}

func (s *fileSession) refreshArchive(repair bool) error {
	dir := s.path(dialogDir)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries { // sorted by name, so by date: the oldest copy of a position wins
		name := e.Name()
		if !e.Type().IsRegular() || !isDialogFile(name) {
			continue
		}
		size := s.archSize[name]
		err := scanLines(filepath.Join(dir, name), &size, repair, func(off int64, line []byte) error {
			var h struct {
				Index *int `json:"index"`
			}
			if err := json.Unmarshal(line, &h); err != nil || h.Index == nil || *h.Index < 0 {
				return fmt.Errorf("store: %s at byte %d: not an archive line", filepath.Join(dir, name), off)
			}
			if _, dup := s.archived[*h.Index]; !dup {
				s.archived[*h.Index] = archRef{name, span{off, int64(len(line))}}
			}
			return nil
		})
		s.archSize[name] = size
		if err != nil {
			return err
		}
	}
	return nil
}

// Append implements store.Store. The count check and the write happen under the session's
// exclusive lock, after re-reading the file's length, so concurrent writers (goroutines or
// processes) never lose or reorder messages: exactly one of two appends at the same `at`
// succeeds. When it returns nil the messages are fsynced. An empty msgs only checks `at`
// and creates nothing. A message that encoding/json cannot encode fails the call and
// nothing is stored.
func (f *Store) Append(ctx context.Context, session string, at int, msgs []chat.Message) error {
	buf, lens, err := encodeLines(len(msgs), func(i int) any { return &msgs[i] })
	if err != nil {
		return err
	}
	if err := f.begin(ctx, session); err != nil {
		return err
	}
	defer f.end()
	s, err := f.session(session)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(msgs) == 0 {
		if ok, err := s.exists(); err != nil {
			return err
		} else if ok {
			if err := s.catchUp(ctx, messagesFile, s.msgSize, s.refreshMessages); err != nil {
				return err
			}
		}
		if at != len(s.msgs) {
			return fmt.Errorf("%w: append at %d, session %q has %d messages", store.ErrConflict, at, session, len(s.msgs))
		}
		return nil
	}
	if ok, err := s.exists(); err != nil {
		return err
	} else if !ok && at != 0 { // do not create a session for a failing append
		return fmt.Errorf("%w: append at %d, session %q has no messages", store.ErrConflict, at, session)
	}
	unlock, err := f.beginWrite(ctx, s)
	if err != nil {
		return err
	}
	defer unlock()
	if err := s.refreshMessages(true); err != nil {
		return err
	}
	if at != len(s.msgs) {
		return fmt.Errorf("%w: append at %d, session %q has %d messages", store.ErrConflict, at, session, len(s.msgs))
	}
	if err := appendSync(s.path(messagesFile), buf, s.msgSize); err != nil {
		return err
	}
	off := s.msgSize
	for _, n := range lens {
		s.msgs = append(s.msgs, span{off, n})
		off += n + 1
	}
	s.msgSize = off
	return nil
}

// Messages implements store.Store. The range is clamped to the history: from < 0 counts as 0, to < 0
// or to > length as the length, and from >= to gives no messages. An unknown session has no
// messages (nil error). Messages appended by other processes are seen.
func (f *Store) Messages(ctx context.Context, session string, from, to int) ([]chat.Message, error) {
	if err := f.begin(ctx, session); err != nil {
		return nil, err
	}
	defer f.end()
	s, err := f.session(session)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if ok, err := s.exists(); err != nil || !ok {
		return nil, err
	}
	if err := s.catchUp(ctx, messagesFile, s.msgSize, s.refreshMessages); err != nil {
		return nil, err
	}
	from, to = store.Clamp(from, to, len(s.msgs))
	if from == to {
		return []chat.Message{}, nil
	}
	spans := s.msgs[from:to]
	buf, err := readRange(s.path(messagesFile), spans[0].off, spans[len(spans)-1].off+spans[len(spans)-1].n)
	if err != nil {
		return nil, err
	}
	out := make([]chat.Message, len(spans))
	for i, sp := range spans {
		line := buf[sp.off-spans[0].off : sp.off-spans[0].off+sp.n]
		if err := json.Unmarshal(line, &out[i]); err != nil {
			return nil, fmt.Errorf("store: %s message %d: %w", s.path(messagesFile), from+i, err)
		}
	}
	return out, nil
}

// Sessions implements Store: every session directory, sorted by id. Messages and store.Summary
// are the current counts; Created is when the session's first write happened (by the
// store's clock) and Updated the newest modification time of its files.
func (f *Store) Sessions(ctx context.Context) ([]store.SessionInfo, error) {
	if err := f.begin(ctx); err != nil {
		return nil, err
	}
	defer f.end()
	ids, err := f.sessionIDs()
	if err != nil {
		return nil, err
	}
	out := make([]store.SessionInfo, 0, len(ids))
	for _, id := range ids {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		info, ok, err := f.sessionInfo(ctx, id)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, info)
		}
	}
	return out, nil
}

// sessionIDs lists the valid session directory names, sorted.
func (f *Store) sessionIDs() ([]string, error) {
	entries, err := os.ReadDir(f.root)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, e := range entries {
		if e.IsDir() && store.CheckID(e.Name()) == nil {
			ids = append(ids, e.Name())
		}
	}
	return ids, nil
}

// sessionInfo describes a session; ok is false when its directory is gone (pruned meanwhile).
func (f *Store) sessionInfo(ctx context.Context, id string) (info store.SessionInfo, ok bool, err error) {
	s, err := f.session(id)
	if err != nil {
		return store.SessionInfo{}, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.info(ctx)
}

// info is sessionInfo for a caller holding s.mu.
func (s *fileSession) info(ctx context.Context) (store.SessionInfo, bool, error) {
	if ok, err := s.exists(); err != nil || !ok {
		return store.SessionInfo{}, false, err
	}
	if err := s.catchUp(ctx, messagesFile, s.msgSize, s.refreshMessages); err != nil {
		return store.SessionInfo{}, false, err
	}
	if err := s.catchUp(ctx, summariesFile, s.sumSize, s.refreshSummaries); err != nil {
		return store.SessionInfo{}, false, err
	}
	info := store.SessionInfo{ID: s.id, Messages: len(s.msgs)}
	if n := len(s.sums); n > 0 {
		info.Summary = s.sums[n-1].Version
	}
	var updated time.Time
	newest := func(p string) {
		if fi, err := os.Stat(p); err == nil && fi.ModTime().After(updated) {
			updated = fi.ModTime()
		}
	}
	for _, name := range []string{sessionFile, messagesFile, summariesFile, stateFile, configFile, toolResultDir} {
		newest(s.path(name))
	}
	if entries, err := os.ReadDir(s.path(dialogDir)); err == nil {
		for _, e := range entries {
			newest(filepath.Join(s.path(dialogDir), e.Name()))
		}
	}
	if s.created.IsZero() {
		if m, err := readSessionFile(s); err == nil {
			s.created = m.Created
		}
	}
	info.Created = s.created
	if info.Created.IsZero() { // session.json lost: the oldest evidence is the newest file
		info.Created = updated
	}
	info.Updated = updated
	if info.Updated.Before(info.Created) {
		info.Updated = info.Created
	}
	return info, true, nil
}

// PutSummary implements store.Store. The version check and the append happen under the session's
// exclusive lock, so exactly one of two writers of the same version succeeds, across
// processes too. A zero s.Created is set from the store's clock. Fsynced before it returns.
func (f *Store) PutSummary(ctx context.Context, session string, sum store.Summary) error {
	if err := f.begin(ctx, session); err != nil {
		return err
	}
	defer f.end()
	s, err := f.session(session)
	if err != nil {
		return err
	}
	if sum.Created.IsZero() {
		sum.Created = f.now()
	}
	buf, _, err := encodeLines(1, func(int) any { return sum })
	if err != nil {
		return err
	}
	var stored store.Summary
	if err := json.Unmarshal(buf, &stored); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if ok, err := s.exists(); err != nil {
		return err
	} else if !ok && sum.Version != 1 { // do not create a session for a failing put
		return fmt.Errorf("%w: summary version %d, session %q has none", store.ErrConflict, sum.Version, session)
	}
	unlock, err := f.beginWrite(ctx, s)
	if err != nil {
		return err
	}
	defer unlock()
	if err := s.refreshSummaries(true); err != nil {
		return err
	}
	latest := 0
	if n := len(s.sums); n > 0 {
		latest = s.sums[n-1].Version
	}
	if sum.Version != latest+1 {
		return fmt.Errorf("%w: summary version %d, session %q is at version %d", store.ErrConflict, sum.Version, session, latest)
	}
	if err := appendSync(s.path(summariesFile), buf, s.sumSize); err != nil {
		return err
	}
	s.sumSize += int64(len(buf))
	s.sums = append(s.sums, stored)
	return nil
}

// PutState implements Store: state.json in the session directory, replaced atomically (a
// fsynced temporary file renamed over it, then the directory fsynced).
func (f *Store) PutState(ctx context.Context, session string, state []byte) error {
	if err := f.begin(ctx, session); err != nil {
		return err
	}
	defer f.end()
	s, err := f.session(session)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	unlock, err := f.beginWrite(ctx, s)
	if err != nil {
		return err
	}
	defer unlock()
	if err := writeFileAtomic(s.dir, stateFile, state); err != nil {
		return err
	}
	return syncDir(s.dir)
}

// fileEvent is a line of events.jsonl.
type fileEvent struct {
	At   time.Time `json:"at"`
	Kind string    `json:"kind"`
	Body []byte    `json:"body"`
}

// AppendEvent implements Store: a line of events.jsonl in the session directory, appended and
// fsynced. An event's id is its line number (torn lines left by a crash are not counted).
func (f *Store) AppendEvent(ctx context.Context, session, kind string, body []byte) error {
	if err := f.begin(ctx, session); err != nil {
		return err
	}
	defer f.end()
	s, err := f.session(session)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	unlock, err := f.beginWrite(ctx, s)
	if err != nil {
		return err
	}
	defer unlock()
	line, err := json.Marshal(fileEvent{At: f.now(), Kind: kind, Body: body})
	if err != nil {
		return err
	}
	path := s.path(eventsFile)
	var size int64
	if fi, err := os.Stat(path); err == nil {
		size = fi.Size()
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	line = append(line, '\n')
	if size > 0 {
		// A line torn by a crash stays on its own, ignored by Events.
		if last, err := lastByte(path, size); err != nil {
			return err
		} else if last != '\n' {
			line = append([]byte{'\n'}, line...)
		}
	}
	return appendSync(path, line, size)
}

// lastByte returns the byte at size-1 of the file at path.
func lastByte(path string, size int64) (byte, error) {
	fh, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer fh.Close()
	var b [1]byte
	if _, err := fh.ReadAt(b[:], size-1); err != nil {
		return 0, err
	}
	return b[0], nil
}

// Events implements store.Store.
func (f *Store) Events(ctx context.Context, session string) ([]store.Event, error) {
	if err := f.begin(ctx, session); err != nil {
		return nil, err
	}
	defer f.end()
	s, err := f.session(session)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b, err := os.ReadFile(s.path(eventsFile))
	if errors.Is(err, fs.ErrNotExist) {
		return []store.Event{}, nil
	}
	if err != nil {
		return nil, err
	}
	out := []store.Event{}
	for _, l := range strings.Split(string(b), "\n") {
		var e fileEvent
		if l == "" || json.Unmarshal([]byte(l), &e) != nil {
			continue
		}
		out = append(out, store.Event{ID: int64(len(out) + 1), At: e.At, Kind: e.Kind, Body: e.Body})
	}
	return out, nil
}

// fileConfig is config.json.
type fileConfig struct {
	Model  string `json:"model"`
	Config []byte `json:"config"`
}

// PutConfig implements Store: config.json in the session directory, replaced atomically.
func (f *Store) PutConfig(ctx context.Context, session, model string, config []byte) error {
	if err := f.begin(ctx, session); err != nil {
		return err
	}
	defer f.end()
	s, err := f.session(session)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	unlock, err := f.beginWrite(ctx, s)
	if err != nil {
		return err
	}
	defer unlock()
	b, err := json.Marshal(fileConfig{Model: model, Config: config})
	if err != nil {
		return err
	}
	if err := writeFileAtomic(s.dir, configFile, b); err != nil {
		return err
	}
	return syncDir(s.dir)
}

// Config implements store.Store.
func (f *Store) Config(ctx context.Context, session string) (string, []byte, error) {
	if err := f.begin(ctx, session); err != nil {
		return "", nil, err
	}
	defer f.end()
	s, err := f.session(session)
	if err != nil {
		return "", nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b, err := os.ReadFile(s.path(configFile))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil, nil
	}
	if err != nil {
		return "", nil, err
	}
	var c fileConfig
	if err := json.Unmarshal(b, &c); err != nil {
		return "", nil, fmt.Errorf("store: %s: %w", s.path(configFile), err)
	}
	return c.Model, c.Config, nil
}

// State implements store.Store.
func (f *Store) State(ctx context.Context, session string) ([]byte, error) {
	if err := f.begin(ctx, session); err != nil {
		return nil, err
	}
	defer f.end()
	s, err := f.session(session)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b, err := os.ReadFile(s.path(stateFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	return b, err
}

// Summaries implements Store: every version, oldest first; none (nil error) for an unknown
// session.
func (f *Store) Summaries(ctx context.Context, session string) ([]store.Summary, error) {
	if err := f.begin(ctx, session); err != nil {
		return nil, err
	}
	defer f.end()
	s, err := f.session(session)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if ok, err := s.exists(); err != nil || !ok {
		return nil, err
	}
	if err := s.catchUp(ctx, summariesFile, s.sumSize, s.refreshSummaries); err != nil {
		return nil, err
	}
	return append([]store.Summary(nil), s.sums...), nil
}

// Archive implements store.Store. New positions are appended to dialog/YYYY-MM-DD.jsonl (today by
// the store's clock, UTC) and fsynced before it returns; positions already archived, in any
// dialog file, are skipped, under the session's exclusive lock, so retries and concurrent
// archivers never duplicate a position. first must not be negative. The location returned
// is the path of the dialog file that holds position first (the dialog directory when msgs
// is empty).
func (f *Store) Archive(ctx context.Context, session string, first int, msgs []chat.Message) (store.Location, error) {
	if first < 0 {
		return "", fmt.Errorf("store: archive at negative position %d", first)
	}
	if err := f.begin(ctx, session); err != nil {
		return "", err
	}
	defer f.end()
	s, err := f.session(session)
	if err != nil {
		return "", err
	}
	// Encode everything before touching the disk, so an unencodable message stores nothing.
	now := f.now().UTC()
	lines := make([]archiveLine, len(msgs))
	for i := range msgs {
		lines[i] = archiveLine{Index: first + i, Time: now, Session: session, Message: msgs[i]}
	}
	enc, lens, err := encodeLines(len(lines), func(i int) any { return &lines[i] })
	if err != nil {
		return "", err
	}
	ddir := s.path(dialogDir)
	if len(msgs) == 0 {
		return store.Location(ddir), nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	unlock, err := f.beginWrite(ctx, s)
	if err != nil {
		return "", err
	}
	defer unlock()
	if err := s.refreshArchive(true); err != nil {
		return "", err
	}
	// Keep the lines of positions not archived yet.
	var buf []byte
	var todo []int // indexes into lines
	pos := int64(0)
	for i, n := range lens {
		if _, ok := s.archived[first+i]; !ok {
			buf = append(buf, enc[pos:pos+n+1]...)
			todo = append(todo, i)
		}
		pos += n + 1
	}
	if len(todo) > 0 {
		if err := mkdirSync(ddir); err != nil {
			return "", err
		}
		name := now.Format("2006-01-02") + ".jsonl"
		if err := appendSync(filepath.Join(ddir, name), buf, s.archSize[name]); err != nil {
			return "", err
		}
		off := s.archSize[name]
		for _, i := range todo {
			s.archived[first+i] = archRef{name, span{off, lens[i]}}
			off += lens[i] + 1
		}
		s.archSize[name] = off
	}
	return store.Location(filepath.Join(ddir, s.archived[first].file)), nil
}

// ReadArchive implements Store: the archived messages with positions in [from, to), in
// position order (positions never archived are simply absent); none (nil error) for an
// unknown session or an empty range.
func (f *Store) ReadArchive(ctx context.Context, session string, from, to int) ([]store.Archived, error) {
	if err := f.begin(ctx, session); err != nil {
		return nil, err
	}
	defer f.end()
	s, err := f.session(session)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if ok, err := s.exists(); err != nil || !ok {
		return nil, err
	}
	unlock, err := s.lock(ctx, false)
	if err != nil {
		return nil, err
	}
	err = s.refreshArchive(false)
	unlock()
	if err != nil {
		return nil, err
	}
	var idx []int
	for i := range s.archived {
		if i >= from && (to < 0 || i < to) {
			idx = append(idx, i)
		}
	}
	sort.Ints(idx)
	out := make([]store.Archived, 0, len(idx))
	files := map[string]*os.File{}
	defer func() {
		for _, fh := range files {
			fh.Close()
		}
	}()
	for _, i := range idx {
		ref := s.archived[i]
		fh := files[ref.file]
		if fh == nil {
			if fh, err = os.Open(filepath.Join(s.path(dialogDir), ref.file)); err != nil {
				return nil, err
			}
			files[ref.file] = fh
		}
		line := make([]byte, ref.n)
		if _, err := fh.ReadAt(line, ref.off); err != nil {
			return nil, fmt.Errorf("store: %s: %w", fh.Name(), err)
		}
		var l archiveLine
		if err := json.Unmarshal(line, &l); err != nil {
			return nil, fmt.Errorf("store: %s at byte %d: %w", fh.Name(), ref.off, err)
		}
		out = append(out, store.Archived{Pos: i, Message: l.Message})
	}
	return out, nil
}

// offloadMeta is the sidecar <key>.meta.json of an offloaded result.
type offloadMeta struct {
	Key     string    `json:"key"`
	Bytes   int       `json:"bytes"`
	Lines   int       `json:"lines"`
	Expires time.Time `json:"expires"` // zero: never
	Created time.Time `json:"created"`
}

// offloadPaths returns the tool_result directory of the session in sdir and the text and
// meta paths of key.
func offloadPaths(sdir, key string) (dir, txt, meta string, err error) {
	dir = filepath.Join(sdir, toolResultDir)
	if txt, err = childPath(dir, key, txtSuffix); err != nil {
		return
	}
	meta, err = childPath(dir, key, metaSuffix)
	return
}

// readOffloaded describes a stored result; ok is false when its text does not exist. A text
// without a readable sidecar (a crash between the two renames cannot produce that, but a
// person can) never expires.
func readOffloaded(key, txt, meta string) (o store.Offloaded, ok bool, err error) {
	fi, err := os.Stat(txt)
	if errors.Is(err, fs.ErrNotExist) {
		return o, false, nil
	}
	if err != nil {
		return o, false, err
	}
	o = store.Offloaded{Key: key, Location: store.Location(txt), Bytes: int(fi.Size())}
	var m offloadMeta
	if b, err := os.ReadFile(meta); err == nil && json.Unmarshal(b, &m) == nil && m.Bytes == o.Bytes {
		o.Lines, o.Expires = m.Lines, m.Expires
		return o, true, nil
	}
	b, err := os.ReadFile(txt)
	if err != nil {
		return o, false, err
	}
	o.Bytes, o.Lines = len(b), store.CountLines(string(b))
	return o, true, nil
}

// Offload implements store.Store. The text is written to a temporary file, fsynced and renamed to
// tool_result/<key>.txt after its sidecar <key>.meta.json, so a reader sees the whole text or
// none. If key is stored and not expired, the stored result is kept and described; an expired
// key is replaced. Durable when it returns. The location is the text file's path.
func (f *Store) Offload(ctx context.Context, session, key, text string, expires time.Time) (store.Offloaded, error) {
	if err := f.begin(ctx, session, key); err != nil {
		return store.Offloaded{}, err
	}
	defer f.end()
	s, err := f.session(session)
	if err != nil {
		return store.Offloaded{}, err
	}
	dir, txt, meta, err := offloadPaths(s.dir, key)
	if err != nil {
		return store.Offloaded{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	unlock, err := f.beginWrite(ctx, s)
	if err != nil {
		return store.Offloaded{}, err
	}
	defer unlock()
	if err := mkdirSync(dir); err != nil {
		return store.Offloaded{}, err
	}
	now := f.now()
	old, ok, err := readOffloaded(key, txt, meta)
	if err != nil {
		return store.Offloaded{}, err
	}
	if ok {
		if !store.Expired(old.Expires, now) {
			return old, nil
		}
		// Replace an expired result: remove its text first, so that no reader ever pairs the
		// old text with the new expiry.
		if err := os.Remove(txt); err != nil {
			return store.Offloaded{}, err
		}
	}
	m := offloadMeta{Key: key, Bytes: len(text), Lines: store.CountLines(text), Expires: expires.Round(0), Created: now.UTC()}
	mb, err := json.Marshal(m)
	if err != nil {
		return store.Offloaded{}, err
	}
	if err := writeFileAtomic(dir, key+metaSuffix, append(mb, '\n')); err != nil {
		return store.Offloaded{}, err
	}
	if err := writeFileAtomic(dir, key+txtSuffix, []byte(text)); err != nil {
		return store.Offloaded{}, err
	}
	if err := syncDir(dir); err != nil {
		return store.Offloaded{}, err
	}
	return store.Offloaded{Key: key, Location: store.Location(txt), Bytes: m.Bytes, Lines: m.Lines, Expires: m.Expires}, nil
}

// ReadOffload implements store.Store. An unknown session or key is store.ErrNotFound; a result whose
// expiry (by the store's clock) has passed but that Cleanup has not removed yet is
// store.ErrExpired.
func (f *Store) ReadOffload(ctx context.Context, session, key string, fromLine, maxLines int) (string, int, error) {
	if err := f.begin(ctx, session, key); err != nil {
		return "", 0, err
	}
	defer f.end()
	sdir, err := childPath(f.root, session, "")
	if err != nil {
		return "", 0, err
	}
	_, txt, meta, err := offloadPaths(sdir, key)
	if err != nil {
		return "", 0, err
	}
	var m offloadMeta
	if b, err := os.ReadFile(meta); err == nil && json.Unmarshal(b, &m) == nil && store.Expired(m.Expires, f.now()) {
		return "", 0, fmt.Errorf("%w: offloaded result %q of session %q expired at %s", store.ErrExpired, key, session, m.Expires.Format(time.RFC3339))
	}
	b, err := os.ReadFile(txt)
	if errors.Is(err, fs.ErrNotExist) {
		return "", 0, fmt.Errorf("%w: offloaded result %q of session %q", store.ErrNotFound, key, session)
	}
	if err != nil {
		return "", 0, err
	}
	text, total := store.SplitLines(string(b), fromLine, maxLines)
	return text, total, nil
}

// Cleanup implements Store: it removes the text and sidecar of every offloaded result whose
// expiry lies before now and returns how many results it removed; it also removes sidecars
// without a text and temporary files left by crashes that are older than an hour.
func (f *Store) Cleanup(ctx context.Context, now time.Time) (int, error) {
	if err := f.begin(ctx); err != nil {
		return 0, err
	}
	defer f.end()
	ids, err := f.sessionIDs()
	if err != nil {
		return 0, err
	}
	total := 0
	for _, id := range ids {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		n, err := f.cleanupSession(ctx, id, now)
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

func (f *Store) cleanupSession(ctx context.Context, id string, now time.Time) (int, error) {
	s, err := f.session(id)
	if err != nil {
		return 0, err
	}
	dir := s.path(toolResultDir)
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if ok, err := s.exists(); err != nil || !ok {
		return 0, err
	}
	unlock, err := s.lock(ctx, true)
	if errors.Is(err, errGone) {
		return 0, nil // pruned meanwhile
	}
	if err != nil {
		return 0, err
	}
	defer unlock()
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	n, removed := 0, false
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, tmpPrefix) {
			if fi, err := e.Info(); err == nil && f.now().Sub(fi.ModTime()) > time.Hour {
				removed = os.Remove(filepath.Join(dir, name)) == nil || removed
			}
			continue
		}
		key, ok := strings.CutSuffix(name, metaSuffix)
		if !ok || store.CheckID(key) != nil {
			continue
		}
		_, txt, meta, err := offloadPaths(s.dir, key)
		if err != nil {
			continue
		}
		var m offloadMeta
		b, err := os.ReadFile(meta)
		if err != nil || json.Unmarshal(b, &m) != nil {
			continue
		}
		_, terr := os.Stat(txt)
		switch {
		case errors.Is(terr, fs.ErrNotExist): // orphan sidecar
			if store.Expired(m.Expires, now) {
				removed = os.Remove(meta) == nil || removed
			}
		case store.Expired(m.Expires, now):
			if err := os.Remove(txt); err != nil {
				return n, err
			}
			n, removed = n+1, true
			if err := os.Remove(meta); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return n, err
			}
		}
	}
	if removed {
		if err := syncDir(dir); err != nil {
			return n, err
		}
	}
	return n, nil
}

// Prune implements Pruner: it removes every session whose Updated (see Sessions: the newest
// modification time of its files) is before olderThan. Under the session's exclusive lock the
// age is checked again and the directory renamed to a hidden name in the sessions directory
// (session ids never start with a dot, so Sessions never lists it), and the rename fsynced;
// the renamed directory is then deleted. A crash in between leaves only a hidden directory,
// which the next Prune deletes. A writer of the session, in this process or another, either
// finishes before the rename (the session is then recent and kept) or finds the session gone
// afterwards and starts it afresh: an Append at a position other than 0 then fails with
// store.ErrConflict.
func (f *Store) Prune(ctx context.Context, olderThan time.Time, dryRun bool) ([]store.SessionInfo, error) {
	if err := f.begin(ctx); err != nil {
		return nil, err
	}
	defer f.end()
	if !dryRun {
		if err := f.removePruned(); err != nil {
			return nil, err
		}
	}
	ids, err := f.sessionIDs()
	if err != nil {
		return nil, err
	}
	out := []store.SessionInfo{}
	for _, id := range ids {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		info, ok, err := f.pruneSession(ctx, id, olderThan, dryRun)
		if err != nil {
			return out, err
		}
		if ok {
			out = append(out, info)
		}
	}
	return out, nil
}

const prunedPrefix = ".pruned-"

func (f *Store) pruneSession(ctx context.Context, id string, olderThan time.Time, dryRun bool) (store.SessionInfo, bool, error) {
	s, err := f.session(id)
	if err != nil {
		return store.SessionInfo{}, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	info, ok, err := s.info(ctx)
	if err != nil || !ok || !info.Updated.Before(olderThan) {
		return store.SessionInfo{}, false, err
	}
	if dryRun {
		return info, true, nil
	}
	unlock, err := s.lock(ctx, true)
	if errors.Is(err, errGone) {
		return store.SessionInfo{}, false, nil
	}
	if err != nil {
		return store.SessionInfo{}, false, err
	}
	// Another process may have written between the first look and the lock.
	if info, ok, err = s.info(ctx); err != nil || !ok || !info.Updated.Before(olderThan) {
		unlock()
		return store.SessionInfo{}, false, err
	}
	tomb := filepath.Join(f.root, fmt.Sprintf("%s%s-%d", prunedPrefix, id, time.Now().UnixNano()))
	err = os.Rename(s.dir, tomb)
	unlock()
	if err != nil {
		return store.SessionInfo{}, false, err
	}
	s.reset()
	if err := syncDir(f.root); err != nil {
		return store.SessionInfo{}, false, err
	}
	if err := os.RemoveAll(tomb); err != nil {
		return store.SessionInfo{}, false, err
	}
	return info, true, nil
}

// removePruned deletes what a Prune interrupted by a crash left behind.
func (f *Store) removePruned() error {
	entries, err := os.ReadDir(f.root)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prunedPrefix) {
			if err := os.RemoveAll(filepath.Join(f.root, e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}

// Close implements store.Store. It waits for calls in progress; later calls, Close included,
// return store.ErrClosed. Nothing needs flushing: every write was durable when it returned.
func (f *Store) Close() error {
	f.gate.Lock()
	defer f.gate.Unlock()
	if f.closed {
		return store.ErrClosed
	}
	f.closed = true
	f.mu.Lock()
	f.sessions = nil
	f.mu.Unlock()
	return nil
}

// encodeLines encodes n values, one json.Marshal encoding a line, and returns the bytes and
// each line's length without its newline. (json.Marshal, HTML escaping included, because
// raw JSON values decode to exactly the bytes they were stored as: the Marshal form is the
// one a round trip through encoding/json yields.)
func encodeLines(n int, value func(i int) any) ([]byte, []int64, error) {
	var buf []byte
	lens := make([]int64, n)
	for i := 0; i < n; i++ {
		b, err := json.Marshal(value(i))
		if err != nil {
			return nil, nil, fmt.Errorf("store: encode item %d: %w", i, err)
		}
		buf = append(append(buf, b...), '\n')
		lens[i] = int64(len(b))
	}
	return buf, lens, nil
}

// scanLines consumes the complete lines of the file at path after *consumed bytes, calling
// fn with each non-empty line's offset and bytes (newline excluded), and advances *consumed
// past each line fn accepted. An incomplete last line (a write torn by a crash, or one in
// progress) is never consumed; with repair, which requires the exclusive lock, it is cut
// off. A missing file has no lines.
func scanLines(path string, consumed *int64, repair bool, fn func(off int64, line []byte) error) error {
	flag := os.O_RDONLY
	if repair {
		flag = os.O_RDWR
	}
	fh, err := os.OpenFile(path, flag, 0)
	if errors.Is(err, fs.ErrNotExist) {
		if *consumed != 0 {
			return fmt.Errorf("store: %s disappeared", path)
		}
		return nil
	}
	if err != nil {
		return err
	}
	defer fh.Close()
	fi, err := fh.Stat()
	if err != nil {
		return err
	}
	size := fi.Size()
	if size < *consumed {
		return fmt.Errorf("store: %s shrank from %d to %d bytes", path, *consumed, size)
	}
	if size == *consumed {
		return nil
	}
	r := bufio.NewReaderSize(io.NewSectionReader(fh, *consumed, size-*consumed), 256<<10)
	off := *consumed
	for {
		line, err := r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) { // a long line: gather it whole
			long := append([]byte(nil), line...)
			for errors.Is(err, bufio.ErrBufferFull) {
				line, err = r.ReadSlice('\n')
				long = append(long, line...)
			}
			line = long
		}
		if err == io.EOF {
			if len(line) > 0 && repair {
				if err := fh.Truncate(off); err != nil {
					return err
				}
				return fh.Sync()
			}
			return nil
		}
		if err != nil {
			return err
		}
		if len(line) > 1 {
			if err := fn(off, line[:len(line)-1]); err != nil {
				return err
			}
		}
		off += int64(len(line))
		*consumed = off
	}
}

// appendSync appends data to the file at path in one O_APPEND write and fsyncs it (and its
// directory when it created the file). size is the file's length before the write, as the
// caller's exclusive lock guarantees; a failed write is cut back to it.
func appendSync(path string, data []byte, size int64) error {
	fh, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|os.O_EXCL, 0o600)
	created := err == nil
	if errors.Is(err, fs.ErrExist) {
		fh, err = os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	}
	if err != nil {
		return err
	}
	_, err = fh.Write(data)
	if err == nil {
		err = fh.Sync()
	}
	if err != nil {
		if fh.Truncate(size) == nil {
			fh.Sync()
		}
		fh.Close()
		return err
	}
	if err := fh.Close(); err != nil {
		return err
	}
	if created {
		return syncDir(filepath.Dir(path))
	}
	return nil
}

// writeFileAtomic writes data to dir/name through a fsynced temporary file and a rename; the
// caller syncs dir afterwards.
func writeFileAtomic(dir, name string, data []byte) error {
	tmp, err := os.CreateTemp(dir, tmpPrefix+"*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), filepath.Join(dir, name))
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}

// readRange reads bytes [from, to) of the file at path.
func readRange(path string, from, to int64) ([]byte, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	buf := make([]byte, to-from)
	if _, err := fh.ReadAt(buf, from); err != nil {
		return nil, fmt.Errorf("store: %s: %w", path, err)
	}
	return buf, nil
}

// mkdirSync creates dir (0700) if it does not exist, fsyncing its parent when it did.
func mkdirSync(dir string) error {
	err := os.Mkdir(dir, 0o700)
	if errors.Is(err, fs.ErrExist) {
		if fi, serr := os.Stat(dir); serr == nil && !fi.IsDir() {
			return fmt.Errorf("store: %s is not a directory", dir)
		}
		return nil
	}
	if errors.Is(err, fs.ErrNotExist) { // parent missing (only for the store's own dir)
		if err := mkdirSync(filepath.Dir(dir)); err != nil {
			return err
		}
		err = os.Mkdir(dir, 0o700)
		if errors.Is(err, fs.ErrExist) {
			return nil
		}
	}
	if err != nil {
		return err
	}
	return syncDir(filepath.Dir(dir))
}

// syncDir fsyncs a directory so that entries created or renamed in it are durable.
func syncDir(dir string) error {
	if runtime.GOOS == "windows" { // directories cannot be fsynced there
		return nil
	}
	fh, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = fh.Sync()
	if cerr := fh.Close(); err == nil {
		err = cerr
	}
	return err
}

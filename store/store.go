// Package store persists what ctxmgr must never lose: every session's full history, every
// summary version, the archive of evicted messages, and offloaded tool results.
//
// There is one Store interface and several implementations behind it (memory, files, and, in
// their own packages, SQLite and PostgreSQL); package storetest holds the one conformance suite
// that every implementation passes. Writes that a returned context depends on are durable
// (fsynced or committed) before the call returns.
package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ctxmgr/ctxmgr/chat"
)

// Errors callers branch on.
var (
	// ErrConflict: a compare-and-swap precondition failed (someone else appended or compacted
	// first). Reload and retry, or drop the change; nothing stored is lost either way.
	ErrConflict = errors.New("store: conflict")
	// ErrNotFound: no such session, summary, archive range or offloaded result.
	ErrNotFound = errors.New("store: not found")
	// ErrExpired: the offloaded result existed but its retention has ended.
	ErrExpired = errors.New("store: expired")
	// ErrInvalidID: a session id or key that cannot be stored safely (empty, too long, or with
	// characters that could leave the data directory).
	ErrInvalidID = errors.New("store: invalid id")
	// ErrClosed: the store has been closed.
	ErrClosed = errors.New("store: closed")
)

// Summary is one version of a session's compact summary. Versions start at 1 and are never
// overwritten: every version is kept.
type Summary struct {
	Version int `json:"version"`
	// Text is the summary as sent to the model (archive guide included).
	Text string `json:"text"`
	// From and To: the summary covers history[From:To] (To exclusive); From is 0 for a summary
	// that folds in its predecessor.
	From int `json:"from"`
	To   int `json:"to"`
	// Created is when the version was stored.
	Created time.Time `json:"created"`
	// Summarizer names what made it ("extractive", "llm:<model>", "extractive (fallback)").
	Summarizer string `json:"summarizer,omitempty"`
}

// Location says where something is stored, for a person or a tool that reads the store: a
// file path for the file store, a URI such as "sqlite:ctxmgr.db#session/x/archive" for
// databases. What the model reads names stored content by a store-independent ref instead
// (Offloaded.Ref; archived messages by position).
type Location string

// Offloaded describes one offloaded tool result.
type Offloaded struct {
	Key      string    `json:"key"`
	Location Location  `json:"location"`
	Bytes    int       `json:"bytes"`
	Lines    int       `json:"lines"`
	Expires  time.Time `json:"expires"` // zero: never
}

// RefPrefix begins the ref of every offloaded tool result.
const RefPrefix = "tool_result/"

// Ref is the name the model reads for an offloaded result: "tool_result/KEY", the same under
// every store and deployment (its Location is where this store keeps it). ReadOffload takes
// the Key: strings.TrimPrefix(ref, RefPrefix).
func (o Offloaded) Ref() string { return RefPrefix + o.Key }

// SessionInfo describes a stored session.
type SessionInfo struct {
	ID       string    `json:"id"`
	Created  time.Time `json:"created"`
	Updated  time.Time `json:"updated"`
	Messages int       `json:"messages"`
	Summary  int       `json:"summary_version"`
}

// Store is the persistence interface of ctxmgr. All methods are safe for concurrent use.
// Methods taking a session id or key return ErrInvalidID when CheckID rejects it, a canceled
// context's error when ctx is done, and ErrClosed after Close. Package storetest checks every
// statement here against each implementation.
type Store interface {
	// Append appends msgs to the session's history, which must currently hold exactly `at`
	// messages; otherwise it returns ErrConflict and stores nothing. The session is created by
	// its first append. Messages are stored verbatim: Messages returns them equal to what one
	// encoding/json round trip makes of them; a message encoding/json cannot encode fails the
	// call and nothing is stored. An empty msgs only checks `at` and creates nothing.
	Append(ctx context.Context, session string, at int, msgs []chat.Message) error
	// Messages returns history[from:to]; to < 0 means to the end. The range is clamped to the
	// history (from < 0 counts as 0, to past the end as the end, from >= to gives none); an
	// unknown session has no messages and no error.
	Messages(ctx context.Context, session string, from, to int) ([]chat.Message, error)
	// Sessions lists stored sessions: every session with any stored data, sorted by id.
	Sessions(ctx context.Context) ([]SessionInfo, error)

	// PutSummary stores a new summary version, which must be exactly the latest version + 1
	// (ErrConflict otherwise: another writer compacted first).
	PutSummary(ctx context.Context, session string, s Summary) error
	// Summaries returns every version, oldest first; none and no error for an unknown session.
	// A zero Summary.Created is set by PutSummary.
	Summaries(ctx context.Context, session string) ([]Summary, error)

	// Archive appends evicted messages, verbatim, with their history positions first,
	// first+1, ...; archiving the same position again is a no-op (idempotent retries). It
	// returns where the archive is. first must not be negative.
	Archive(ctx context.Context, session string, first int, msgs []chat.Message) (Location, error)
	// ReadArchive returns the archived messages with positions in [from, to) (to < 0: all),
	// each with its position, in position order; positions never archived are absent; an
	// unknown session has none and no error.
	ReadArchive(ctx context.Context, session string, from, to int) ([]Archived, error)

	// Offload stores a tool result's full text under key (a tool call id or similar); storing
	// the same key again keeps the first text (a re-truncation refers to the same result)
	// unless the first has expired, in which case it is replaced.
	Offload(ctx context.Context, session, key, text string, expires time.Time) (Offloaded, error)
	// ReadOffload returns lines [fromLine, fromLine+maxLines) (1-based; maxLines <= 0: to the
	// end) of an offloaded result and its total line count, as SplitLines numbers them. An
	// unknown session or key is ErrNotFound; a result whose expiry has passed is ErrExpired
	// until Cleanup removes it (ErrNotFound afterwards).
	ReadOffload(ctx context.Context, session, key string, fromLine, maxLines int) (text string, total int, err error)

	// PutState replaces the session's compaction state: an opaque JSON document the Manager
	// writes after every event that changes what is sent (which views are masked, offloaded or
	// truncated, and where the archives are), so that a restarted process rebuilds exactly the
	// same request. It is durable when PutState returns.
	PutState(ctx context.Context, session string, state []byte) error
	// State returns the latest state stored by PutState, or nil (and a nil error) if none.
	State(ctx context.Context, session string) ([]byte, error)

	// Cleanup removes offloaded results whose retention ended before now (Expires set and
	// before now) and returns how many.
	Cleanup(ctx context.Context, now time.Time) (int, error)
	// Prune deletes every session last updated before olderThan with all its data (history,
	// summaries, archive, offloaded results, state, events and configuration) and returns
	// what it deleted, sorted by id; with dryRun it deletes nothing and returns what it would
	// delete. A session updated at or after olderThan is kept; a pruned id used again starts a
	// new, empty session. It is the only way ctxmgr deletes history: nothing in the pipeline
	// ever does.
	Prune(ctx context.Context, olderThan time.Time, dryRun bool) ([]SessionInfo, error)

	// AppendEvent records an event for the session (creating the session if needed, without
	// making it newer): one of the Manager's pipeline events, which it writes for every step,
	// or the proxy's record of a request (kind "request"). Both are written best effort: a
	// failure is logged, never returned, because events are a record, not state.
	AppendEvent(ctx context.Context, session, kind string, body []byte) error
	// Events returns the session's events in the order they were recorded, with increasing
	// ids; none for an unknown session.
	Events(ctx context.Context, session string) ([]Event, error)

	// PutConfig records, next to the session (creating it if needed), the model it is managed
	// for and a snapshot of its configuration (JSON), for operators; Config returns them as
	// stored (empty and nil if none).
	PutConfig(ctx context.Context, session, model string, config []byte) error
	Config(ctx context.Context, session string) (model string, config []byte, err error)

	// Close releases resources. Later calls return ErrClosed.
	Close() error
}

// Archived is an archived message with its history position.
type Archived struct {
	Pos     int
	Message chat.Message
}

// Event is one recorded pipeline event.
type Event struct {
	ID   int64     `json:"id"`
	At   time.Time `json:"at"`
	Kind string    `json:"kind"`
	Body []byte    `json:"body"`
}

// Expired reports whether an offloaded result with expiry expires has expired at now: expires
// is set and lies before now. Every backend uses this rule for Offload, ReadOffload and
// Cleanup.
func Expired(expires, now time.Time) bool {
	return !expires.IsZero() && expires.Before(now)
}

// Clamp clamps the range [from, to) to a history of n messages as Messages does: to < 0 or
// past the end means the end, from < 0 means 0, and from past to gives the empty range.
func Clamp(from, to, n int) (int, int) {
	if to < 0 || to > n {
		to = n
	}
	if from < 0 {
		from = 0
	}
	if from > to {
		from = to
	}
	return from, to
}

// Normalized returns the summary as a persistent backend returns it: one encoding/json round
// trip (what every backend's Summaries gives back).
func (s Summary) Normalized() (Summary, error) {
	b, err := json.Marshal(s)
	if err != nil {
		return Summary{}, fmt.Errorf("store: encode summary: %w", err)
	}
	var out Summary
	if err := json.Unmarshal(b, &out); err != nil {
		return Summary{}, fmt.Errorf("store: decode summary: %w", err)
	}
	return out, nil
}

// MaxIDLen bounds session ids and keys.
const MaxIDLen = 200

// CheckID validates a session id or key: non-empty, at most MaxIDLen bytes, and made only of
// ASCII letters, digits and "-_.:@=+" without a leading dot, so that it can never name a path
// outside the data directory on any backend.
func CheckID(id string) error {
	if id == "" || len(id) > MaxIDLen || id[0] == '.' {
		return fmt.Errorf("%w: %q", ErrInvalidID, id)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("-_.:@=+", c) >= 0:
		default:
			return fmt.Errorf("%w: %q", ErrInvalidID, id)
		}
	}
	return nil
}

// SplitLines returns lines [fromLine, fromLine+maxLines) of text (1-based) and the total line
// count; a trailing newline does not start a new line. Backends share it so that line
// numbering is the same everywhere.
func SplitLines(text string, fromLine, maxLines int) (string, int) {
	total := CountLines(text)
	if fromLine < 1 {
		fromLine = 1
	}
	if fromLine > total {
		return "", total
	}
	start := 0
	for line := 1; line < fromLine; line++ {
		start += strings.IndexByte(text[start:], '\n') + 1
	}
	end := len(text)
	if maxLines > 0 {
		pos := start
		for n := 0; n < maxLines; n++ {
			i := strings.IndexByte(text[pos:], '\n')
			if i < 0 {
				pos = len(text)
				break
			}
			pos += i + 1
		}
		end = pos
	}
	return text[start:end], total
}

// CountLines counts lines the way SplitLines numbers them.
func CountLines(text string) int {
	if text == "" {
		return 0
	}
	n := strings.Count(text, "\n")
	if !strings.HasSuffix(text, "\n") {
		n++
	}
	return n
}

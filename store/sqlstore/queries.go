package sqlstore

import (
	"database/sql"
	"fmt"
	"time"
)

// queries holds the store's statements, written once with ? placeholders and rewritten for
// the dialect when the store opens.
type queries struct {
	recordMigration string

	touch, ensure, touchUpdated string
	count, insertMessage        string
	appendBatch                 string
	messages, sessions          string
	hashes                      string

	latestSummary, insertSummary, summaries string

	archive, archiveBatch, readArchive string

	offload, offloadInfo, readOffload, cleanup string

	putState, state, putConfig, config string
	appendEvent, events                string

	lockOld, old  string
	deleteSession []string
}

// sessionInfo selects a store.SessionInfo per session (scanInfos reads it). A session's
// updated time is the later of its row's and its newest message's: an append stamps its
// messages (messages.at) instead of touching the session's row, a page less in every commit.
// Rows stored before messages had a time (schema version 3) count with the session's.
func sessionInfo(d *Dialect) string {
	return `SELECT s.id, s.created, ` + lastWrite(d) + `,
	COALESCE((SELECT MAX(m.pos) + 1 FROM messages m WHERE m.session = s.id), 0),
	COALESCE((SELECT MAX(u.version) FROM summaries u WHERE u.session = s.id), 0)
	FROM sessions s`
}

// lastWrite is the expression of a session's updated time (see sessionInfo), for "sessions s".
func lastWrite(d *Dialect) string {
	return d.greatest("s.updated",
		"COALESCE((SELECT m.at FROM messages m WHERE m.session = s.id ORDER BY m.pos DESC LIMIT 1), s.updated)")
}

func newQueries(d *Dialect) queries {
	newer := d.greatest("sessions.updated", "excluded.updated")
	q := queries{
		recordMigration: `INSERT INTO schema_migrations (version, applied) VALUES (?, ?)`,

		touch: `INSERT INTO sessions (id, created, updated) VALUES (?, ?, ?)
			ON CONFLICT (id) DO UPDATE SET updated = ` + newer,
		ensure:       `INSERT INTO sessions (id, created, updated) VALUES (?, ?, ?) ON CONFLICT (id) DO NOTHING`,
		touchUpdated: `UPDATE sessions SET updated = ` + d.greatest("updated", "?") + ` WHERE id = ?`,

		count:         `SELECT COALESCE(MAX(pos) + 1, 0) FROM messages WHERE session = ?`,
		insertMessage: `INSERT INTO messages (session, pos, hash, body, at) VALUES (?, ?, ?, ?, ?)`,
		appendBatch:   d.AppendBatch,
		messages:      `SELECT body FROM messages WHERE session = ? AND pos >= ? AND pos < ? ORDER BY pos`,
		sessions:      sessionInfo(d) + ` ORDER BY s.id`,
		hashes:        `SELECT hash FROM messages WHERE session = ? AND pos >= ? AND pos < ? ORDER BY pos`,

		latestSummary: `SELECT COALESCE(MAX(version), 0) FROM summaries WHERE session = ?`,
		insertSummary: `INSERT INTO summaries (session, version, text, from_pos, to_pos, created, summarizer)
			VALUES (?, ?, ?, ?, ?, ?, ?)`,
		summaries: `SELECT version, text, from_pos, to_pos, created, summarizer
			FROM summaries WHERE session = ? ORDER BY version`,

		archive: `INSERT INTO archive (session, pos, body, archived_at) VALUES (?, ?, ?, ?)
			ON CONFLICT (session, pos) DO NOTHING`,
		archiveBatch: d.ArchiveBatch,
		readArchive:  `SELECT pos, body FROM archive WHERE session = ? AND pos >= ? AND pos < ? ORDER BY pos`,

		// The upsert replaces a stored result only when it has expired (the last argument is
		// now, as formatExpires writes it); otherwise it changes no row.
		offload: `INSERT INTO offloads (session, key, text, bytes, lines, expires, created)
			VALUES (?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (session, key) DO UPDATE SET text = excluded.text, bytes = excluded.bytes,
				lines = excluded.lines, expires = excluded.expires, created = excluded.created
			WHERE offloads.expires IS NOT NULL AND offloads.expires < ?`,
		offloadInfo: `SELECT bytes, lines, expires FROM offloads WHERE session = ? AND key = ?`,
		readOffload: `SELECT text, expires FROM offloads WHERE session = ? AND key = ?`,
		cleanup:     `DELETE FROM offloads WHERE expires IS NOT NULL AND expires < ?`,

		putState: `INSERT INTO states (session, state) VALUES (?, ?)
			ON CONFLICT (session) DO UPDATE SET state = excluded.state`,
		state: `SELECT state FROM states WHERE session = ?`,
		putConfig: `INSERT INTO sessions (id, created, updated, model, config) VALUES (?, ?, ?, ?, ?)
			ON CONFLICT (id) DO UPDATE SET updated = ` + newer + `, model = excluded.model, config = excluded.config`,
		config: `SELECT model, config FROM sessions WHERE id = ?`,

		appendEvent: `INSERT INTO events (session, at, kind, body) VALUES (?, ?, ?, ?)`,
		events:      `SELECT id, at, kind, body FROM events WHERE session = ? ORDER BY id`,

		// The row's updated first: a session's updated is at least its row's, and most
		// sessions are then passed over without looking up their newest message.
		old: sessionInfo(d) + ` WHERE s.updated < ? AND ` + lastWrite(d) + ` < ? ORDER BY s.id`,
	}
	if d.LockRows != "" {
		// Every session old selects has its row's updated before the cut too (its updated is
		// at least the row's): locking these is locking at least those.
		q.lockOld = `SELECT id FROM sessions WHERE updated < ? ORDER BY id` + d.LockRows
	}
	for _, table := range []string{"messages", "summaries", "archive", "offloads", "events", "states"} {
		q.deleteSession = append(q.deleteSession, `DELETE FROM `+table+` WHERE session = ?`)
	}
	q.deleteSession = append(q.deleteSession, `DELETE FROM sessions WHERE id = ?`)

	for _, p := range []*string{&q.recordMigration, &q.touch, &q.ensure, &q.touchUpdated, &q.count,
		&q.insertMessage, &q.appendBatch, &q.messages, &q.sessions, &q.hashes, &q.latestSummary, &q.insertSummary,
		&q.summaries, &q.archive, &q.archiveBatch, &q.readArchive, &q.offload, &q.offloadInfo,
		&q.readOffload, &q.cleanup, &q.putState, &q.state, &q.putConfig, &q.config, &q.appendEvent,
		&q.events, &q.lockOld, &q.old} {
		*p = d.rebind(*p)
	}
	for i := range q.deleteSession {
		q.deleteSession[i] = d.rebind(q.deleteSession[i])
	}
	return q
}

// timeScan reads a stored time: Unix nanoseconds (an integer column) or a time (a timestamp
// column).
type timeScan time.Time

// Scan implements sql.Scanner.
func (t *timeScan) Scan(v any) error {
	switch v := v.(type) {
	case int64:
		*t = timeScan(time.Unix(0, v))
	case time.Time:
		*t = timeScan(v)
	default:
		return fmt.Errorf("stored time: unexpected %T", v)
	}
	return nil
}

// expiresLayout formats expiry times so that they compare as text (both schemas keep expires
// as TEXT, PostgreSQL's with COLLATE "C").
const expiresLayout = "2006-01-02T15:04:05.000000000Z"

var (
	minExpires = time.Date(1, 1, 1, 0, 0, 0, 1, time.UTC)
	maxExpires = time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC)
)

// formatExpires returns the stored form of an expiry: NULL for never, else fixed-width UTC
// (clamped to years 1-9999).
func formatExpires(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return clampExpires(t)
}

func clampExpires(t time.Time) string {
	t = t.UTC()
	if t.Before(minExpires) {
		t = minExpires
	}
	if t.After(maxExpires) {
		t = maxExpires
	}
	return t.Format(expiresLayout)
}

// nowText is now in the stored form of expiry times, for comparisons.
func nowText(now time.Time) string {
	if now.IsZero() {
		return minExpires.Format(expiresLayout)
	}
	return clampExpires(now)
}

func parseExpires(v sql.NullString) (time.Time, error) {
	if !v.Valid {
		return time.Time{}, nil
	}
	return time.Parse(expiresLayout, v.String)
}

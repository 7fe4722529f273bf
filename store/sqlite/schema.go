package sqlite

// migrations is the schema, one entry per version (version i+1 is migrations[i]). Open applies
// those a database has not seen yet, each in its own transaction that also records it in
// schema_migrations. Entries are never edited once released: a schema change is a new entry.
//
// Column notes:
//   - Times that must come back exactly (summary creation, offload expiry) are TEXT: created
//     is RFC 3339 with nanoseconds and the writer's zone; expires is fixed-width UTC
//     ("2006-01-02T15:04:05.000000000Z"), so that it sorts and compares as text, NULL for never.
//     Session times are Unix nanoseconds.
//   - Message and archive bodies are the json.Marshal encoding of chat.Message, verbatim; hash
//     is chat.Message.Hash of the message.
//   - Summary and offloaded texts are BLOBs: they are stored byte for byte, NULs included.
var migrations = []string{
	// 1: the initial schema.
	`
CREATE TABLE sessions (
	id      TEXT PRIMARY KEY NOT NULL,
	created INTEGER NOT NULL,
	updated INTEGER NOT NULL,
	model   TEXT NOT NULL DEFAULT '',
	config  TEXT,
	state   BLOB
);
CREATE INDEX sessions_updated ON sessions (updated);

CREATE TABLE messages (
	session TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	pos     INTEGER NOT NULL,
	hash    BLOB NOT NULL,
	body    TEXT NOT NULL,
	PRIMARY KEY (session, pos)
);

CREATE TABLE summaries (
	session    TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	version    INTEGER NOT NULL,
	text       BLOB NOT NULL,
	from_pos   INTEGER NOT NULL,
	to_pos     INTEGER NOT NULL,
	created    TEXT NOT NULL,
	summarizer TEXT NOT NULL DEFAULT '',
	PRIMARY KEY (session, version)
);

CREATE TABLE archive (
	session     TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	pos         INTEGER NOT NULL,
	body        TEXT NOT NULL,
	archived_at INTEGER NOT NULL,
	PRIMARY KEY (session, pos)
);

CREATE TABLE offloads (
	session TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	key     TEXT NOT NULL,
	text    BLOB NOT NULL,
	bytes   INTEGER NOT NULL,
	lines   INTEGER NOT NULL,
	expires TEXT,
	created INTEGER NOT NULL,
	PRIMARY KEY (session, key)
);
CREATE INDEX offloads_expires ON offloads (expires) WHERE expires IS NOT NULL;

CREATE TABLE events (
	id      INTEGER PRIMARY KEY AUTOINCREMENT,
	session TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	at      INTEGER NOT NULL,
	kind    TEXT NOT NULL,
	body    TEXT NOT NULL
);
CREATE INDEX events_session ON events (session, id);
`,
	// 2: the compaction state in a table of its own. In the sessions row, every append's
	// touch of updated re-read and re-wrote the state's overflow pages (a long session's
	// state is tens of KB), so an append cost more as the session grew. And no index on
	// updated: every append moved its entry (a page more in each commit, about 10% of an
	// append), for the one query that reads it, prune, which scans the sessions rows (small
	// now that the state is out of them) as fast.
	`
CREATE TABLE states (
	session TEXT PRIMARY KEY NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	state   BLOB NOT NULL
);
INSERT INTO states (session, state) SELECT id, state FROM sessions WHERE state IS NOT NULL;
ALTER TABLE sessions DROP COLUMN state;
DROP INDEX sessions_updated;
`,
	// 3: each message stamped with the time it was appended (Unix nanoseconds). A session's
	// updated time is the later of its row's and its newest message's, so that an append
	// writes its messages and not the session's row too (a page less in every commit; the
	// row is still written when the session is created and by every other write). Rows of
	// earlier versions keep NULL and count with the session's time.
	`
ALTER TABLE messages ADD COLUMN at INTEGER;
`,
}

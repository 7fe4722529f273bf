package postgres

// migrations is the schema, one entry per version (version i+1 is migrations[i]), the same
// tables as the SQLite store's. Open applies those the database has not recorded in
// schema_migrations yet, all in one transaction under an advisory lock, so that several
// instances starting together migrate once. Entries are never edited once released: a schema
// change is a new entry.
//
// Column notes:
//   - Ids and keys are COLLATE "C", so that they sort as bytes (as Go sorts them) whatever the
//     database's collation.
//   - Times that must come back exactly (summary creation, offload expiry) are TEXT, as in the
//     SQLite store: created is RFC 3339 with nanoseconds and the writer's zone; expires is
//     fixed-width UTC ("2006-01-02T15:04:05.000000000Z", COLLATE "C" so that it compares as
//     text), NULL for never. Session, archive and event times are TIMESTAMPTZ.
//   - Message and archive bodies are the json.Marshal encoding of chat.Message, verbatim, as
//     BYTEA: TEXT would refuse the (rare) invalid UTF-8 a raw JSON value may carry. hash is
//     chat.Message.Hash of the message. Summary and offloaded texts are BYTEA too: TEXT
//     cannot hold NUL bytes.
var migrations = []string{
	// 1: the initial schema.
	`
CREATE TABLE sessions (
	id      TEXT COLLATE "C" PRIMARY KEY,
	created TIMESTAMPTZ NOT NULL,
	updated TIMESTAMPTZ NOT NULL,
	model   TEXT NOT NULL DEFAULT '',
	config  TEXT,
	state   BYTEA
);
CREATE INDEX sessions_updated ON sessions (updated);

CREATE TABLE messages (
	session TEXT COLLATE "C" NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	pos     BIGINT NOT NULL,
	hash    BYTEA NOT NULL,
	body    BYTEA NOT NULL,
	PRIMARY KEY (session, pos)
);

CREATE TABLE summaries (
	session    TEXT COLLATE "C" NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	version    INTEGER NOT NULL,
	text       BYTEA NOT NULL,
	from_pos   BIGINT NOT NULL,
	to_pos     BIGINT NOT NULL,
	created    TEXT NOT NULL,
	summarizer TEXT NOT NULL DEFAULT '',
	PRIMARY KEY (session, version)
);

CREATE TABLE archive (
	session     TEXT COLLATE "C" NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	pos         BIGINT NOT NULL,
	body        BYTEA NOT NULL,
	archived_at TIMESTAMPTZ NOT NULL,
	PRIMARY KEY (session, pos)
);

CREATE TABLE offloads (
	session TEXT COLLATE "C" NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	key     TEXT COLLATE "C" NOT NULL,
	text    BYTEA NOT NULL,
	bytes   BIGINT NOT NULL,
	lines   BIGINT NOT NULL,
	expires TEXT COLLATE "C",
	created TIMESTAMPTZ NOT NULL,
	PRIMARY KEY (session, key)
);
CREATE INDEX offloads_expires ON offloads (expires) WHERE expires IS NOT NULL;

CREATE TABLE events (
	id      BIGSERIAL PRIMARY KEY,
	session TEXT COLLATE "C" NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	at      TIMESTAMPTZ NOT NULL,
	kind    TEXT NOT NULL,
	body    BYTEA NOT NULL
);
CREATE INDEX events_session ON events (session, id);
`,
	// 2: the compaction state in a table of its own, as in the SQLite store (where every
	// append's touch of sessions.updated re-wrote the state with the row). Here a large state
	// is TOASTed and an update of another column keeps it, but the two stores share their
	// statements.
	`
CREATE TABLE states (
	session TEXT COLLATE "C" PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
	state   BYTEA NOT NULL
);
INSERT INTO states (session, state) SELECT id, state FROM sessions WHERE state IS NOT NULL;
ALTER TABLE sessions DROP COLUMN state;
`,
	// 3: each message stamped with the time it was appended, as in the SQLite store, whose
	// appends then need not write the session's row; the two stores share their statements.
	// Rows of earlier versions keep NULL and count with the session's time.
	`
ALTER TABLE messages ADD COLUMN at TIMESTAMPTZ;
`,
}

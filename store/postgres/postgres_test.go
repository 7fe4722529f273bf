package postgres_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/store"
	"github.com/ctxmgr/ctxmgr/store/postgres"
	"github.com/ctxmgr/ctxmgr/store/storetest"
)

// envURL names the database the tests use, e.g.
// postgres://postgres@127.0.0.1:5432/test?sslmode=disable. Without it they skip.
const envURL = "CTXMGR_TEST_POSTGRES"

func testURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv(envURL)
	if u == "" {
		t.Skipf("PostgreSQL tests skipped: set %s to a database URL (e.g. postgres://postgres@127.0.0.1:5432/test?sslmode=disable) to run them", envURL)
	}
	return u
}

// newSchema returns a fresh schema name and drops the schema when the test ends.
func newSchema(t testing.TB, url string) string {
	t.Helper()
	b := make([]byte, 6)
	rand.Read(b)
	schema := "ctxmgr_test_" + hex.EncodeToString(b)
	t.Cleanup(func() { dropSchema(t, url, schema) })
	return schema
}

func dropSchema(t testing.TB, url, schema string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Errorf("drop schema %s: %v", schema, err)
		return
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`); err != nil {
		t.Errorf("drop schema %s: %v", schema, err)
	}
}

func openSchema(t testing.TB, url, schema string, opts postgres.Options) *postgres.Store {
	t.Helper()
	opts.Schema = schema
	s, err := postgres.Open(context.Background(), url, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

// open opens a store on a fresh schema that the test drops at its end.
func open(t testing.TB, opts postgres.Options) *postgres.Store {
	t.Helper()
	url := testURL(t)
	s := openSchema(t, url, newSchema(t, url), opts)
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	url := testURL(t)
	storetest.RunReopen(t,
		func(t *testing.T) store.Store {
			return openSchema(t, url, newSchema(t, url), postgres.Options{})
		},
		func(t *testing.T, old store.Store) store.Store {
			return openSchema(t, url, old.(*postgres.Store).Schema(), postgres.Options{})
		})
}

func texts(prefix string, n int) []chat.Message {
	out := make([]chat.Message, n)
	for i := range out {
		out[i] = chat.TextMessage(chat.RoleUser, fmt.Sprintf("%s %d", prefix, i))
	}
	return out
}

// fakeClock is a settable clock for Options.Now.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

func TestSchema(t *testing.T) {
	ctx := context.Background()
	url := testURL(t)
	schema := newSchema(t, url)
	// Instances starting together migrate once.
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := postgres.Open(ctx, url, postgres.Options{Schema: schema})
			if err != nil {
				errs <- err
				return
			}
			s.Close()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent Open: %v", err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var rows, latest int
	if err := conn.QueryRow(ctx, `SELECT COUNT(*), MAX(version) FROM `+pgx.Identifier{schema, "schema_migrations"}.Sanitize()).Scan(&rows, &latest); err != nil {
		t.Fatal(err)
	}
	if rows != postgres.SchemaVersion() || latest != postgres.SchemaVersion() {
		t.Fatalf("schema_migrations: %d rows, latest %d; want %d", rows, latest, postgres.SchemaVersion())
	}
	if _, err := conn.Exec(ctx, `INSERT INTO `+pgx.Identifier{schema, "schema_migrations"}.Sanitize()+` (version, applied) VALUES ($1, now())`, postgres.SchemaVersion()+1); err != nil {
		t.Fatal(err)
	}
	if s, err := postgres.Open(ctx, url, postgres.Options{Schema: schema}); err == nil {
		s.Close()
		t.Fatal("Open of a database with a newer schema succeeded")
	}
	if _, err := postgres.Open(ctx, url, postgres.Options{Schema: "Bad-Name"}); err == nil {
		t.Fatal("Open with an invalid schema name succeeded")
	}
}

func TestLocationHasNoPassword(t *testing.T) {
	ctx := context.Background()
	url := testURL(t)
	s := open(t, postgres.Options{})
	o, err := s.Offload(ctx, "loc", "call_1", "x", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	loc := string(o.Location)
	if !strings.HasPrefix(loc, "postgres://") || !strings.HasSuffix(loc, "#loc/tool_result/call_1") || strings.Contains(loc, "@") {
		t.Fatalf("location %q", loc)
	}
	// With a password in the URL, the location still carries none.
	withPass := strings.Replace(url, "postgres://postgres@", "postgres://postgres:s3cret@", 1)
	if withPass != url {
		schema := newSchema(t, url)
		s2, err := postgres.Open(ctx, withPass, postgres.Options{Schema: schema})
		if err != nil {
			t.Fatalf("Open with a password: %v", err)
		}
		defer s2.Close()
		loc, err := s2.Archive(ctx, "loc", 0, texts("x", 1))
		if err != nil || strings.Contains(string(loc), "s3cret") || strings.Contains(string(loc), "postgres@") {
			t.Fatalf("location %q, %v", loc, err)
		}
	}
}

// TestSortOrder checks that ids sort as bytes whatever the database's collation.
func TestSortOrder(t *testing.T) {
	ctx := context.Background()
	s := open(t, postgres.Options{})
	ids := []string{"B", "a", "a-b", "a_b", "a.b", "A", "_x", "1"}
	for _, id := range ids {
		if err := s.Append(ctx, id, 0, texts(id, 1)); err != nil {
			t.Fatal(err)
		}
	}
	infos, err := s.Sessions(ctx)
	if err != nil || len(infos) != len(ids) {
		t.Fatalf("Sessions: %+v, %v", infos, err)
	}
	for i := 1; i < len(infos); i++ {
		if infos[i-1].ID >= infos[i].ID {
			t.Fatalf("Sessions not in byte order: %q before %q", infos[i-1].ID, infos[i].ID)
		}
	}
}

// TestExpiryClock checks that ReadOffload and Offload judge expiry by the store's clock.
func TestExpiryClock(t *testing.T) {
	ctx := context.Background()
	start := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := &fakeClock{now: start}
	s := open(t, postgres.Options{Now: clock.Now})
	exp := start.Add(5 * 24 * time.Hour)
	if _, err := s.Offload(ctx, "e", "k", "first\n", exp); err != nil {
		t.Fatal(err)
	}
	if o, err := s.Offload(ctx, "e", "k", "other\n", time.Time{}); err != nil || o.Bytes != 6 || !o.Expires.Equal(exp) {
		t.Fatalf("Offload again: %+v, %v", o, err)
	}
	clock.Set(exp.Add(time.Nanosecond))
	if _, _, err := s.ReadOffload(ctx, "e", "k", 1, 0); !errors.Is(err, store.ErrExpired) {
		t.Fatalf("ReadOffload after expiry: %v, want ErrExpired", err)
	}
	if o, err := s.Offload(ctx, "e", "k", "second\n", time.Time{}); err != nil || o.Bytes != 7 || !o.Expires.IsZero() {
		t.Fatalf("Offload over an expired result: %+v, %v", o, err)
	}
	if text, _, err := s.ReadOffload(ctx, "e", "k", 1, 0); err != nil || text != "second\n" {
		t.Fatalf("ReadOffload: %q, %v", text, err)
	}
}

// TestNULAndInvalidUTF8 stores what TEXT columns could not hold.
func TestNULAndInvalidUTF8(t *testing.T) {
	ctx := context.Background()
	s := open(t, postgres.Options{})
	odd := "nul \x00 and invalid \xff\xfe utf-8\n"
	if _, err := s.Offload(ctx, "odd", "k", odd, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if text, _, err := s.ReadOffload(ctx, "odd", "k", 1, 0); err != nil || text != odd {
		t.Fatalf("ReadOffload: %q, %v", text, err)
	}
	m := chat.TextMessage(chat.RoleUser, "x")
	m.Extra = map[string]json.RawMessage{"raw": json.RawMessage("\"\xff\"")}
	if err := s.Append(ctx, "odd", 0, []chat.Message{m}); err != nil {
		t.Fatalf("Append with invalid UTF-8 in raw JSON: %v", err)
	}
	got, err := s.Messages(ctx, "odd", 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	storetest.EqualMessages(t, "Messages", got, storetest.RoundTrip(t, []chat.Message{m}))
}

// TestOpensV1 restores into a fresh schema the dump of a schema that the PostgreSQL store
// wrote before package sqlstore (testdata/v1.sql, see storetest.WriteFixture) and checks that
// the store opens it, migrates it from version 1 once, reads back the same and takes new writes.
func TestOpensV1(t *testing.T) {
	ctx := context.Background()
	url := testURL(t)
	dump, err := os.ReadFile(filepath.Join("testdata", "v1.sql"))
	if err != nil {
		t.Fatal(err)
	}
	schema := newSchema(t, url)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, strings.ReplaceAll(string(dump), "ctxmgr_v1_fixture", schema)); err != nil {
		t.Fatalf("restore the dump: %v", err)
	}
	s := open0(t, url, schema, postgres.Options{Now: func() time.Time { return storetest.FixtureNow }})
	storetest.CheckFixture(t, s)
	var versions int
	var applied time.Time
	if err := conn.QueryRow(ctx, `SELECT COUNT(*), MIN(applied) FROM `+pgx.Identifier{schema, "schema_migrations"}.Sanitize()).Scan(&versions, &applied); err != nil ||
		versions != postgres.SchemaVersion() || !applied.Equal(storetest.FixtureTime.Truncate(time.Microsecond)) {
		t.Fatalf("schema_migrations: %d rows, first applied %v, %v; want the fixture's version 1 and the later ones, %d in all", versions, applied, err, postgres.SchemaVersion())
	}
}

// open0 is openSchema with the store closed when the test ends.
func open0(t testing.TB, url, schema string, opts postgres.Options) *postgres.Store {
	t.Helper()
	s := openSchema(t, url, schema, opts)
	t.Cleanup(func() { s.Close() })
	return s
}

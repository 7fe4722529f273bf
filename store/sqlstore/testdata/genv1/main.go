// Command genv1 writes the fixture of storetest.WriteFixture into a SQLite file and a
// PostgreSQL schema (ctxmgr_v1_fixture), with the stores of the commit it is built at. The
// fixtures store/sqlite/testdata/v1.db and store/postgres/testdata/v1.sql were made with it at
// commit 46012b1 (before package sqlstore), the dump by
//
//	pg_dump --inserts --no-owner --no-privileges --schema=ctxmgr_v1_fixture DB | grep -v '^\\'
//
// Usage: go run ./store/sqlstore/testdata/genv1 FILE.db POSTGRES-URL
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/ctxmgr/ctxmgr/store/postgres"
	"github.com/ctxmgr/ctxmgr/store/sqlite"
	"github.com/ctxmgr/ctxmgr/store/storetest"
)

func main() {
	if err := run(os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, "genv1:", err)
		os.Exit(1)
	}
}

func run(path, url string) error {
	now := func() time.Time { return storetest.FixtureTime }
	sq, err := sqlite.Open(path, sqlite.Options{Now: now})
	if err != nil {
		return err
	}
	if err := storetest.WriteFixture(sq); err != nil {
		return err
	}
	pg, err := postgres.Open(context.Background(), url, postgres.Options{Now: now, Schema: "ctxmgr_v1_fixture"})
	if err != nil {
		return err
	}
	return storetest.WriteFixture(pg)
}

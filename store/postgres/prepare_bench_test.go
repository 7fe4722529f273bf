package postgres_test

import (
	"testing"

	"github.com/ctxmgr/ctxmgr/store/postgres"
	"github.com/ctxmgr/ctxmgr/store/storetest"
)

// BenchmarkLoadPrepare measures what a restarted service pays for the first request of a
// 2,000-message session: LoadSession and then Prepare (storetest.BenchLoadPrepare).
func BenchmarkLoadPrepare(b *testing.B) { storetest.BenchLoadPrepare(b, open(b, postgres.Options{})) }

package proxy

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/ctxmgr/ctxmgr/internal/fakeupstream"
	"github.com/ctxmgr/ctxmgr/store/sqlite"
	ooption "github.com/openai/openai-go/v3/option"
)

// A session's configuration snapshot is recorded in stores that keep one.
func TestConfigSnapshot(t *testing.T) {
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "ctxmgr.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, fakeupstream.Options{}, Config{Store: st, Window: 32768})
	a := newOpenAIAgent(e.px.URL, bigOutput(100), ooption.WithHeader("X-Ctxmgr-Session", "snap"))
	if _, err := a.turn(context.Background(), "hello", false); err != nil {
		t.Fatal(err)
	}
	model, cfg, err := st.Config(context.Background(), "snap")
	if err != nil {
		t.Fatal(err)
	}
	var snap map[string]any
	if err := json.Unmarshal(cfg, &snap); err != nil || snap["window"] != float64(32768) || model == "" {
		t.Fatalf("snapshot: model %q, config %s (%v)", model, cfg, err)
	}
}

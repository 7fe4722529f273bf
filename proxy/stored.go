package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	ctxmgr "github.com/ctxmgr/ctxmgr"
	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/store"
	"github.com/ctxmgr/ctxmgr/tokens"
)

// SessionSnapshot is the configuration the proxy records with each session
// (Store.PutConfig, see snapshotConfig): what loading the session elsewhere needs to count
// its regions as /context does.
type SessionSnapshot struct {
	Preset    string `json:"preset"`
	Window    int    `json:"window"`
	MaxOutput int    `json:"max_output"`
	// Counter is the proxy's counter key: an encoding (o200k_base) or "cal:MODEL" for a
	// model whose tokenizer is not public.
	Counter string         `json:"counter"`
	System  []chat.Message `json:"system"`
	Tools   []chat.Tool    `json:"tools"`
}

// ReadSnapshot returns the session's recorded configuration; found is false when the store
// keeps none for it (a session made by the library, or a store that keeps no configuration).
func ReadSnapshot(ctx context.Context, st store.Store, id string) (snap SessionSnapshot, found bool, err error) {
	key, raw, err := st.Config(ctx, id)
	if err != nil {
		return snap, false, fmt.Errorf("session %s: reading its configuration: %w", id, err)
	}
	if len(raw) == 0 {
		return snap, false, nil
	}
	if err := json.Unmarshal(raw, &snap); err != nil {
		return snap, false, fmt.Errorf("session %s: its recorded configuration is not valid: %w", id, err)
	}
	// The store's model column holds the proxy's counter key.
	if key != "" {
		snap.Counter = key
	}
	return snap, true, nil
}

// StoredOverrides replace what a session's snapshot records; zero fields keep the recorded
// value or, without a snapshot, the defaults: preset "default", window 200000, max output
// 32000.
type StoredOverrides struct {
	Preset    string
	Window    int
	MaxOutput int
}

// Stored is a session loaded from a store as a restarted proxy would load it.
type Stored struct {
	Session *ctxmgr.Session
	// Preset, Window and MaxOutput are what it was loaded under.
	Preset            string
	Window, MaxOutput int
	// Counter names how tokens are counted: an exact encoding (o200k_base) or "heuristic
	// estimate" (the proxy's calibrated heuristic before any observation: the learned ratio
	// is not stored).
	Counter string
	// Snapshot says that the session's recorded configuration was found.
	Snapshot bool
	mgr      *ctxmgr.Manager
}

// Close releases the Manager the session was loaded with.
func (s *Stored) Close() error { return s.mgr.Close() }

// LoadStored loads session id from st under its recorded configuration, with o applied over
// it. Loading reads the store and writes nothing to it. Close the result.
func LoadStored(ctx context.Context, st store.Store, id string, o StoredOverrides) (*Stored, error) {
	snap, found, err := ReadSnapshot(ctx, st, id)
	if err != nil {
		return nil, err
	}
	out := &Stored{Preset: ctxmgr.PresetDefault, Window: 200000, MaxOutput: 32000, Snapshot: found}
	// The snapshot (zero when none was found) over the defaults, the overrides over both.
	for _, src := range []StoredOverrides{{Preset: snap.Preset, Window: snap.Window, MaxOutput: snap.MaxOutput}, o} {
		if src.Preset != "" {
			out.Preset = src.Preset
		}
		if src.Window > 0 {
			out.Window = src.Window
		}
		if src.MaxOutput > 0 {
			out.MaxOutput = src.MaxOutput
		}
	}
	if out.MaxOutput >= out.Window {
		return nil, fmt.Errorf("%w: max output %d must be smaller than the window %d", ctxmgr.ErrInvalidConfig, out.MaxOutput, out.Window)
	}
	cfg, err := ctxmgr.Preset(out.Preset, out.Window, out.MaxOutput)
	if err != nil {
		return nil, err
	}
	out.Counter = tokens.O200kBase
	switch {
	case found && snap.Counter != "" && !strings.HasPrefix(snap.Counter, "cal:"):
		c, err := tokens.ForEncoding(snap.Counter)
		if err != nil {
			return nil, fmt.Errorf("session %s: recorded counter: %w", id, err)
		}
		cfg.Counter, out.Counter = c, snap.Counter
		// As the proxy does for an exact count: no safety margin.
		cfg.Budget.NoSafetyMargin = true
	case found && snap.Counter != "":
		cfg.Counter = tokens.NewCalibrator(tokens.NewHeuristic(tokens.HeuristicOptions{}), tokens.CalibratorOptions{}).Counter(strings.TrimPrefix(snap.Counter, "cal:"))
		out.Counter = "heuristic estimate"
	}
	cfg.Store = st
	m, err := ctxmgr.New(cfg)
	if err != nil {
		return nil, err
	}
	s, err := m.LoadSession(ctx, id, snap.System, snap.Tools)
	if err != nil {
		_ = m.Close()
		return nil, err
	}
	if cfg.Counter == nil {
		out.Counter = m.Config().Counter.Name()
	}
	out.Session, out.mgr = s, m
	return out, nil
}

package main

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ctxmgr/ctxmgr"
	"github.com/ctxmgr/ctxmgr/proxy"
	"github.com/ctxmgr/ctxmgr/store"
)

// showOutput is what `sessions show` prints: the /context statistics plus where the
// configuration they were computed under came from.
type showOutput struct {
	ctxmgr.Stats
	Preset string `json:"preset"`
	// Counter names how tokens were counted: an exact encoding (o200k_base, cl100k_base) or
	// "heuristic estimate" for models whose tokenizer is not public (the proxy calibrates its
	// heuristic on the provider's reported usage; that learned ratio is not stored).
	Counter string `json:"counter"`
	// ConfigFrom says where preset, window, max output, system prompt and tools came from:
	// "snapshot" (recorded by ctxmgr serve), "flags", or "snapshot+flags".
	ConfigFrom string `json:"config_from"`
}

func newSessionsShowCmd(spec *string) *cobra.Command {
	var preset string
	var window, maxOutput int
	cmd := &cobra.Command{
		Use:   "show ID",
		Short: "Print a session's /context statistics as JSON",
		Long: `Show loads a session as the service would after a restart and prints its /context
statistics as JSON: messages live and evicted, masked, offloaded and truncated tool
results, tokens per region of the next request, how full the window is (the reply
reserve is not counted as used), the summary version, and where archived messages
and offloaded results are.

The statistics depend on the configuration the session is managed with. ctxmgr serve
records it with the session (preset, window, max output, token counter, system prompt
and tools), and show uses that record, so it prints what /context prints. --preset,
--window and --max-output override it; for a session without a record (one made by
the library, or a store that keeps none) they default to default, 200000 and 32000,
and the system and tools regions are 0. "config_from" says which applied.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("preset") && !ctxmgr.IsPreset(preset) {
				return usageErrorf("--preset %q: want one of %s", preset, strings.Join(ctxmgr.Presets(), ", "))
			}
			if cmd.Flags().Changed("window") && window <= 0 {
				return usageErrorf("--window %d: must be positive", window)
			}
			if cmd.Flags().Changed("max-output") && maxOutput < 0 {
				return usageErrorf("--max-output %d: must not be negative", maxOutput)
			}
			return withStore(cmd, *spec, func(ctx context.Context, st store.Store) error {
				if _, err := findSession(ctx, st, args[0]); err != nil {
					return err
				}
				out, err := showSession(ctx, cmd, st, args[0], preset, window, maxOutput)
				if err != nil {
					return err
				}
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(out)
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&preset, "preset", ctxmgr.PresetDefault, "configuration preset (default: the session's recorded one): "+strings.Join(ctxmgr.Presets(), ", "))
	f.IntVar(&window, "window", 200000, "context window in tokens (default: the session's recorded window)")
	f.IntVar(&maxOutput, "max-output", 32000, "tokens reserved for the reply (default: the session's recorded one)")
	return cmd
}

// showSession loads the session under its recorded configuration (flags given explicitly
// override it) and returns its statistics.
func showSession(ctx context.Context, cmd *cobra.Command, st store.Store, id, preset string, window, maxOutput int) (*showOutput, error) {
	var o proxy.StoredOverrides
	overridden := false
	if cmd.Flags().Changed("preset") {
		o.Preset, overridden = preset, true
	}
	if cmd.Flags().Changed("window") {
		o.Window, overridden = window, true
	}
	if cmd.Flags().Changed("max-output") {
		o.MaxOutput, overridden = maxOutput, true
	}
	snap, found, err := proxy.ReadSnapshot(ctx, st, id)
	if err != nil {
		return nil, err
	}
	if !found {
		// Without a record the flags apply, defaults included.
		o = proxy.StoredOverrides{Preset: preset, Window: window, MaxOutput: maxOutput}
	}
	w, mo := window, maxOutput
	if found && !cmd.Flags().Changed("window") && snap.Window > 0 {
		w = snap.Window
	}
	if found && !cmd.Flags().Changed("max-output") && snap.MaxOutput > 0 {
		mo = snap.MaxOutput
	}
	if mo >= w {
		return nil, usageErrorf("--max-output %d: must be smaller than the window %d", mo, w)
	}
	sess, err := proxy.LoadStored(ctx, st, id, o)
	if err != nil {
		return nil, err
	}
	defer sess.Close()
	from := "flags"
	if found {
		from = "snapshot"
		if overridden {
			from = "snapshot+flags"
		}
	}
	return &showOutput{Stats: sess.Session.Stats(), Preset: sess.Preset, Counter: sess.Counter, ConfigFrom: from}, nil
}

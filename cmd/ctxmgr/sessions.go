package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/ctxmgr/ctxmgr/chat"
	"github.com/ctxmgr/ctxmgr/internal/redact"
	"github.com/ctxmgr/ctxmgr/store"
	"github.com/ctxmgr/ctxmgr/store/files"
	"github.com/ctxmgr/ctxmgr/store/postgres"
	"github.com/ctxmgr/ctxmgr/store/sqlite"
)

// defaultStore is where the sessions commands (and the service) keep sessions by default.
const defaultStore = "sqlite:./ctxmgr.db"

// storeSpecHelp describes the --store values.
const storeSpecHelp = `sqlite:PATH (a SQLite database file), postgres://USER@HOST:PORT/DB?... (PostgreSQL), or files:DIR (the file store)`

// isPostgres reports whether a --store value names a PostgreSQL database: a store that
// several instances may share.
func isPostgres(spec string) bool {
	return strings.HasPrefix(spec, "postgres://") || strings.HasPrefix(spec, "postgresql://")
}

// openStore opens the store a --store value names: "sqlite:PATH", "postgres://..." (or
// "postgresql://..."), or "files:DIR". A SQLite database or a directory that does not exist
// is created. A malformed spec is a usage error. A SQLite database is opened with lite (serve
// sets Relaxed, since its clients resend their history, and CheckpointEvery).
func openStore(ctx context.Context, spec string, lite sqlite.Options) (store.Store, error) {
	switch {
	case strings.HasPrefix(spec, "sqlite:"):
		path := strings.TrimPrefix(spec, "sqlite:")
		if path == "" {
			return nil, usageErrorf("--store %q: missing database path after sqlite:", spec)
		}
		return sqlite.Open(path, lite)
	case isPostgres(spec):
		return postgres.Open(ctx, spec, postgres.Options{})
	case strings.HasPrefix(spec, "files:"):
		dir := strings.TrimPrefix(spec, "files:")
		if dir == "" {
			return nil, usageErrorf("--store %q: missing directory after files:", spec)
		}
		return files.Open(dir, files.Options{})
	}
	return nil, usageErrorf("--store %q: want %s", redact.URL(spec), storeSpecHelp)
}

// openExisting is openStore for commands that only read or delete: a SQLite file or store
// directory that does not exist is an error instead of being created empty.
func openExisting(ctx context.Context, spec string) (store.Store, error) {
	for _, prefix := range []string{"sqlite:", "files:"} {
		if p, ok := strings.CutPrefix(spec, prefix); ok && p != "" {
			if _, err := os.Stat(p); err != nil {
				if errors.Is(err, os.ErrNotExist) {
					return nil, fmt.Errorf("store %s: %s does not exist", spec, p)
				}
				return nil, fmt.Errorf("store %s: %w", spec, err)
			}
		}
	}
	return openStore(ctx, spec, sqlite.Options{})
}

func newSessionsCmd() *cobra.Command {
	var spec string
	cmd := &cobra.Command{
		Use:   "sessions",
		Short: "List, inspect, export and prune stored sessions",
		Long: `Sessions works on the sessions a store holds: their full history, summary
versions, archived messages and offloaded tool results.

--store names the store: ` + storeSpecHelp + `.
A PostgreSQL URL may carry credentials; they are never printed.`,
		Example: `  ctxmgr sessions list
  ctxmgr sessions show SESSION --store sqlite:/var/lib/ctxmgr/ctxmgr.db
  ctxmgr sessions export SESSION > session.jsonl
  ctxmgr sessions prune --older-than 30d --dry-run
  ctxmgr sessions list --store postgres://ctxmgr@db:5432/ctxmgr`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	cmd.PersistentFlags().StringVar(&spec, "store", defaultStore, "the store: "+storeSpecHelp)
	cmd.AddCommand(newSessionsListCmd(&spec), newSessionsShowCmd(&spec), newSessionsEventsCmd(&spec), newSessionsExportCmd(&spec), newSessionsPruneCmd(&spec))
	return cmd
}

// withStore opens the existing store, runs fn and closes the store.
func withStore(cmd *cobra.Command, spec string, fn func(ctx context.Context, st store.Store) error) error {
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	st, err := openExisting(ctx, spec)
	if err != nil {
		return err
	}
	err = fn(ctx, st)
	if cerr := st.Close(); err == nil && cerr != nil && !errors.Is(cerr, store.ErrClosed) {
		err = cerr
	}
	return err
}

func newSessionsListCmd(spec *string) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List stored sessions: id, messages, summary version, last update",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return withStore(cmd, *spec, func(ctx context.Context, st store.Store) error {
				infos, err := st.Sessions(ctx)
				if err != nil {
					return err
				}
				out := cmd.OutOrStdout()
				if asJSON {
					enc := json.NewEncoder(out)
					enc.SetIndent("", "  ")
					return enc.Encode(infos)
				}
				return printInfos(out, infos)
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON array instead of a table")
	return cmd
}

func printInfos(w io.Writer, infos []store.SessionInfo) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tMESSAGES\tSUMMARY\tUPDATED")
	for _, info := range infos {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", info.ID, info.Messages, summaryVersion(info.Summary), info.Updated.UTC().Format(time.RFC3339))
	}
	return tw.Flush()
}

func summaryVersion(v int) string {
	if v == 0 {
		return "-"
	}
	return "v" + strconv.Itoa(v)
}

// findSession returns the session's info, or an error if the store does not hold it.
func findSession(ctx context.Context, st store.Store, id string) (store.SessionInfo, error) {
	if err := store.CheckID(id); err != nil {
		return store.SessionInfo{}, err
	}
	infos, err := st.Sessions(ctx)
	if err != nil {
		return store.SessionInfo{}, err
	}
	for _, info := range infos {
		if info.ID == id {
			return info, nil
		}
	}
	return store.SessionInfo{}, fmt.Errorf("session %q: %w", id, store.ErrNotFound)
}

func newSessionsEventsCmd(spec *string) *cobra.Command {
	return &cobra.Command{
		Use:   "events ID",
		Short: "Print a session's pipeline events as JSONL",
		Long: `Events prints what the pipeline did to a session, one JSON object a line in the order
it happened: {"id":N,"at":"<RFC 3339>","kind":"<step>","body":{...}}, where body is the
event as the Manager reported it (step, reason, tokens before and after, messages). Events
of kind "request" are the proxy's record of each request (tokens the client sent and
those forwarded, the usage the upstream reported; see docs/inspector.md).

Only the sqlite: and postgres:// stores keep events.`,
		Example: `  ctxmgr sessions events my-session --store sqlite:./ctxmgr.db`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withStore(cmd, *spec, func(ctx context.Context, st store.Store) error {
				if _, err := findSession(ctx, st, args[0]); err != nil {
					return err
				}
				evs, err := st.Events(ctx, args[0])
				if err != nil {
					return err
				}
				enc := json.NewEncoder(cmd.OutOrStdout())
				for _, e := range evs {
					line := struct {
						ID   int64           `json:"id"`
						At   time.Time       `json:"at"`
						Kind string          `json:"kind"`
						Body json.RawMessage `json:"body"`
					}{e.ID, e.At.UTC(), e.Kind, e.Body}
					if !json.Valid(e.Body) {
						line.Body, _ = json.Marshal(string(e.Body))
					}
					if err := enc.Encode(line); err != nil {
						return err
					}
				}
				return nil
			})
		},
	}
}

// newSessionsShowCmd is in sessions_show.go.

// exportLine is one line of `sessions export`.
type exportLine struct {
	Pos      int           `json:"pos"`
	Archived bool          `json:"archived"`
	Message  *chat.Message `json:"message"`
}

func newSessionsExportCmd(spec *string) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "export ID",
		Short: "Write a session's full verbatim history as JSONL",
		Long: `Export writes every message of a session's history, archived (evicted) ones
included, verbatim and in order, one JSON object a line:

  {"pos":N,"archived":true|false,"message":{...}}

"archived" says whether the message was evicted from the context and archived.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withStore(cmd, *spec, func(ctx context.Context, st store.Store) error {
				id := args[0]
				if _, err := findSession(ctx, st, id); err != nil {
					return err
				}
				msgs, err := st.Messages(ctx, id, 0, -1)
				if err != nil {
					return err
				}
				arch, err := st.ReadArchive(ctx, id, 0, -1)
				if err != nil {
					return err
				}
				archived := make(map[int]bool, len(arch))
				for _, a := range arch {
					archived[a.Pos] = true
				}
				var w io.Writer = cmd.OutOrStdout()
				var f *os.File
				if output != "" && output != "-" {
					if f, err = os.OpenFile(output, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600); err != nil {
						return err
					}
					defer f.Close()
					w = f
				}
				enc := json.NewEncoder(w)
				for i := range msgs {
					if err := enc.Encode(exportLine{Pos: i, Archived: archived[i], Message: &msgs[i]}); err != nil {
						return err
					}
				}
				// Archived positions past the history (not written by ctxmgr itself, but kept
				// by the store) are exported too rather than dropped.
				for i := range arch {
					if arch[i].Pos < len(msgs) {
						continue
					}
					if err := enc.Encode(exportLine{Pos: arch[i].Pos, Archived: true, Message: &arch[i].Message}); err != nil {
						return err
					}
				}
				if f != nil {
					if err := f.Sync(); err != nil {
						return err
					}
					return f.Close()
				}
				return nil
			})
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "write to this file instead of standard output")
	return cmd
}

// parseAge parses an age such as "30d", "12h", "1d12h" or "90m": Go durations plus d (24h)
// and w (7d) units in front.
func parseAge(s string) (time.Duration, error) {
	rest := strings.TrimSpace(s)
	var total time.Duration
	for rest != "" {
		i := 0
		for i < len(rest) && (rest[i] >= '0' && rest[i] <= '9' || rest[i] == '.') {
			i++
		}
		if i == len(rest) || i == 0 || (rest[i] != 'd' && rest[i] != 'w') {
			break
		}
		n, err := strconv.ParseFloat(rest[:i], 64)
		if err != nil {
			return 0, fmt.Errorf("invalid age %q", s)
		}
		unit := 24 * time.Hour
		if rest[i] == 'w' {
			unit *= 7
		}
		total += time.Duration(n * float64(unit))
		rest = rest[i+1:]
	}
	if rest != "" {
		d, err := time.ParseDuration(rest)
		if err != nil || d < 0 {
			return 0, fmt.Errorf("invalid age %q: want a number of days (30d), weeks (2w) or a duration (12h, 90m)", s)
		}
		total += d
	}
	if total <= 0 {
		return 0, fmt.Errorf("invalid age %q: must be positive", s)
	}
	return total, nil
}

func newSessionsPruneCmd(spec *string) *cobra.Command {
	var olderThan string
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "prune --older-than AGE [--dry-run]",
		Short: "Delete sessions idle for longer than AGE, listing each one",
		Long: `Prune deletes every session whose last update is older than AGE (30d, 2w, 12h,
1d12h), with everything stored for it: history, summary versions, archive, offloaded
results, state and events. Each deleted session is printed; nothing is deleted
silently. With --dry-run nothing is deleted and the sessions that would be are printed.

Every store supports prune (sqlite:, postgres://, files:).`,
		Example: `  ctxmgr sessions prune --older-than 30d --dry-run
  ctxmgr sessions prune --older-than 30d`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if olderThan == "" {
				return usageErrorf("prune: --older-than is required (for example --older-than 30d)")
			}
			age, err := parseAge(olderThan)
			if err != nil {
				return &usageError{err: err}
			}
			return withStore(cmd, *spec, func(ctx context.Context, st store.Store) error {
				cut := time.Now().Add(-age)
				infos, err := st.Prune(ctx, cut, dryRun)
				if err != nil {
					return err
				}
				out := cmd.OutOrStdout()
				verb := "deleted"
				if dryRun {
					verb = "would delete"
				}
				for _, info := range infos {
					fmt.Fprintf(out, "%s %s: %d messages, summary %s, created %s, updated %s\n", verb, info.ID, info.Messages,
						summaryVersion(info.Summary), info.Created.UTC().Format(time.RFC3339), info.Updated.UTC().Format(time.RFC3339))
				}
				noun := "sessions"
				if len(infos) == 1 {
					noun = "session"
				}
				if dryRun {
					fmt.Fprintf(out, "dry run: %d %s not updated since %s would be deleted\n", len(infos), noun, cut.UTC().Format(time.RFC3339))
				} else {
					fmt.Fprintf(out, "%d %s not updated since %s deleted\n", len(infos), noun, cut.UTC().Format(time.RFC3339))
				}
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&olderThan, "older-than", "", "age of the last update beyond which a session is deleted (30d, 2w, 12h)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print what would be deleted and delete nothing")
	return cmd
}

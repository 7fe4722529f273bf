// Command ctxmgr is the command-line front end of the context manager.
//
// Subcommands live in their own files of this package, each with a constructor
// newXCmd() *cobra.Command (no init functions, no package-level state), listed in
// newRootCmd. Commands read and write through cmd.InOrStdin, cmd.OutOrStdout and
// cmd.ErrOrStderr so that run can drive them from tests.
//
// Exit codes: 0 on success, 1 when a command fails, 2 on a usage error (unknown command or
// flag, wrong arguments, conflicting flags). Errors are printed to stderr as "ctxmgr: <error>".
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version is the release version; set it at link time with
// -ldflags "-X main.version=v1.2.3". When unset, the module version recorded in the build
// info is used (for go install), else "dev".
var version = ""

func buildVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

// Exit codes.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// usageError marks an error as a usage error (exit code 2). Errors cobra reports before a
// command's RunE starts (bad flags, unknown commands, argument validation) are usage errors
// too; a RunE returns usageErrorf for what cobra cannot check (conflicting flags, say).
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func usageErrorf(format string, args ...any) error {
	return &usageError{err: fmt.Errorf(format, args...)}
}

// errReported is returned by a command that has already printed its errors to stderr (one
// per failed input, say) and only needs the exit code to say so.
var errReported = errors.New("errors reported")

// newRootCmd builds the command tree. To add a subcommand, write newXCmd() in its own file
// and add it to the list below.
func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "ctxmgr",
		Short: "Manage the context window of LLM conversations",
		Long: `ctxmgr manages what goes into the context window of an LLM conversation:
it counts tokens exactly, and keeps requests within a model's budget.`,
		Version:           readVersionInfo().String(),
		SilenceUsage:      true,
		SilenceErrors:     true,
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
	}
	root.SetVersionTemplate("ctxmgr {{.Version}}\n")

	// Subcommands, one constructor per file.
	root.AddCommand(
		newTokensCmd(),   // tokens.go
		newReplayCmd(),   // replay.go
		newServeCmd(),    // serve.go
		newSessionsCmd(), // sessions.go
		newVersionCmd(),  // version.go
	)
	return root
}

// run executes ctxmgr with args (without the program name) and returns the exit code.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return runContext(context.Background(), args, stdin, stdout, stderr)
}

// runContext is run with a context: cancelling it stops a long-running command (serve shuts
// down as on SIGTERM).
func runContext(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := newRootCmd()
	root.SetContext(ctx)
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)

	// Anything that fails before a RunE starts is a usage error.
	started := false
	markRunning(root, &started)

	cmd, err := root.ExecuteC()
	if err == nil {
		return exitOK
	}
	if errors.Is(err, errReported) {
		return exitError
	}
	fmt.Fprintf(stderr, "ctxmgr: %v\n", err)
	var ue *usageError
	if !started || errors.As(err, &ue) {
		if cmd == nil {
			cmd = root
		}
		fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
		return exitUsage
	}
	return exitError
}

// markRunning wraps the Run and RunE of every command in the tree so that *started records
// whether one of them began.
func markRunning(c *cobra.Command, started *bool) {
	if c.RunE != nil {
		f := c.RunE
		c.RunE = func(cmd *cobra.Command, args []string) error {
			*started = true
			return f(cmd, args)
		}
	} else if c.Run != nil {
		f := c.Run
		c.Run = func(cmd *cobra.Command, args []string) {
			*started = true
			f(cmd, args)
		}
	}
	for _, sub := range c.Commands() {
		markRunning(sub, started)
	}
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

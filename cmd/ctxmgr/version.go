package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

// versionInfo is what `ctxmgr version` and `ctxmgr --version` print: the module version
// (a release tag under go install, "(devel)" for a build from a checkout), the VCS revision and
// time the binary was built from (with "+dirty" for uncommitted changes), and the Go version.
type versionInfo struct {
	Version  string // module version, or the link-time main.version
	Revision string // VCS revision, "" when the build did not record one
	Time     string // commit time of Revision
	Dirty    bool
	Go       string
}

func readVersionInfo() versionInfo {
	v := versionInfo{Version: buildVersion(), Go: runtime.Version()}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	if bi.GoVersion != "" {
		v.Go = bi.GoVersion
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Revision = s.Value
		case "vcs.time":
			v.Time = s.Value
		case "vcs.modified":
			v.Dirty = s.Value == "true"
		}
	}
	return v
}

// String is the one-line form: "v1.2.3 (rev 0123abcd4567, 2026-11-23T03:00:00Z) go1.26.0".
func (v versionInfo) String() string {
	var b strings.Builder
	b.WriteString(v.Version)
	if v.Revision != "" {
		rev := v.Revision
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if v.Dirty {
			rev += "+dirty"
		}
		b.WriteString(" (rev " + rev)
		if v.Time != "" {
			b.WriteString(", " + v.Time)
		}
		b.WriteString(")")
	} else if v.Version == "dev" {
		// A build from a checkout normally records its revision; go build -buildvcs=false
		// (or a GOFLAGS setting it) and builds outside a repository do not.
		b.WriteString(" (no VCS revision recorded)")
	}
	b.WriteString(" " + v.Go)
	return b.String()
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, VCS revision and Go version of this binary",
		Long: `Print the module version of this binary (a release tag when installed with
go install ...@vX.Y.Z, "dev" for a build from a checkout), the VCS revision and
commit time it was built from ("+dirty": with uncommitted changes), and the Go
version it was built with. ctxmgr --version prints the same line.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "ctxmgr %s\n", readVersionInfo())
			return err
		},
	}
}

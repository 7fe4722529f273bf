// Package sample embeds a small sample of real agent runs, so that `ctxmgr replay` has
// something to replay wherever the binary is, and tests have real runs to read in a fresh
// clone: 12 mini-swe-agent runs and the first 30 tau-bench airline runs, each set in its own
// directory with its licence file (MIT, both). testdata/README.md at the repository root says
// what each file is and where it comes from.
//
// The files are embedded as they are and read only when FS is read: nothing is decoded when
// the package is loaded.
package sample

import (
	"embed"
	"io/fs"
)

//go:embed trajectories
var files embed.FS

// Dir is the directory of FS that holds the sets: Dir/mini-swe-agent and Dir/tau-bench.
const Dir = "trajectories"

// Runs is the number of runs in the sample (each mini-swe-agent file is one run; the
// tau-bench file holds several).
const Runs = 42

// Sets names the sets of the sample, as replay names them (their directories).
func Sets() []string { return []string{"mini-swe-agent", "tau-bench"} }

// FS returns the sample: Dir/<set>/<file>, the licence file of each set beside its runs.
func FS() fs.FS { return files }

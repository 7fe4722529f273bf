//go:build race

package ctxmgr

// raceEnabled: the race detector slows the property tests about tenfold; they run fewer
// random histories under it (the full count runs in every plain `go test`).
const raceEnabled = true

//go:build !race

package ctxmgr

const raceEnabled = false

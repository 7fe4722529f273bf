//go:build race

package proxy

// soakRace: the race detector slows the soak about tenfold; it runs fewer turns under it.
const soakRace = true

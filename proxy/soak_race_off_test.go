//go:build !race

package proxy

const soakRace = false

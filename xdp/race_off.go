//go:build !race

package xdp

// raceSync is a no-op without the race detector (see race_on.go).
func raceSync() {}

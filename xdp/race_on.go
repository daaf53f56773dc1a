//go:build race

package xdp

import "sync"

// raceMu gives the race detector the order the kernel provides: a frame
// is received after it was transmitted. Two sockets of one process (the
// tests' veth pairs) otherwise look unsynchronized to it, and every
// buffer an RDMA peer writes before answering and the other side reads
// after the answer reads as a race.
var raceMu sync.Mutex

// raceSync orders what came before it in this goroutine before what
// follows a later raceSync in another.
func raceSync() {
	raceMu.Lock()
	raceMu.Unlock()
}

//go:build race

package perftest

// raceDetector tells that the race detector is on: ib_write_lat polls
// memory the engine writes (see waitByte), which it reports.
const raceDetector = true

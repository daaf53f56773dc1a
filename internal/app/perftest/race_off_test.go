//go:build !race

package perftest

// raceDetector tells that the race detector is on.
const raceDetector = false

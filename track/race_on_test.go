//go:build race

package track_test

// raceEnabled: the race detector is on, and sync.Pool drops a quarter of
// what it is given, so pooled scratch space is allocated again now and then.
const raceEnabled = true

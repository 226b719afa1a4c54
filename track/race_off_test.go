//go:build !race

package track_test

const raceEnabled = false

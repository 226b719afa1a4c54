// Package layers holds the test that keeps adstap's imports pointing one way: codec at the bottom, the relay and the tracker side by side on it, the outputs above them, the wiring on top, and test support, suites and the benchmark apart.
//
// Inside a package the files keep layers too: TestFilesCallDown bounds the loops of files that refer to each other in track, tap and internal/inspect.
package layers

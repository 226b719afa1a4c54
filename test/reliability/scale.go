package reliability

import (
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"
)

// SoakEnv turns on the long form of every test in this package.
const SoakEnv = "ADSTAP_SOAK"

// figuresEnv names a file the figures are appended to, one JSON object a line.
const figuresEnv = "ADSTAP_FIGURES"

// Long reports whether the long form runs (ADSTAP_SOAK=1).
func Long() bool {
	switch os.Getenv(SoakEnv) {
	case "", "0", "false":
		return false
	}
	return true
}

// Pick returns short in the short form and long in the long form.
func Pick[T any](short, long T) T {
	if Long() {
		return long
	}
	return short
}

// formFigure names the form that runs: "short" or "long".
func formFigure() string { return Pick("short", "long") }

var figuresMu sync.Mutex

// Figure records a measurement: a "FIGURE name: value" line in the test log
// (go test -v shows it), and a JSON line in $ADSTAP_FIGURES when it is set.
func Figure(t testing.TB, name string, format string, args ...any) {
	t.Helper()
	value := fmt.Sprintf(format, args...)
	t.Logf("FIGURE %s [%s]: %s", name, formFigure(), value)
	path := os.Getenv(figuresEnv)
	if path == "" {
		return
	}
	line, _ := json.Marshal(map[string]string{
		"test": t.Name(), "form": formFigure(), "name": name, "value": value, "time": time.Now().UTC().Format(time.RFC3339),
	})
	figuresMu.Lock()
	defer figuresMu.Unlock()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Errorf("reliability: figures file: %v", err)
		return
	}
	defer f.Close()
	f.Write(append(line, '\n'))
}

package track

import "strings"

// State is where one type of a stream stands, as istioctl proxy-status
// says it: the one list of these words, which /debug/streams, the metrics'
// state label, adstap status and the live page all use.
type State string

// The states, in the order States lists them.
const (
	// StateSynced: the latest push was acknowledged.
	StateSynced State = "SYNCED"
	// StateStale: the latest push awaits its answer.
	StateStale State = "STALE"
	// StateNACKed: the latest answered push was rejected.
	StateNACKed State = "NACKED"
	// StateNotSent: the client asked for the type, nothing was pushed yet.
	StateNotSent State = "NOT_SENT"
)

// States are every State, in the order the metrics and /debug/streams'
// documentation list them.
var States = [...]State{StateSynced, StateStale, StateNACKed, StateNotSent}

// Display is the state in the words of istioctl proxy-status's table, as
// adstap status and the live page show it: ERROR for NACKED, NOT SENT for
// NOT_SENT, the state itself otherwise.
func (s State) Display() string {
	switch s {
	case StateNACKed:
		return "ERROR"
	case StateNotSent:
		return "NOT SENT"
	}
	return string(s)
}

// ParseState reads a state in either words (NACKED or ERROR, NOT_SENT or
// NOT SENT), in any case.
func ParseState(s string) (State, bool) {
	s = strings.ToUpper(s)
	for _, st := range States {
		if s == string(st) || s == st.Display() {
			return st, true
		}
	}
	return "", false
}

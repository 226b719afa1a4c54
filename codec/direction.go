package codec

// Direction says which way a frame travelled: the one spelling of
// "request" and "response" that the tap, the tracker, the capture files and
// the outputs share.
type Direction uint8

const (
	// DirectionRequest frames travel from the client (Envoy) to the control
	// plane.
	DirectionRequest Direction = iota + 1
	// DirectionResponse frames travel from the control plane to the client.
	DirectionResponse
)

func (d Direction) String() string {
	switch d {
	case DirectionRequest:
		return "request"
	case DirectionResponse:
		return "response"
	}
	return "unknown"
}

// ParseDirection is String's inverse, for a direction written down (a
// capture record's dir); ok is false for anything String does not return
// for DirectionRequest or DirectionResponse.
func ParseDirection(s string) (d Direction, ok bool) {
	for _, d := range []Direction{DirectionRequest, DirectionResponse} {
		if s == d.String() {
			return d, true
		}
	}
	return 0, false
}

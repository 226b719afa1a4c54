package track

// Sink receives the tracker's events. Sinks are called from the goroutine
// that fed the tracker (one per stream) or from its clock, in event order for
// one stream; a sink that does slow work must queue it.
type Sink interface {
	OnEvent(Event)
}

// SinkFunc is a Sink made of a function.
type SinkFunc func(Event)

// OnEvent calls f.
func (f SinkFunc) OnEvent(e Event) { f(e) }

var _ Sink = SinkFunc(nil)

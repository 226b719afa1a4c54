package track

import "time"

// DefaultKeepBytes bounds the bytes of unanswered pushes the tracker keeps
// for their NACKs (Config.KeepBytes).
const DefaultKeepBytes = 64 << 20

// The defaults of Config.InitialFetchTimeout and Config.MaxResources.
const (
	DefaultInitialFetchTimeout = 15 * time.Second
	DefaultMaxResources        = 100_000
)

// Config holds the tracker's thresholds. A zero field takes its default.
type Config struct {
	PushTimeout            time.Duration // an unanswered push ends as ResultTimeout (state STALE)
	MaxNames               int           // cap on name lists in events and state
	NACKStormThreshold     int           // NACKs of one stream×type ...
	NACKStormWindow        time.Duration // ... within this window make a storm
	NACKLoopThreshold      int           // the same rejected content NACKed this many times in a row is a loop
	RepeatedFullSyncLimit  int           // more than this many repeated full syncs of one node and type ...
	RepeatedFullSyncWindow time.Duration // ... within this window raise the alarm
	HerdThreshold          int           // this many new streams ...
	HerdWindow             time.Duration // ... within this window across the tap are a reconnect herd
	FullSyncSettle         time.Duration // how long a full-sync candidate must stand with no new type requested
	// KeepBytes bounds the bytes of unanswered pushes kept for their NACKs
	// (Tracker.ResponseFrame), and of what their answers hand over until
	// released (Rejected, Changed, Accepted), across all streams; negative
	// keeps none.
	KeepBytes int64
	// Resources follows each type's resources one by one (client status,
	// accepted version, rejection, since when asked for), for CSDS and the
	// per-resource status; at most MaxResources per type and stream.
	Resources    bool
	MaxResources int
	// InitialFetchTimeout is how long a resource asked for by name may go
	// unanswered before it is ResourceNotSent (Envoy's default, 15 s).
	InitialFetchTimeout time.Duration
}

// DefaultConfig returns the thresholds the tap runs with unless told otherwise.
func DefaultConfig() Config {
	return Config{
		PushTimeout:            30 * time.Second,
		MaxNames:               20,
		NACKStormThreshold:     5,
		NACKStormWindow:        30 * time.Second,
		NACKLoopThreshold:      3,
		RepeatedFullSyncLimit:  1,
		RepeatedFullSyncWindow: time.Minute,
		HerdThreshold:          100,
		HerdWindow:             time.Second,
		FullSyncSettle:         time.Second,
		KeepBytes:              DefaultKeepBytes,
		MaxResources:           DefaultMaxResources,
		InitialFetchTimeout:    DefaultInitialFetchTimeout,
	}
}

// withDefaults fills zero (and nonsensical negative) fields, so that callers
// can set only what they care about.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	dur := func(v *time.Duration, def time.Duration) {
		if *v <= 0 {
			*v = def
		}
	}
	num := func(v *int, def int) {
		if *v <= 0 {
			*v = def
		}
	}
	dur(&c.PushTimeout, d.PushTimeout)
	dur(&c.InitialFetchTimeout, d.InitialFetchTimeout)
	num(&c.MaxResources, d.MaxResources)
	num(&c.MaxNames, d.MaxNames)
	num(&c.NACKStormThreshold, d.NACKStormThreshold)
	dur(&c.NACKStormWindow, d.NACKStormWindow)
	num(&c.NACKLoopThreshold, d.NACKLoopThreshold)
	num(&c.RepeatedFullSyncLimit, d.RepeatedFullSyncLimit)
	dur(&c.RepeatedFullSyncWindow, d.RepeatedFullSyncWindow)
	num(&c.HerdThreshold, d.HerdThreshold)
	dur(&c.HerdWindow, d.HerdWindow)
	dur(&c.FullSyncSettle, d.FullSyncSettle)
	if c.KeepBytes == 0 {
		c.KeepBytes = d.KeepBytes
	}
	return c
}

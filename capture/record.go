// Package capture writes relayed xDS streams to rotating JSON Lines files and reads them back.
package capture

import (
	"time"
)

// FormatVersion is written in every file's first record.
const FormatVersion = 1

// Record kinds.
const (
	KindCapture = "capture" // the first record of every file
	KindOpen    = "open"    // a stream opened (repeated at the top of each rotated file for streams still open)
	KindFrame   = "frame"   // one message, as it crossed the tap
	KindClose   = "close"   // a stream ended
	KindGap     = "gap"     // frames relayed but not captured (the observation queue, or the capture's own, was full)
)

// Record is one line of a capture file. Fields are set by kind; see docs/capture.md.
type Record struct {
	Time time.Time `json:"time"`
	Kind string    `json:"kind"`

	// capture
	Format   int    `json:"format,omitempty"`
	Adstap   string `json:"adstap,omitempty"`
	Upstream string `json:"upstream,omitempty"`

	Stream uint64 `json:"stream,omitempty"`

	// open
	Conn     uint64              `json:"conn,omitempty"`
	Method   string              `json:"method,omitempty"`
	Protocol string              `json:"protocol,omitempty"`
	Peer     string              `json:"peer,omitempty"`
	Headers  map[string][]string `json:"headers,omitempty"`
	// Reopened marks an open record repeated at the top of a rotated file.
	Reopened bool `json:"reopened,omitempty"`

	// frame
	Direction string `json:"dir,omitempty"` // "request" or "response"
	Node      string `json:"node,omitempty"`
	TypeURL   string `json:"type_url,omitempty"`
	Size      int    `json:"size,omitempty"`
	// Message is the frame's bytes (base64 in JSON); with Redacted set,
	// secret material in it was replaced (package redact), so it differs
	// from what crossed the wire.
	Message  []byte `json:"msg,omitempty"`
	Redacted bool   `json:"redacted,omitempty"`

	// close
	Code          string `json:"code,omitempty"`
	StatusMessage string `json:"message,omitempty"`

	// gap
	Skipped int `json:"skipped,omitempty"`
}

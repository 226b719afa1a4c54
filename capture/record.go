// Package capture writes relayed xDS streams to rotating capture files — a JSON line per record, a frame's message in raw bytes after its line — and reads them back.
package capture

import (
	"time"
)

// FormatVersion is written in every file's first record. Format 1 held
// each frame's message in base64 inside its JSON line; format 2 writes it
// raw after the line, its length in the line (docs/capture.md). The reader
// reads both.
const FormatVersion = 2

// Record kinds.
const (
	KindCapture = "capture" // the first record of every file
	KindOpen    = "open"    // a stream opened (repeated at the top of each rotated file for streams still open)
	KindFrame   = "frame"   // one message, as it crossed the tap
	KindClose   = "close"   // a stream ended
	KindGap     = "gap"     // frames relayed but not captured (the observation queue, or the capture's own, was full)
)

// Record is one record of a capture file. Fields are set by kind; see docs/capture.md.
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
	Direction string `json:"dir,omitempty"` // codec.Direction's String: "request" or "response"
	Node      string `json:"node,omitempty"`
	TypeURL   string `json:"type_url,omitempty"`
	Size      int    `json:"size,omitempty"`
	// Message is the frame's bytes: in format 2 written raw after the
	// record's line, in format 1 in base64 inside it. With Redacted set,
	// secret material in it was replaced (package redact), so it differs
	// from what crossed the wire.
	Message  []byte `json:"msg,omitempty"`
	Redacted bool   `json:"redacted,omitempty"`

	// close
	Code          string `json:"code,omitempty"`
	StatusMessage string `json:"message,omitempty"`

	// gap
	Skipped int `json:"skipped,omitempty"`
	// SkippedBytes is the size of a frame left out because its record
	// alone is larger than the capture's files may hold in all
	// (--capture-max-bytes × --capture-max-files).
	SkippedBytes int `json:"skipped_bytes,omitempty"`
}

// line is a record's JSON line in format 2: the record but its message,
// and the length of the message written raw after the line.
type line struct {
	Record
	Len int `json:"len,omitempty"`
}

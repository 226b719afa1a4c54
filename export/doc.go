// Package export turns the tracker's events into what operators read: a live log, debug pages, metrics and spans.
package export

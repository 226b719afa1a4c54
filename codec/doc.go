// Package codec moves xDS frames through the tap without re-encoding them and reads their envelopes.
package codec

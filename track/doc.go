// Package track follows every xDS stream's ACK, NACK, nonce and version state from its decoded frames.
package track

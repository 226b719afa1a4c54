// Package xdstest starts real xDS peers on loopback for adstap's tests.
package xdstest

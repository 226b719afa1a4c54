// Package jaegertest runs a real Jaeger v2 on loopback for tests and reads back the spans it stored.
package jaegertest

// Package rollout tells how push rounds reached the fleet, from the spans every tap sent to Jaeger.
package rollout

// Package deploy holds adstap's manifests and rules; its tests check them.
package deploy

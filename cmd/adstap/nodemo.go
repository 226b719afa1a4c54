//go:build !demo

package main

import (
	"context"
	"fmt"
	"io"
)

// runDemo explains where the demo is: the shipped binary leaves it out, since
// it links a control plane and xDS clients the tap itself never needs.
func runDemo(_ context.Context, _ []string, _, stderr io.Writer) int {
	fmt.Fprintln(stderr, "adstap demo: this adstap is built without the demo (it would link a control plane and xDS clients into the tap); in adstap's source tree run: make demo")
	return exitUsage
}

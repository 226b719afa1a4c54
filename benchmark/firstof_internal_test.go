package benchmark

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestFirstOfPassesOverCancellations(t *testing.T) {
	altered := errors.New("stream 3 push 1 arrived altered")
	upstreamCanceled := fmt.Errorf("upstream: %w", status.Error(codes.Canceled, "context canceled"))
	ctxCanceled := fmt.Errorf("client: %w", context.Canceled)
	for _, tc := range []struct {
		name string
		errs []error
		want error
	}{
		{"none", []error{nil, nil}, nil},
		{"the first", []error{nil, altered, errors.New("later")}, altered},
		{"a cancellation, then its cause", []error{upstreamCanceled, altered}, altered},
		{"a context's cancellation, then its cause", []error{ctxCanceled, nil, altered}, altered},
		{"only cancellations: the first", []error{nil, upstreamCanceled, ctxCanceled}, upstreamCanceled},
	} {
		if got := firstOf(tc.errs...); got != tc.want {
			t.Errorf("%s: firstOf = %v, want %v", tc.name, got, tc.want)
		}
	}
}

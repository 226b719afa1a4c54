package pipeline

import (
	"context"

	"github.com/adstap/adstap/tap"
)

// The benchmarks feed frames to the tracking observer of a pipeline with no
// tap in front of it.

// NewUnstarted is a pipeline no tap feeds.
func NewUnstarted(cfg Config) (*Pipeline, error) { return newPipeline(context.Background(), cfg) }

// Tracking is the pipeline's tracking observer.
func (p *Pipeline) Tracking() *Observer { return p.tracking }

// TapObserver is what the tap would call: the tracking observer, then the
// outputs' adapters.
func (p *Pipeline) TapObserver() tap.Observer { return p.tapObserver }

// Close stops an unstarted pipeline.
func (p *Pipeline) Close(ctx context.Context) error { return p.close(ctx) }

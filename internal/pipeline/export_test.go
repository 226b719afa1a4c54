package pipeline

import "context"

// The benchmarks feed frames to the tracking observer of a pipeline with no
// tap in front of it.

// NewUnstarted is a pipeline no tap feeds.
func NewUnstarted(cfg Config) (*Pipeline, error) { return newPipeline(context.Background(), cfg) }

// Tracking is the pipeline's tracking observer.
func (p *Pipeline) Tracking() *Observer { return p.tracking }

// Close stops an unstarted pipeline.
func (p *Pipeline) Close(ctx context.Context) error { return p.close(ctx) }

package metrics

import "testing"

func TestLatencyBucketCountIsTheBuckets(t *testing.T) {
	if got, want := latencyBucketCount, len(latencyBuckets); got != want {
		t.Errorf("latencyBucketCount = %d, want len(latencyBuckets) = %d", got, want)
	}
}

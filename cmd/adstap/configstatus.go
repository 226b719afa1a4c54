package main

import (
	"context"
	"strconv"

	"github.com/adstap/adstap/export/csds"
	"github.com/adstap/adstap/export/retained"
	"github.com/adstap/adstap/track"
)

// configWithStatus is adstap config -o json: the resources, and each
// resource's status at the proxy as CSDS gives it (none when the tap does
// not follow resources one by one).
type configWithStatus struct {
	retained.Page
	Status []track.ResourceStatus `json:"resource_status,omitempty"`
}

// resourceStatuses reads the stream's resources of one type, one by one;
// nil from a tap that does not follow them.
func resourceStatuses(ctx context.Context, client *adminClient, stream uint64, short string) []track.ResourceStatus {
	var page csds.ResourcesPage
	if client.get(ctx, "/debug/resources?stream="+strconv.FormatUint(stream, 10)+"&type="+short, &page) != nil {
		return nil
	}
	var out []track.ResourceStatus
	for _, s := range page.Streams {
		out = append(out, s.Resources...)
	}
	return out
}

// resourceStatusCell is a resource's status beside its content: ACKED, or NACKED
// with the version it rejected.
func resourceStatusCell(byName map[string]track.ResourceStatus, name string) string {
	st, ok := byName[name]
	if !ok {
		return "-"
	}
	s := st.Status.String()
	if st.ErrorVersion != "" && st.Status == track.ClientNACKed {
		s += " (rejected " + st.ErrorVersion + ")"
	}
	return s
}

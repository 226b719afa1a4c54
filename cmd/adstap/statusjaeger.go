package main

import (
	"cmp"
	"context"
	"fmt"
	"io"

	"github.com/adstap/adstap/internal/rollout"
	"github.com/adstap/adstap/track"
)

// nackSpans fills the ERROR cells of a mesh report that know their NACK's
// trace with what the NACK's span says: the proxy's message, where the
// rejected resources came from, their Istio objects. It reads Jaeger once
// per push round, whatever the number of proxies. A Jaeger that cannot be
// read costs those words only: status says so and goes on.
func nackSpans(ctx context.Context, rep *statusReport, target string, stderr io.Writer) int {
	type cell struct {
		row int
		typ string
	}
	var refs []rollout.NACKRef
	var cells []cell
	for i, r := range rep.Proxies {
		for typ, c := range r.Types {
			if c.state != track.StateNACKed || c.TraceID == "" {
				continue
			}
			ref := rollout.NACKRef{TraceID: c.TraceID, Node: cmp.Or(c.nackNode, r.NodeID), Type: typ}
			if ref.Node == "" {
				ref.Pod = r.Name // pod.namespace, as the tap's resource attributes say it
			}
			refs, cells = append(refs, ref), append(cells, cell{i, typ})
		}
	}
	j, err := rollout.Dial(target)
	if err != nil {
		fmt.Fprintf(stderr, "adstap status: %v (see adstap status --help)\n", err)
		return exitUsage
	}
	defer j.Close()
	if len(refs) == 0 {
		return exitOK
	}
	nacks, err := rollout.NACKs(ctx, j, refs)
	if err != nil {
		fmt.Fprintf(stderr, "adstap status: --jaeger: %v; the NACKs' messages are not shown\n", err)
		return exitOK
	}
	for k, n := range nacks {
		if !n.Found {
			continue
		}
		at := cells[k]
		c := rep.Proxies[at.row].Types[at.typ]
		c.Message = cmp.Or(c.Message, n.Message)
		c.SourceWords, c.IstioConfig = n.Source, n.Objects
		rep.Proxies[at.row].Types[at.typ] = c
	}
	// The problems are said again, with the messages.
	rep.Problems = rep.Problems[:0]
	rep.finish()
	return exitOK
}

package references

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/adstap/adstap/export"
	"github.com/adstap/adstap/export/internal/shared"
	"github.com/adstap/adstap/track"
)

// NotSentLog writes the live log's lines about resources a proxy asked for
// by name and did not get (track.ResourceNotSent), once each, and when one
// arrives or is no longer asked for. With the reference check on, a line
// names what refers to the resource in what the proxy accepted, and the
// Istio object behind that reference: read on the log writer's goroutine
// (later), never on an observation worker.
type NotSentLog struct {
	log    *slog.Logger
	detail bool
	refs   *References
	later  func(func()) bool
}

var _ track.Sink = (*NotSentLog)(nil)

// NewNotSentLog logs to l; refs (nil without the reference check) and
// later (nil: write at once, without what refers to the resource) as
// above.
func NewNotSentLog(l *slog.Logger, refs *References, later func(func()) bool) *NotSentLog {
	_, human := l.Handler().(*export.Pretty)
	return &NotSentLog{log: l, detail: !human, refs: refs, later: later}
}

// OnEvent writes the lines.
func (n *NotSentLog) OnEvent(e track.Event) {
	switch e := e.(type) {
	case track.ResourceNotSent:
		if n.refs != nil && n.later != nil && n.later(func() { n.notSent(e, n.referrers(e)) }) {
			return
		}
		n.notSent(e, nil)
	case track.ResourceNotSentEnded:
		how := "no longer asked for"
		if e.Arrived {
			how = "arrived"
		}
		n.line(slog.LevelInfo, fmt.Sprintf("%s %s on stream %d %s%s", shared.TypeLabel(e.TypeURL), e.Name, e.StreamID, how, shared.NodeSuffix(e.Node.ID)),
			"stream", e.StreamID, "node", e.Node.ID, "type_url", e.TypeURL, "resource", e.Name, "arrived", e.Arrived)
	}
}

// referrers are the dangling references of the proxy whose target is the
// resource: what waits on it.
func (n *NotSentLog) referrers(e track.ResourceNotSent) []DanglingReference {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	var out []DanglingReference
	for _, d := range n.refs.Dangling(ctx, e.Node.ID) {
		if d.Target == e.Name {
			out = append(out, d)
		}
	}
	return out
}

func (n *NotSentLog) notSent(e track.ResourceNotSent, refs []DanglingReference) {
	what := fmt.Sprintf("asked for %s ago and never sent", e.At.Sub(e.Since).Round(time.Second))
	if e.Removed {
		what = "removed by the control plane while still asked for"
	}
	var by []string
	var objects []string
	for _, d := range refs {
		s := d.OwnerType + " " + d.Owner
		if d.IstioConfig != nil {
			o := d.IstioConfig.Kind + " " + d.IstioConfig.Namespace + "/" + d.IstioConfig.Name
			s += " (from " + o + ")"
			objects = append(objects, d.IstioConfig.Path)
		}
		by = append(by, s)
	}
	msg := fmt.Sprintf("%s %s on stream %d %s: the proxy does not have it", shared.TypeLabel(e.TypeURL), e.Name, e.StreamID, what)
	if len(by) > 0 {
		msg += "; referred to by " + strings.Join(by, ", ")
	}
	n.line(slog.LevelWarn, msg+shared.NodeSuffix(e.Node.ID),
		"stream", e.StreamID, "node", e.Node.ID, "type_url", e.TypeURL, "resource", e.Name,
		"asked_at", e.Since, "removed", e.Removed, "referred_by", by, "istio_config", objects)
}

func (n *NotSentLog) line(level slog.Level, msg string, facts ...any) {
	if !n.detail {
		n.log.Log(context.Background(), level, msg)
		return
	}
	n.log.Log(context.Background(), level, msg, slog.Group(export.DetailGroup, facts...))
}

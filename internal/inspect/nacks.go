package inspect

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/adstap/adstap/origin"
	"github.com/adstap/adstap/track"
)

// nackGroup is every NACK of one stream and type with the same message.
type nackGroup struct {
	Stream        uint64
	Node          string
	TypeURL, Type string
	Message       string
	Code          int32
	// Versions are the rejected versions, distinct, in order. A NACK
	// carries the last accepted version; the rejected one is the version
	// of the push its nonce answers.
	Versions []string
	// Resources are the pushed names the message mentions.
	Resources []string
	// Objects are the Istio objects the rejected resources record as their
	// source, each once; Source says it in words (origin.Rejection.Summary)
	// for the group's first NACK whose push is in the files.
	Objects     []origin.Object
	Source      string
	Count       int
	First, Last time.Time
	// Late NACKs answered a push that had already timed out; Stale ones a
	// push that was no longer the latest.
	Late, Stale int
}

type nackKey struct {
	stream  uint64
	opened  time.Time
	typeURL string
	message string
}

type nackCollector struct {
	groups []*nackGroup
	byKey  map[nackKey]*nackGroup
	opened map[uint64]time.Time
	nonces map[pushKey]map[string]string // nonce -> version of every push
	total  int
}

func newNACKCollector() *nackCollector {
	return &nackCollector{byKey: map[nackKey]*nackGroup{}, opened: map[uint64]time.Time{}, nonces: map[pushKey]map[string]string{}}
}

func (c *nackCollector) note(note) {}

func (c *nackCollector) events(st *step, evs []track.Event) {
	var seen *track.RequestSeen
	var ended *track.PushEnded
	var late *track.LateAnswer
	for _, e := range evs {
		switch e := e.(type) {
		case track.StreamOpened:
			c.opened[e.Stream.ID] = e.Stream.OpenedAt
		case track.StreamClosed:
			delete(c.opened, e.Stream.ID)
			for k := range c.nonces {
				if k.stream == e.Stream.ID {
					delete(c.nonces, k)
				}
			}
		case track.PushSent:
			k := pushKey{e.Push.StreamID, e.Push.TypeURL}
			if c.nonces[k] == nil {
				c.nonces[k] = map[string]string{}
			}
			c.nonces[k][e.Push.Nonce] = e.Push.Version
		case track.RequestSeen:
			seen = &e
		case track.PushEnded:
			if e.Result == track.ResultNACK {
				ended = &e
			}
		case track.LateAnswer:
			if e.Result == track.ResultNACK {
				late = &e
			}
		}
	}
	if st.Req == nil || st.Req.ErrorDetail == nil || seen == nil {
		return
	}
	c.total++
	msg := st.Req.ErrorDetail.Message
	k := nackKey{stream: seen.StreamID, opened: c.opened[seen.StreamID], typeURL: seen.TypeURL, message: msg}
	g := c.byKey[k]
	if g == nil {
		g = &nackGroup{Stream: seen.StreamID, Node: seen.Node.ID, TypeURL: seen.TypeURL, Type: typeLabel(seen.TypeURL),
			Message: msg, Code: st.Req.ErrorDetail.Code, First: st.At}
		c.byKey[k] = g
		c.groups = append(c.groups, g)
	}
	g.Count++
	g.Last = st.At
	version, known := c.nonces[pushKey{seen.StreamID, seen.TypeURL}][seen.Nonce]
	var rejected *origin.Rejection
	switch {
	case ended != nil:
		rejected = origin.Of(ended.Rejected)
	case late != nil:
		rejected = origin.Of(late.Rejected)
	}
	if rejected != nil {
		if g.Source == "" {
			g.Source = rejected.Summary()
		}
		for _, o := range rejected.Objects() {
			if !slices.Contains(g.Objects, o) {
				g.Objects = append(g.Objects, o)
			}
		}
	}
	switch {
	case ended != nil:
		version, known = ended.Push.Version, true
		for _, n := range ended.ErrorNames {
			if !slices.Contains(g.Resources, n) {
				g.Resources = append(g.Resources, n)
			}
		}
	case late != nil:
		version, known = late.Push.Version, true
		g.Late++
	case seen.Kind == track.KindStale:
		g.Stale++
	}
	if !known {
		version = "(unknown: its push is not in the files)"
	}
	if !slices.Contains(g.Versions, version) {
		g.Versions = append(g.Versions, version)
	}
}

// result is the groups in the order of their first NACK's recorded time.
func (c *nackCollector) result() []*nackGroup {
	slices.SortStableFunc(c.groups, func(a, b *nackGroup) int { return cmpTime(a.First, b.First) })
	return c.groups
}

func (c *nackCollector) print(w io.Writer, files []fileRead) {
	if c.total == 0 {
		fmt.Fprintf(w, "no NACK in %s\n", fileList(files))
		return
	}
	fmt.Fprintf(w, "%s, %d distinct (stream, type, message)\n", plural(c.total, "NACK", "NACKs"), len(c.groups))
	for _, g := range c.result() {
		when := stamp(g.First)
		if g.Count > 1 {
			last := stamp(g.Last)
			if g.Last.Format(time.DateOnly) == g.First.Format(time.DateOnly) {
				last = clockTime(g.Last)
			}
			when += " … " + last
		}
		fmt.Fprintf(w, "\n%s  ×%d  stream %d  %s  node=%s\n", when, g.Count, g.Stream, g.Type, orDash(g.Node))
		fmt.Fprintf(w, "  rejected version: %s\n", strings.Join(g.Versions, ", "))
		if len(g.Resources) > 0 {
			fmt.Fprintf(w, "  resources named: %s\n", strings.Join(g.Resources, ", "))
		}
		if g.Source != "" {
			fmt.Fprintf(w, "  source: %s\n", g.Source)
		}
		for _, o := range g.Objects {
			fmt.Fprintf(w, "    %s\n", o.Kubectl())
		}
		if g.Late > 0 {
			fmt.Fprintf(w, "  %d answered a push after it had timed out\n", g.Late)
		}
		if g.Stale > 0 {
			fmt.Fprintf(w, "  %d answered an older push (stale nonce)\n", g.Stale)
		}
		code := ""
		if g.Code != 0 {
			code = fmt.Sprintf(" (code %s)", codes.Code(g.Code))
		}
		fmt.Fprintf(w, "  message%s: %s\n", code, indent(g.Message, "    "))
	}
}

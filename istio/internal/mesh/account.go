package mesh

import (
	"strings"

	"github.com/adstap/adstap/track"
)

// ProxyOfNode is istiod's proxy id for an Envoy-style node id
// (TYPE~IP~POD.NAMESPACE~DOMAIN): its third field.
func ProxyOfNode(node string) string {
	parts := strings.Split(node, "~")
	if len(parts) < 3 {
		return node
	}
	return parts[2]
}

// TapRounds counts, per istiod proxy id, the push rounds adstap's tracker
// reported in evs, by the same kinds as CountRounds: full pushes (track's
// FullPush events), incremental rounds (rounds of pushes neither full nor
// requested) and rounds answering the client's requests only.
func TapRounds(evs []track.Event) map[string]Count {
	type key struct {
		stream, round uint64
	}
	type round struct {
		proxy                         string
		full, partOfFull, unrequested bool
	}
	rounds := map[key]*round{}
	var order []key
	for _, e := range evs {
		switch e := e.(type) {
		case track.PushSent:
			k := key{e.Push.StreamID, e.Push.Round}
			r := rounds[k]
			if r == nil {
				r = &round{proxy: ProxyOfNode(e.Push.Node.ID)}
				rounds[k] = r
				order = append(order, k)
			}
			r.unrequested = r.unrequested || !e.Push.Requested
			r.partOfFull = r.partOfFull || e.Push.FullPush
		case track.FullPush:
			if r := rounds[key{e.StreamID, e.Round}]; r != nil {
				r.full = true
			}
		}
	}
	out := map[string]Count{}
	for _, k := range order {
		r := rounds[k]
		c := out[r.proxy]
		switch {
		case r.full:
			c.Full++
		case r.partOfFull:
			// The rest of a full push counted in an earlier round of the
			// same version (round.go).
			continue
		case r.unrequested:
			c.Incremental++
		default:
			c.Requests++
		}
		out[r.proxy] = c
	}
	return out
}

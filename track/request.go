package track

import (
	"unique"

	"github.com/adstap/adstap/codec"
)

// classified is what one request meant for its type.
type classified struct {
	kind    RequestKind
	changed bool // the subscription changed (not reported for the first request, which sets it)
	// answers is set when the request is the ACK or NACK of the latest push
	// and that push has not been answered yet.
	answers bool
	newType bool // the first request of the type on the stream
}

// classify applies a request to its type by the rules of XDS-NOTES.md: the
// nonce decides between initial, ACK/NACK and stale, error_detail between
// ACK and NACK (never the version, which a NACK keeps at the last accepted
// one), and the names change the subscription whatever the nonce, since a
// server honours the subscription changes of a stale request too.
func (ts *typeState) classify(req *codec.Request) classified {
	c := classified{newType: !ts.requested}
	switch {
	case req.ResponseNonce == "":
		c.kind = KindInitial
		if req.Delta && ts.requested {
			c.kind = KindSubscription
		}
	case ts.p.state != pushNone && req.ResponseNonce == ts.p.ev.Nonce:
		c.kind = KindACK
		if req.ErrorDetail != nil {
			c.kind = KindNACK
		}
		c.answers = ts.pending()
	case ts.unsure:
		c.kind = KindUnobserved
		// The client may have accepted a push the tap never saw: what the
		// tracker holds as its state is no longer known to be it.
		ts.baseline = false
	default:
		c.kind = KindStale
		ts.staleNonces++
	}
	var unsubscribed bool
	if req.Delta {
		c.changed, unsubscribed = ts.subscribeDelta(req, c.newType)
	} else {
		c.changed, unsubscribed = ts.subscribeSotW(req.ResourceNames, c.newType)
	}
	ts.requested = true
	if c.newType {
		c.changed = false
	}
	if unsubscribed {
		c.kind = KindUnsubscribe
	}
	return c
}

// subscribeSotW replaces the subscription with a SotW request's names.
// Empty names are the wildcard for LDS and CDS, and for any type that has
// never been named (the legacy wildcard, which istio-agent uses for NDS and
// istioctl for syncz); for a type that had names they are an unsubscribe.
func (ts *typeState) subscribeSotW(names []string, first bool) (changed, unsubscribed bool) {
	star := false
	named := 0
	for _, n := range names {
		if n == "*" {
			star = true
		} else {
			named++
		}
	}
	wildcard := star
	if named == 0 && !star {
		if ts.replaceType || !ts.explicit {
			wildcard = true
		} else {
			unsubscribed = len(ts.sub.names) > 0 || ts.wildcard
		}
	}
	if wildcard == ts.wildcard && ts.sameNames(names) && !first {
		return false, false
	}
	ts.wildcard = wildcard
	ts.setSub(names)
	if named > 0 {
		ts.explicit = true
	}
	ts.pruneUnsubscribed()
	return true, unsubscribed
}

// sameNames reports whether names, "*" aside, are the explicit subscription.
func (ts *typeState) sameNames(names []string) bool {
	sub := &ts.sub
	seen := ts.sc.marksFor(len(sub.names))
	n := 0
	var c cursor
	for _, name := range names {
		if name == "*" {
			continue
		}
		k := sub.findString(name, c.guess())
		c.found(k)
		if k < 0 {
			return false
		}
		if seen[k] == 0 {
			seen[k] = 1
			n++
		}
	}
	return n == len(sub.names)
}

// setSub makes names, "*" aside and each once, the explicit subscription, in
// their order. The names it had already are reused rather than interned
// again.
func (ts *typeState) setSub(names []string) {
	old := &ts.sub
	seen := ts.sc.marksFor(len(old.names))
	out := make([]name, 0, len(names))
	placed := ts.sc.added(len(names)) // new names, for the rare one listed twice
	defer placed.done()
	var c cursor
	for _, s := range names {
		if s == "*" {
			continue
		}
		k := old.findString(s, c.guess())
		c.found(k)
		if k >= 0 {
			if seen[k] == 0 {
				seen[k] = 1
				out = append(out, old.names[k])
			}
			continue
		}
		n := unique.Make(s)
		if _, dup := placed.find(n); dup {
			continue
		}
		placed.add(n, int32(len(out)))
		out = append(out, n)
	}
	ts.sub.reset(out)
}

// subscribeDelta applies a Delta request's subscribe and unsubscribe lists.
// The first request of a type that subscribes nothing is the legacy wildcard.
func (ts *typeState) subscribeDelta(req *codec.Request, first bool) (changed, unsubscribed bool) {
	wasEmpty := !first && ts.empty()
	for _, n := range req.Subscribe {
		if n == "*" {
			changed = changed || !ts.wildcard
			ts.wildcard = true
			continue
		}
		if ts.sub.findString(n, -1) < 0 {
			ts.sub.add(unique.Make(n))
			changed = true
		}
	}
	for _, n := range req.Unsubscribe {
		if n == "*" {
			changed = changed || ts.wildcard
			ts.wildcard = false
			continue
		}
		if k := ts.sub.findString(n, -1); k >= 0 {
			ts.sub.removeAt(k)
			changed = true
		}
	}
	if first && len(req.Subscribe) == 0 {
		ts.wildcard = true
		changed = true
	}
	if len(ts.sub.names) > 0 {
		ts.explicit = true
	}
	if changed {
		ts.pruneUnsubscribed()
	}
	unsubscribed = !first && !wasEmpty && len(req.Subscribe) == 0 && len(req.Unsubscribe) > 0 && ts.empty()
	return changed, unsubscribed
}

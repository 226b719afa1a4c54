package track

import (
	"slices"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/internal/canon"
)

// subscription is what the client asks for of one type on a stream: the
// wildcard, the names it subscribed explicitly (the nameSet), and whether
// it asked for the type at all. Only a request changes it (request.go).
type subscription struct {
	nameSet
	requested bool // the client asked for the type on this stream
	wildcard  bool
	// explicit is set once the client named resources of the type: from then
	// on, in SotW, an empty name list for a non-LDS/CDS type is an
	// unsubscribe rather than the legacy wildcard.
	explicit bool
	// replaceType marks LDS and CDS, whose SotW responses always carry the
	// whole set the client needs, so a name missing from one is removed.
	replaceType bool
	// shared, when set, is the tap-wide list the names are: read-only, as
	// the acknowledged state's (sharedstate.go).
	shared *sharedList[struct{}]
}

// subscriptions are the explicit subscriptions shared tap-wide: the
// sidecars of a namespace ask for the same endpoints, in the same order.
var subscriptions = &sharedStore[struct{}]{key: func(struct{}) uint64 { return 0 }}

// own makes the names the stream's own to change, copying them if they
// are shared.
func (sub *subscription) own() {
	if sub.shared != nil {
		sub.names, sub.shared = slices.Clone(sub.names), nil
	}
}

// share looks the names up tap-wide, at a tick: a Delta subscription
// changed name by name is shared once it rests.
func (sub *subscription) share() {
	if sub.shared != nil || len(sub.names) < sharedFrom {
		return
	}
	l := subscriptions.share(sub.names, make([]struct{}, len(sub.names)), true)
	sub.names, sub.shared = l.names, l
}

// empty reports whether the client wants nothing of the type.
func (sub *subscription) empty() bool { return !sub.wildcard && len(sub.names) == 0 }

// subscribeSotW replaces the subscription with a SotW request's names.
// Empty names are the wildcard for LDS and CDS (replaceType), and for any
// type that has never been named (the legacy wildcard, which istio-agent
// uses for NDS and istioctl for syncz); for a type that had names they are
// an unsubscribe. sc is the stream's scratch space.
func (sub *subscription) subscribeSotW(names []string, first bool, sc *scratch) (changed, unsubscribed bool) {
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
		if sub.replaceType || !sub.explicit {
			wildcard = true
		} else {
			unsubscribed = len(sub.names) > 0 || sub.wildcard
		}
	}
	if wildcard == sub.wildcard && sub.sameNames(names, sc) && !first {
		return false, false
	}
	sub.wildcard = wildcard
	sub.setNames(names, sc)
	if named > 0 {
		sub.explicit = true
	}
	return true, unsubscribed
}

// sameNames reports whether names, "*" aside, are the explicit subscription.
func (sub *subscription) sameNames(names []string, sc *scratch) bool {
	seen := sc.marksFor(len(sub.names))
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

// setNames makes names, "*" aside and each once, the explicit subscription,
// in their order. The names it had already are reused rather than interned
// again.
func (sub *subscription) setNames(names []string, sc *scratch) {
	old := &sub.nameSet
	seen := sc.marksFor(len(old.names))
	out, hashes, fresh := sc.state(len(names))
	defer func() { sc.done(out, hashes, fresh) }()
	placed := sc.added(len(names)) // new names, for the rare one listed twice
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
		n := canon.Make(s)
		if _, dup := placed.find(n); dup {
			continue
		}
		placed.add(n, int32(len(out)))
		out = append(out, n)
	}
	// The list is built in scratch space and copied once, or not at all
	// when another stream holds it already: a sync of many sidecars of a
	// namespace subscribes them all to the same endpoints, and a copy of
	// their own would be garbage between what they keep.
	if len(out) >= sharedFrom {
		l := subscriptions.share(out, make([]struct{}, len(out)), false)
		sub.reset(l.names)
		sub.shared = l
	} else {
		sub.reset(slices.Clone(out))
		sub.shared = nil
	}
	sub.idle()
}

// subscribeDelta applies a Delta request's subscribe and unsubscribe lists.
// The first request of a type that subscribes nothing is the legacy wildcard.
func (sub *subscription) subscribeDelta(req *codec.Request, first bool) (changed, unsubscribed bool) {
	wasEmpty := !first && sub.empty()
	if len(req.Subscribe) > 0 || len(req.Unsubscribe) > 0 {
		sub.own()
	}
	for _, n := range req.Subscribe {
		if n == "*" {
			changed = changed || !sub.wildcard
			sub.wildcard = true
			continue
		}
		if sub.findString(n, -1) < 0 {
			sub.add(canon.Make(n))
			changed = true
		}
	}
	for _, n := range req.Unsubscribe {
		if n == "*" {
			changed = changed || sub.wildcard
			sub.wildcard = false
			continue
		}
		if k := sub.findString(n, -1); k >= 0 {
			sub.removeAt(k)
			changed = true
		}
	}
	if first && len(req.Subscribe) == 0 {
		sub.wildcard = true
		changed = true
	}
	if len(sub.names) > 0 {
		sub.explicit = true
	}
	unsubscribed = !first && !wasEmpty && len(req.Subscribe) == 0 && len(req.Unsubscribe) > 0 && sub.empty()
	return changed, unsubscribed
}

// wants reports whether the client keeps the named resource: a client keeps
// only what it asked for. c follows the walk over the subscription.
func (sub *subscription) wants(n name, c *cursor) bool {
	if sub.wildcard || !sub.requested {
		return true
	}
	k := sub.findName(n, c.guess())
	c.found(k)
	return k >= 0
}

// carriedBy reports whether a push's resources, res, name every explicitly
// subscribed resource.
func (sub *subscription) carriedBy(res []pushedRes, sc *scratch) bool {
	if len(sub.names) == 0 {
		return false
	}
	seen := sc.marksFor(len(sub.names))
	n := 0
	var c cursor
	for i := range res {
		k := sub.findName(res[i].name, c.guess())
		c.found(k)
		if k < 0 {
			continue
		}
		if seen[k] == 0 {
			seen[k] = 1
			n++
		}
	}
	return n == len(sub.names)
}

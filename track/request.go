package track

import "github.com/adstap/adstap/codec"

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
// server honours the subscription changes of a stale request too. sc is
// the stream's scratch space.
func (ts *typeState) classify(req *codec.Request, sc *scratch) classified {
	c := classified{newType: !ts.sub.requested}
	switch {
	case req.ResponseNonce == "":
		c.kind = KindInitial
		if req.Delta && ts.sub.requested {
			c.kind = KindSubscription
		}
	case ts.sent.state != pushNone && req.ResponseNonce == ts.sent.nonce:
		c.kind = KindACK
		if req.ErrorDetail != nil {
			c.kind = KindNACK
		}
		c.answers = ts.sent.pending()
	case ts.out.unsure:
		c.kind = KindUnobserved
		// The client may have accepted a push the tap never saw: what the
		// tracker holds as its state is no longer known to be it.
		ts.acked.baseline = false
	default:
		c.kind = KindStale
		ts.out.staleNonces++
	}
	var unsubscribed bool
	if req.Delta {
		c.changed, unsubscribed = ts.sub.subscribeDelta(req, c.newType)
	} else {
		c.changed, unsubscribed = ts.sub.subscribeSotW(req.ResourceNames, c.newType, sc)
	}
	if c.changed {
		ts.acked.prune(&ts.sub)
	}
	ts.sub.requested = true
	if c.newType {
		c.changed = false
	}
	if unsubscribed {
		c.kind = KindUnsubscribe
	}
	return c
}

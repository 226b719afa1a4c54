package track

import (
	"strings"
	"sync/atomic"
)

// holding is what a type holds for a NACK of its latest push, beside the
// push's bytes, which the push holds while it awaits its answer
// (push.held, which hold.go fills): what outlives them, what the latest
// NACK rejected, and what NACKs were found to name.
type holding struct {
	// What outlives the push's bytes, for the next push to know whether the
	// acknowledged state can be trusted.
	//
	// pending: the push is still waiting for its answer; an ACK or a NACK
	// clears it (accepted, rejected).
	pending bool
	// fullSync: the push carried the whole of what the client wants.
	fullSync bool
	// unsure: the acknowledged state includes a push that was superseded
	// before its answer, which the tracker assumes applied. The client may
	// have rejected it, and then a resource of it sent again would look
	// unchanged while the client never accepted it: until an ACK of a
	// full-sync push vouches for the whole state, every resource counts as
	// changed.
	unsure bool

	// rejection is what the latest NACK rejected, until an ACK; a NACK of
	// the same content with the same message shares it, so a NACK loop
	// decodes its push once (memo says which content and message).
	rejection *Rejected
	// memo is what the latest NACKs were found to name and reject; nil
	// until the type's first NACK, since most types never see one.
	memo *nackMemo
}

// accepted lets go of what the type held for a NACK: its latest push, p,
// was acknowledged.
func (h *holding) accepted(k *keeper, p *push) {
	k.drop(&p.held)
	h.pending = false
	h.rejection.discard()
	h.rejection = nil
}

// closed lets go of what the type held, its stream gone; p is its latest
// push, nil when it has none.
func (h *holding) closed(k *keeper, p *push) {
	if p != nil {
		k.drop(&p.held)
	}
	h.pending = false
	h.rejection.discard()
}

// rejected returns the Rejection of the latest push, p, by a NACK with
// message naming names. The same content rejected with the same message
// again (a NACK loop) shares the previous one, which is decoded at most
// once.
func (h *holding) rejected(k *keeper, p *push, message string, names []string) *Rejected {
	c := h.cache()
	h.pending = false
	if h.rejection != nil && c.rejContent == p.content && c.rejMessage == message {
		k.drop(&p.held)
		return h.rejection
	}
	h.rejection.discard()
	h.rejection = k.reject(&p.held, p.delta, message, names)
	c.rejContent, c.rejMessage = p.content, message
	return h.rejection
}

// errorNames returns the names pushed in p, the latest push, that a NACK
// message mentions. Envoy names
// the rejected resources in its message; matching every pushed name against
// it is linear in the push, so the result is kept for the loop case, where
// the same content is rejected with the same message again and again.
func (h *holding) errorNames(p *push, message string, maxNames int) []string {
	c := h.cache()
	if c.ok && c.content == p.content && c.n == len(p.res) && c.message == message {
		return c.names
	}
	var names []string
	for _, r := range p.res {
		if len(names) == maxNames {
			break
		}
		if name := r.name.Value(); name != "" && strings.Contains(message, name) {
			names = append(names, name)
		}
	}
	c.ok, c.content, c.n, c.message, c.names = true, p.content, len(p.res), message, names
	return names
}

// nackMemo caches what NACKs name and reject, since a loop NACKs the same
// content with the same message again and again.
type nackMemo struct {
	// errNames are the pushed names a NACK of content (n resources) with
	// message mentions, once ok.
	ok      bool
	content uint64
	n       int
	message string
	names   []string
	// rejContent and rejMessage are the content and message of
	// holding.rejection.
	rejContent uint64
	rejMessage string
}

// cache returns the type's nackMemo, made on first need.
func (h *holding) cache() *nackMemo {
	if h.memo == nil {
		h.memo = new(nackMemo)
	}
	return h.memo
}

// drop lets go of what slot holds.
func (k *keeper) drop(slot *kept) {
	if slot.share != nil {
		k.unshare(slot.share)
		k.held.Add(-slot.size)
	}
	*slot = kept{}
}

// reject hands what slot holds to the Rejected of a NACK naming names.
func (k *keeper) reject(slot *kept, delta bool, message string, names []string) *Rejected {
	defer func() { *slot = kept{} }()
	r := &Rejected{Delta: delta, Message: message, Names: names}
	if slot.data != nil {
		r.keptBytes = keptBytes{data: slot.data, share: slot.share, size: slot.size, keeper: k, unchangedBits: slot.unchangedBits}
		r.OnlyChanged, r.Unchanged = slot.compact, slot.unchanged
	} else {
		r.NotKept = k.notKept(slot)
	}
	return r
}

// notKept says why slot holds no bytes of its push.
func (k *keeper) notKept(slot *kept) string {
	switch {
	case slot.skipped:
		return "adstap's bound on unanswered pushes (--nack-keep-bytes) was reached when it was sent"
	case k.limit < 0:
		return "keeping pushes is off (--nack-keep-bytes 0)"
	}
	return "its bytes were not given to the tracker"
}

// handOver moves what slot holds to a Changed for the push's PushEnded,
// when the keeper hands over (Tracker.TakeChanged) and holds bytes; nil
// otherwise.
func (k *keeper) handOver(slot *kept, delta bool) *Changed {
	if !k.handsOver || slot.data == nil {
		return nil
	}
	c := &Changed{Delta: delta, OnlyChanged: slot.compact,
		keptBytes: keptBytes{data: slot.data, share: slot.share, size: slot.size, keeper: k, unchangedBits: slot.unchangedBits}}
	*slot = kept{}
	return c
}

// accept hands what slot holds over for an ACK of its push, or for a newer
// push superseding it: to an Accepted leased to the takers in takers
// (lease.go), and to a Changed too when changed is set and the keeper hands
// over (Tracker.TakeChanged). Every holder of the bytes, the Changed and
// each lease, counts as an owner, and the last to let go frees them. Either
// is nil when not handed over.
func (k *keeper) accept(slot *kept, p *push, changed bool, takers takerSet) (*Changed, *Accepted) {
	if takers == 0 {
		if changed {
			return k.handOver(slot, p.delta), nil
		}
		return nil, nil
	}
	a := &Accepted{Version: p.ev.Version, Replace: p.replace, takers: takers}
	if slot.data == nil {
		a.NotKept = k.notKept(slot)
		return nil, a
	}
	a.Resources, a.Removed, a.Bytes = slot.views, slot.removed, slot.size
	if slot.owner {
		a.Bytes += slot.share.size
	}
	if slot.partial {
		a.Partial, a.Replace = true, false
	}
	a.kept = keptBytes{data: slot.data, share: slot.share, size: slot.size, keeper: k}
	owners := int32(takers.count())
	var c *Changed
	if changed && k.handsOver {
		c = &Changed{Delta: p.delta, OnlyChanged: slot.compact,
			keptBytes: keptBytes{data: slot.data, share: slot.share, size: slot.size, keeper: k, unchangedBits: slot.unchangedBits}}
		owners++
	}
	if owners > 1 {
		count := new(atomic.Int32)
		count.Store(owners)
		a.kept.owners = count
		if c != nil {
			c.owners = count
		}
	}
	*slot = kept{}
	return c, a
}

// takersOf are the takers of the accepted pushes of typeURL; superseded:
// of those superseded before their answer.
func (k *keeper) takersOf(typeURL string, superseded bool) takerSet {
	var s takerSet
	for i, tk := range k.takers {
		if (tk.Types == nil || tk.Types(typeURL)) && (tk.Superseded || !superseded) {
			s |= 1 << i
		}
	}
	return s
}

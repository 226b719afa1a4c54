package track

import "github.com/adstap/adstap/codec"

// refState is the tracker's diff and subscription logic as it was when the
// state was kept in string-keyed maps: slow, but obviously right. The
// differential test holds the indexed, interned implementation to it.
type refState struct {
	replaceType                   bool
	requested, wildcard, explicit bool
	sub                           map[string]uint64
	acked                         map[string]refAcked
	mark                          uint64
	res                           []refPushed
	removed                       []string
	delta, replace                bool
}

type refAcked struct {
	name       string
	hash, mark uint64
}

type refPushed struct {
	name      string
	hash      uint64
	heartbeat bool
}

func newRefState(url string) *refState {
	return &refState{
		replaceType: url == codec.TypeListener || url == codec.TypeCluster,
		sub:         make(map[string]uint64),
		acked:       make(map[string]refAcked),
	}
}

func (ts *refState) subscribed(name string) bool {
	if ts.wildcard || !ts.requested {
		return true
	}
	_, ok := ts.sub[name]
	return ok
}

func (ts *refState) empty() bool { return !ts.wildcard && len(ts.sub) == 0 }

func (ts *refState) pruneUnsubscribed() {
	if ts.wildcard {
		return
	}
	for name := range ts.acked {
		if _, ok := ts.sub[name]; !ok {
			delete(ts.acked, name)
		}
	}
}

// request applies a request's names the way classify does.
func (ts *refState) request(req *codec.Request) (changed, unsubscribed bool) {
	first := !ts.requested
	if req.Delta {
		changed, unsubscribed = ts.subscribeDelta(req, first)
	} else {
		changed, unsubscribed = ts.subscribeSotW(req.ResourceNames, first)
	}
	ts.requested = true
	if first {
		changed = false
	}
	return changed, unsubscribed
}

func (ts *refState) subscribeSotW(names []string, first bool) (changed, unsubscribed bool) {
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
			unsubscribed = len(ts.sub) > 0 || ts.wildcard
		}
	}
	if wildcard == ts.wildcard && ts.sameNames(names) && !first {
		return false, false
	}
	ts.wildcard = wildcard
	clear(ts.sub)
	for _, n := range names {
		if n != "*" {
			ts.sub[n] = 0
		}
	}
	if named > 0 {
		ts.explicit = true
	}
	ts.pruneUnsubscribed()
	return true, unsubscribed
}

func (ts *refState) sameNames(names []string) bool {
	ts.mark++
	seen := ts.mark
	n := 0
	for _, name := range names {
		if name == "*" {
			continue
		}
		v, ok := ts.sub[name]
		if !ok {
			return false
		}
		if v != seen {
			ts.sub[name] = seen
			n++
		}
	}
	return n == len(ts.sub)
}

func (ts *refState) subscribeDelta(req *codec.Request, first bool) (changed, unsubscribed bool) {
	wasEmpty := !first && ts.empty()
	for _, n := range req.Subscribe {
		if n == "*" {
			changed = changed || !ts.wildcard
			ts.wildcard = true
			continue
		}
		if _, ok := ts.sub[n]; !ok {
			ts.sub[n] = 0
			changed = true
		}
	}
	for _, n := range req.Unsubscribe {
		if n == "*" {
			changed = changed || ts.wildcard
			ts.wildcard = false
			continue
		}
		if _, ok := ts.sub[n]; ok {
			delete(ts.sub, n)
			changed = true
		}
	}
	if first && len(req.Subscribe) == 0 {
		ts.wildcard = true
		changed = true
	}
	if len(ts.sub) > 0 {
		ts.explicit = true
	}
	if changed {
		ts.pruneUnsubscribed()
	}
	unsubscribed = !first && !wasEmpty && len(req.Subscribe) == 0 && len(req.Unsubscribe) > 0 && ts.empty()
	return changed, unsubscribed
}

// push loads a response and diffs it, as send does.
func (ts *refState) push(resp *codec.Response, maxNames int) (Diff, bool) {
	ts.res = ts.res[:0]
	for _, r := range resp.Resources {
		ts.res = append(ts.res, refPushed{name: string(r.Name), hash: r.Hash, heartbeat: r.Heartbeat})
	}
	ts.removed = append(ts.removed[:0], resp.RemovedResources...)
	ts.delta = resp.Delta
	ts.replace = !resp.Delta && (ts.replaceType || ts.wildcard || !ts.requested)
	return ts.diff(maxNames)
}

func (ts *refState) diff(maxNames int) (d Diff, full bool) {
	ts.mark++
	seen := ts.mark
	matched := 0
	for _, r := range ts.res {
		e, ok := ts.acked[r.name]
		if !ok {
			if !r.heartbeat {
				d.Added++
				d.AddedNames = appendCapped(d.AddedNames, r.name, maxNames)
			}
			continue
		}
		if e.mark == seen {
			continue
		}
		e.mark = seen
		ts.acked[r.name] = e
		matched++
		if r.heartbeat || e.hash == r.hash {
			d.Unchanged++
		} else {
			d.Changed++
			d.ChangedNames = appendCapped(d.ChangedNames, r.name, maxNames)
		}
	}
	switch {
	case ts.delta:
		for _, name := range ts.removed {
			if e, ok := ts.acked[name]; ok && e.mark != seen {
				e.mark = seen
				ts.acked[name] = e
				d.Removed++
				d.RemovedNames = appendCapped(d.RemovedNames, name, maxNames)
			}
		}
	case ts.replace:
		d.Removed = len(ts.acked) - matched
		if d.Removed > 0 {
			d.RemovedNames = ts.firstUnmarked(seen, maxNames)
		}
	}
	if len(ts.res) == 0 {
		return d, false
	}
	switch {
	case ts.replace:
		full = true
	case ts.delta && ts.wildcard:
		full = matched+d.Removed == len(ts.acked)
	default:
		full = ts.carriesSubscription()
	}
	return d, full
}

func (ts *refState) carriesSubscription() bool {
	if len(ts.sub) == 0 {
		return false
	}
	ts.mark++
	seen := ts.mark
	n := 0
	for _, r := range ts.res {
		if v, ok := ts.sub[r.name]; ok && v != seen {
			ts.sub[r.name] = seen
			n++
		}
	}
	return n == len(ts.sub)
}

func (ts *refState) firstUnmarked(seen uint64, maxNames int) []string {
	var out []string
	for name, e := range ts.acked {
		if e.mark == seen {
			continue
		}
		if len(out) == maxNames && name >= out[len(out)-1] {
			continue
		}
		i := len(out)
		for i > 0 && out[i-1] > name {
			i--
		}
		if len(out) < maxNames {
			out = append(out, "")
		}
		copy(out[i+1:], out[i:len(out)-1])
		out[i] = name
	}
	return out
}

func (ts *refState) apply() {
	ts.mark++
	seen := ts.mark
	for _, r := range ts.res {
		e, ok := ts.acked[r.name]
		if r.heartbeat {
			if ok {
				e.mark = seen
				ts.acked[r.name] = e
			}
			continue
		}
		if !ts.subscribed(r.name) {
			continue
		}
		if !ok {
			e.name = r.name
		}
		e.hash, e.mark = r.hash, seen
		ts.acked[e.name] = e
	}
	if ts.replace {
		for name, e := range ts.acked {
			if e.mark != seen {
				delete(ts.acked, name)
			}
		}
	}
	for _, name := range ts.removed {
		delete(ts.acked, name)
	}
}

package inspect

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/adstap/adstap/export"
	"github.com/adstap/adstap/track"
)

// pushDiff is one push of the version (or push id) asked for, on one
// stream.
type pushDiff struct {
	Stream         uint64
	Node           string
	TypeURL, Type  string
	Version, Nonce string
	// PushID is the push round's identity (track.Push.PushID): the version
	// of a full push, more for an incremental one, which released istiod
	// versions send under the version of the last full push.
	PushID              string
	FullPush, Requested bool
	At                  time.Time
	Resources           int
	Bytes               int
	// Added, Removed and Changed are every name, against the state the
	// client had accepted (the tracker's diff, uncapped).
	Added, Removed, Changed []string
	Unchanged               int
	FullSync, Redundant     bool
	// Result is how the push ended (ack, nack, superseded, timeout,
	// closed), "" if the files end first.
	Result  string
	Latency time.Duration
	Error   string // the NACK's message
	// Details, with --resources: every resource of the push in order.
	Details    []resourceDetail
	DetailsErr string
}

// resourceDetail is one resource of a push, decoded.
type resourceDetail struct {
	Name    string
	Status  string // added, changed, unchanged, heartbeat
	TypeURL string
	JSON    string // indented
	// Changes, for a changed resource, against the last version of it the
	// client accepted on this stream; NoPrevious when that version is not
	// in the files (the stream began before them).
	Changes    []fieldChange
	NoPrevious bool
}

type pushKey struct {
	stream  uint64
	typeURL string
}

// pushTrack follows one type of one stream: the resources the client
// accepted (as bytes, by name), as the tracker hands accepted pushes over,
// and the report of the latest push.
type pushTrack struct {
	acked  map[string]body
	nonce  string
	report *pushDiff
	// redacted: the capture replaced the secrets of the latest push's
	// record, which is the one the tracker hands over next (accepted, or
	// superseded by the next push and assumed applied).
	redacted bool
}

type pushes struct {
	version   string
	resources bool
	found     []*pushDiff
	versions  []string
	seen      map[string]bool
	tracks    map[pushKey]*pushTrack
	// taker leases what the tracker hands over of each accepted push, with
	// --resources: the client's state that a changed resource is compared
	// with. The tracker alone knows which push awaits its answer.
	taker *track.Taker
}

func newPushes(version string, resources bool) *pushes {
	return &pushes{version: version, resources: resources, seen: map[string]bool{}, tracks: map[pushKey]*pushTrack{}}
}

// take takes every accepted push with --resources, and those superseded
// before their answer, which the tracker assumes applied.
func (p *pushes) take(tr *track.Tracker) *track.Taker {
	if p.resources {
		p.taker = tr.TakeAccepted(track.Takes{Superseded: true})
	}
	return p.taker
}

func (p *pushes) note(note) {}

func (p *pushes) track(k pushKey) *pushTrack {
	t := p.tracks[k]
	if t == nil {
		t = &pushTrack{acked: map[string]body{}}
		p.tracks[k] = t
	}
	return t
}

// accept makes what the tracker handed over of an accepted push what the
// client has: the whole of its type when it replaces it, else what it
// added, changed and removed. The bodies are copied: the views are the
// tracker's until the lease is released.
func (t *pushTrack) accept(a *track.Accepted) {
	if a.NotKept != "" {
		// What the client holds is not known from here on: a changed
		// resource shows with no previous version rather than against a
		// stale one.
		t.acked = map[string]body{}
		return
	}
	next := t.acked
	if a.Replace {
		next = make(map[string]body, len(a.Resources))
	}
	for _, n := range a.Removed {
		delete(next, n)
	}
	for _, v := range a.Resources {
		if v.Unchanged {
			if b, ok := t.acked[v.Name]; ok {
				next[v.Name] = b // as it was, a heartbeat's too
				continue
			}
			if v.Body == nil {
				continue
			}
		}
		next[v.Name] = body{name: v.Name, typeURL: v.TypeURL, value: slices.Clone(v.Body), redacted: t.redacted}
	}
	t.acked = next
}

// accepted applies the push e ended if its lease is the taker's, and lets
// go of the lease.
func (p *pushes) accepted(push *track.Push, a *track.Accepted) {
	l := p.taker.Lease(a)
	defer l.Release()
	if t := p.tracks[pushKey{push.StreamID, push.TypeURL}]; t != nil && l != nil {
		t.accept(l.Accepted())
	}
}

func (p *pushes) events(st *step, evs []track.Event) {
	for _, e := range evs {
		switch e := e.(type) {
		case track.PushSent:
			p.sent(st, e.Push)
		case track.PushEnded:
			p.accepted(e.Push, e.Accepted)
			t := p.tracks[pushKey{e.Push.StreamID, e.Push.TypeURL}]
			if t == nil || t.nonce != e.Push.Nonce {
				continue
			}
			if t.report != nil {
				t.report.Result, t.report.Latency, t.report.Error = string(e.Result), e.Latency, e.Error
			}
		case track.LateAnswer:
			p.accepted(e.Push, e.Accepted)
			t := p.tracks[pushKey{e.Push.StreamID, e.Push.TypeURL}]
			if t == nil || t.nonce != e.Push.Nonce {
				continue
			}
			if t.report != nil {
				t.report.Result, t.report.Latency = string(e.Result)+" (late)", e.Latency
			}
		case track.StreamClosed:
			for k := range p.tracks {
				if k.stream == e.Stream.ID {
					delete(p.tracks, k)
				}
			}
		}
	}
}

func (p *pushes) sent(st *step, push *track.Push) {
	if !p.seen[push.Version] {
		p.seen[push.Version] = true
		p.versions = append(p.versions, push.Version)
	}
	t := p.track(pushKey{push.StreamID, push.TypeURL})
	t.nonce, t.report = push.Nonce, nil
	t.redacted = st.Rec != nil && st.Rec.Redacted
	var bodies []body
	var decodeErr error
	if p.resources && st.Resp != nil && st.Rec != nil {
		bodies, decodeErr = decodeBodies(st.Rec.Message, st.Delta, st.Rec.Redacted, st.Resp)
	}
	id := push.PushID()
	if push.Version != p.version && id != p.version {
		return
	}
	d := push.Diff
	r := &pushDiff{
		Stream: push.StreamID, Node: push.Node.ID, TypeURL: push.TypeURL, Type: typeLabel(push.TypeURL),
		Version: push.Version, Nonce: push.Nonce, PushID: id, FullPush: push.FullPush, Requested: push.Requested, At: push.SentAt, Resources: push.Resources, Bytes: push.Bytes,
		Added: slices.Clone(d.AddedNames), Removed: slices.Clone(d.RemovedNames), Changed: slices.Clone(d.ChangedNames),
		Unchanged: d.Unchanged, FullSync: push.FullSync, Redundant: push.Redundant,
	}
	t.report = r
	p.found = append(p.found, r)
	if !p.resources {
		return
	}
	if decodeErr != nil {
		r.DetailsErr = decodeErr.Error()
		return
	}
	added, changed := set(r.Added), set(r.Changed)
	for _, b := range bodies {
		det := resourceDetail{Name: b.name, TypeURL: b.typeURL}
		switch {
		case b.heartbeat:
			det.Status = "heartbeat"
			r.Details = append(r.Details, det)
			continue
		case added[b.name]:
			det.Status = "added"
		case changed[b.name]:
			det.Status = "changed"
		default:
			det.Status = "unchanged"
		}
		v, err := resourceJSON(b)
		if err != nil {
			det.JSON = err.Error()
			r.Details = append(r.Details, det)
			continue
		}
		var sb strings.Builder
		writeJSON(&sb, v, "", false)
		det.JSON = sb.String()
		if det.Status == "changed" {
			prev, ok := t.acked[b.name]
			if !ok {
				det.NoPrevious = true
			} else if pv, err := resourceJSON(prev); err == nil {
				det.Changes = diffJSON(pv, v)
			}
		}
		r.Details = append(r.Details, det)
	}
}

func set(names []string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}

// result is every push found, in the order of their recorded times: a
// capture orders records by stream only roughly, since each stream's are
// written by its own goroutine.
func (p *pushes) result() []*pushDiff {
	slices.SortStableFunc(p.found, func(a, b *pushDiff) int { return cmpTime(a.At, b.At) })
	return p.found
}

func (p *pushes) print(w io.Writer, files []fileRead) {
	found := p.result()
	if len(found) == 0 {
		fmt.Fprintf(w, "no push of version %q in %s\n", p.version, fileList(files))
		if len(p.versions) > 0 {
			fmt.Fprintf(w, "versions pushed: %s\n", strings.Join(p.versions, ", "))
		}
		return
	}
	streams := map[uint64]bool{}
	for _, r := range found {
		streams[r.Stream] = true
	}
	fmt.Fprintf(w, "version %s: %s on %s\n", p.version, plural(len(found), "push", "pushes"), plural(len(streams), "stream", "streams"))
	// A version can carry several push rounds (released istiod sends its
	// incremental pushes under the last full push's version): each is shown
	// under its push id.
	var ids []string
	rounds := map[string][]*pushDiff{}
	for _, r := range found {
		if rounds[r.PushID] == nil {
			ids = append(ids, r.PushID)
		}
		rounds[r.PushID] = append(rounds[r.PushID], r)
	}
	for _, id := range ids {
		p.printRound(w, id, rounds[id])
	}
}

// printRound prints the pushes of one push round.
func (p *pushes) printRound(w io.Writer, id string, found []*pushDiff) {
	kind := "incremental push"
	full, requested := false, true
	streams := map[uint64]bool{}
	for _, r := range found {
		full = full || r.FullPush
		requested = requested && r.Requested
		streams[r.Stream] = true
	}
	switch {
	case full:
		kind = "full push"
	case requested:
		kind = "answers to the clients' requests"
	}
	fmt.Fprintf(w, "\npush %s: %s, %s on %s\n", orDash(id), kind, plural(len(found), "push", "pushes"), plural(len(streams), "stream", "streams"))
	for _, r := range found {
		fmt.Fprintf(w, "\nstream %d  %s  node=%s  %s  %s, %s  +%d -%d ~%d =%d", r.Stream, r.Type, orDash(r.Node), stamp(r.At),
			plural(r.Resources, "resource", "resources"), export.Size(r.Bytes), len(r.Added), len(r.Removed), len(r.Changed), r.Unchanged)
		if r.FullSync {
			fmt.Fprint(w, "  full")
		}
		if r.Redundant {
			fmt.Fprint(w, "  redundant")
		}
		switch r.Result {
		case "":
			fmt.Fprint(w, "  unanswered at the end of the capture")
		case string(track.ResultACK), string(track.ResultNACK):
			fmt.Fprintf(w, "  %s %s", strings.ToUpper(r.Result), export.Latency(r.Latency))
		default:
			fmt.Fprintf(w, "  %s after %s", strings.ToUpper(r.Result), export.Latency(r.Latency))
		}
		fmt.Fprintln(w)
		if r.Error != "" {
			fmt.Fprintf(w, "  rejected: %s\n", indent(r.Error, "    "))
		}
		if r.Details == nil {
			for _, n := range r.Added {
				fmt.Fprintf(w, "  + %s\n", n)
			}
			for _, n := range r.Changed {
				fmt.Fprintf(w, "  ~ %s\n", n)
			}
		}
		if r.DetailsErr != "" {
			fmt.Fprintf(w, "  (resources not shown: %s)\n", r.DetailsErr)
		}
		for _, d := range r.Details {
			mark := map[string]string{"added": "+", "changed": "~", "unchanged": "=", "heartbeat": "="}[d.Status]
			fmt.Fprintf(w, "  %s %s  (%s, %s)\n", mark, d.Name, d.Status, typeName(d.TypeURL))
			if d.Status == "changed" {
				switch {
				case d.NoPrevious:
					fmt.Fprintln(w, "      (the version the client accepted before is not in these files)")
				case len(d.Changes) == 0:
					fmt.Fprintln(w, "      (no difference in the decoded fields: the bytes differ in encoding only)")
				}
				for _, c := range d.Changes {
					fmt.Fprintf(w, "      %s\n", c)
				}
			}
			if d.JSON != "" {
				fmt.Fprintf(w, "      %s\n", indent(d.JSON, "      "))
			}
		}
		for _, n := range r.Removed {
			fmt.Fprintf(w, "  - %s\n", n)
		}
	}
}

func typeName(typeURL string) string {
	if typeURL == "" {
		return "no body"
	}
	return typeURL[strings.LastIndexByte(typeURL, '/')+1:]
}

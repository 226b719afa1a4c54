package inspect

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/export"
	"github.com/adstap/adstap/track"
)

// summary is what a replay found, per stream and type.
type summary struct {
	Files       []fileRead
	First, Last time.Time // the earliest and latest recorded times
	Streams     []*streamSummary
	// Episodes are the detector episodes, in the order they started.
	Episodes []episode
}

// streamSummary is one stream.
type streamSummary struct {
	ID, Conn         uint64
	Node             string
	Method, Protocol string
	Peer             string
	Opened           time.Time
	// Partial: the stream began before the first file read.
	Partial bool
	// Closed is zero for a stream still open at the end of the files.
	Closed        time.Time
	CloseCode     string
	CloseMessage  string
	FullSync      *time.Duration // time to full sync, nil if never reached
	FullSyncTypes []string       // short names, e.g. CDS
	DecodeErrors  int
	Skipped       int // frames relayed but not captured (gap records)
	Types         []*typeSummary
}

// typeSummary is one type of one stream.
type typeSummary struct {
	TypeURL, Type string // Type is the short label: CDS, EDS, ...
	Pushes        int
	ACKs, NACKs   int
	// Superseded, Timeouts and Closed are pushes that ended without an
	// answer; LateAnswers came after a timeout.
	Superseded, Timeouts, Closed, LateAnswers int
	ACKLatency                                latencyPercentiles
	FullInitial, FullRepeated                 int
	Redundant                                 int
	StaleNonces                               int
	Storms, Loops                             int // detector episodes started
	LastVersion                               string
	LastResult                                string // ack, nack, superseded, timeout, closed; "" while open
}

// latencyPercentiles of ACK latency, by the nearest-rank method.
type latencyPercentiles struct {
	N             int
	P50, P90, P99 time.Duration
}

// episode is a detector episode.
type episode struct {
	Detector string
	Key      string
	Started  time.Time
	Detail   string
	Ended    time.Time // zero while it lasts
	Duration time.Duration
	Count    int // at the end, or at the start while it lasts
}

type summarizer struct {
	streams  []*streamSummary
	current  map[uint64]*streamSummary // by id, the latest stream with it
	types    map[*streamSummary]map[string]*typeAcc
	episodes []episode
	active   map[string]int // episode key+detector -> index
	first    time.Time
	last     time.Time
}

type typeAcc struct {
	typeSummary
	latencies []time.Duration
	lastNonce string
}

func newSummarizer() *summarizer {
	return &summarizer{
		current: map[uint64]*streamSummary{},
		types:   map[*streamSummary]map[string]*typeAcc{},
		active:  map[string]int{},
	}
}

func (s *summarizer) note(n note) { s.seen(n.at) }

func (s *summarizer) seen(t time.Time) {
	if t.IsZero() {
		return
	}
	if s.first.IsZero() || t.Before(s.first) {
		s.first = t
	}
	if t.After(s.last) {
		s.last = t
	}
}

func (s *summarizer) typeOf(id uint64, url string) *typeAcc {
	ss := s.current[id]
	if ss == nil {
		return nil
	}
	m := s.types[ss]
	t := m[url]
	if t == nil {
		t = &typeAcc{typeSummary: typeSummary{TypeURL: url, Type: typeLabel(url)}}
		m[url] = t
		ss.Types = append(ss.Types, &t.typeSummary)
	}
	return t
}

func (s *summarizer) node(id uint64, node string) {
	if ss := s.current[id]; ss != nil && ss.Node == "" {
		ss.Node = node
	}
}

func (s *summarizer) events(st *step, evs []track.Event) {
	if st.Rec != nil {
		s.seen(st.At)
	}
	for _, e := range evs {
		switch e := e.(type) {
		case track.StreamOpened:
			m := e.Stream
			ss := &streamSummary{ID: m.ID, Conn: m.ConnID, Method: m.Method, Protocol: string(m.Protocol), Peer: m.Peer, Opened: m.OpenedAt,
				Partial: st.Rec != nil && st.Rec.Reopened}
			s.streams = append(s.streams, ss)
			s.current[m.ID] = ss
			s.types[ss] = map[string]*typeAcc{}
		case track.StreamClosed:
			if ss := s.current[e.Stream.ID]; ss != nil {
				s.node(e.Stream.ID, e.Node.ID)
				ss.Closed, ss.CloseCode, ss.CloseMessage = e.At, codes.Code(e.Code).String(), e.Message
				s.finish(ss)
				delete(s.current, e.Stream.ID)
			}
		case track.RequestSeen:
			s.node(e.StreamID, e.Node.ID)
			if t := s.typeOf(e.StreamID, e.TypeURL); t != nil && e.Kind == track.KindStale {
				t.StaleNonces++
			}
		case track.PushSent:
			p := e.Push
			s.node(p.StreamID, p.Node.ID)
			if t := s.typeOf(p.StreamID, p.TypeURL); t != nil {
				t.Pushes++
				if p.FullSync && p.Initial {
					t.FullInitial++
				} else if p.FullSync {
					t.FullRepeated++
				}
				if p.Redundant {
					t.Redundant++
				}
				t.LastVersion, t.LastResult, t.lastNonce = p.Version, "", p.Nonce
			}
		case track.PushEnded:
			t := s.typeOf(e.Push.StreamID, e.Push.TypeURL)
			if t == nil {
				continue
			}
			switch e.Result {
			case track.ResultACK:
				t.ACKs++
				t.latencies = append(t.latencies, e.Latency)
			case track.ResultNACK:
				t.NACKs++
			case track.ResultSuperseded:
				t.Superseded++
			case track.ResultTimeout:
				t.Timeouts++
			case track.ResultClosed:
				t.Closed++
			}
			if e.Push.Nonce == t.lastNonce {
				t.LastResult = string(e.Result)
			}
		case track.LateAnswer:
			if t := s.typeOf(e.Push.StreamID, e.Push.TypeURL); t != nil {
				t.LateAnswers++
				if e.Push.Nonce == t.lastNonce {
					t.LastResult = string(e.Result) + " (late)"
				}
			}
		case track.FullSyncComplete:
			if ss := s.current[e.StreamID]; ss != nil {
				d := e.Elapsed
				ss.FullSync = &d
				ss.FullSyncTypes = nil
				for _, u := range e.Types {
					ss.FullSyncTypes = append(ss.FullSyncTypes, typeLabel(u))
				}
			}
		case track.DecodeError:
			if ss := s.current[e.StreamID]; ss != nil {
				ss.DecodeErrors++
			}
		case track.ObservationGap:
			if ss := s.current[e.StreamID]; ss != nil {
				ss.Skipped += e.Skipped
			}
		case track.DetectorStarted:
			if e.StreamID != 0 {
				if t := s.typeOf(e.StreamID, e.TypeURL); t != nil {
					switch e.Detector {
					case track.DetectorNACKStorm:
						t.Storms++
					case track.DetectorNACKLoop:
						t.Loops++
					}
				}
			}
			s.active[e.Detector+"\x00"+e.Key] = len(s.episodes)
			s.episodes = append(s.episodes, episode{Detector: e.Detector, Key: e.Key, Started: e.At, Detail: e.Detail, Count: e.Count})
		case track.DetectorEnded:
			k := e.Detector + "\x00" + e.Key
			if i, ok := s.active[k]; ok {
				ep := &s.episodes[i]
				ep.Ended, ep.Duration, ep.Count = e.At, e.Duration, e.Count
				delete(s.active, k)
			}
		}
	}
}

// finish computes what is known once a stream is over (or the files are).
func (s *summarizer) finish(ss *streamSummary) {
	for _, t := range s.types[ss] {
		t.ACKLatency = percentiles(t.latencies)
	}
}

func (s *summarizer) result(files []fileRead) *summary {
	for _, ss := range s.current {
		s.finish(ss)
	}
	// Each stream's records are written by its own goroutine in the tap, so
	// a file's order across streams is only roughly the order of time.
	slices.SortStableFunc(s.streams, func(a, b *streamSummary) int {
		if c := cmpTime(a.Opened, b.Opened); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	return &summary{Files: files, First: s.first, Last: s.last, Streams: s.streams, Episodes: s.episodes}
}

func percentiles(ds []time.Duration) latencyPercentiles {
	if len(ds) == 0 {
		return latencyPercentiles{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := func(p float64) time.Duration {
		i := int(math.Ceil(p/100*float64(len(s)))) - 1
		return s[max(0, min(i, len(s)-1))]
	}
	return latencyPercentiles{N: len(s), P50: rank(50), P90: rank(90), P99: rank(99)}
}

func shortMethod(m string) string {
	if i := strings.LastIndex(m, "/"); i >= 0 {
		return m[i+1:]
	}
	return m
}

func printSummary(w io.Writer, s *summary) {
	fmt.Fprintln(w, "SUMMARY")
	records := 0
	var names []string
	for _, f := range s.Files {
		records += f.Records
		n := f.Name
		if f.Truncated {
			n += " (cut short)"
		}
		names = append(names, n)
	}
	fmt.Fprintf(w, "read %s from %s\n", plural(records, "record", "records"), strings.Join(names, ", "))
	if len(s.Files) > 0 {
		h := s.Files[0].Header
		last := stamp(s.Last)
		if s.Last.Format(time.DateOnly) == s.First.Format(time.DateOnly) {
			last = clockTime(s.Last)
		}
		fmt.Fprintf(w, "captured by adstap %s in front of %s, %s → %s (%s)\n", orDash(h.Adstap), orDash(h.Upstream),
			stamp(s.First), last, s.Last.Sub(s.First).Round(time.Millisecond))
	}
	var pushes, acks, nacks int
	for _, ss := range s.Streams {
		for _, t := range ss.Types {
			pushes, acks, nacks = pushes+t.Pushes, acks+t.ACKs, nacks+t.NACKs
		}
	}
	fmt.Fprintf(w, "%s, %s, %s, %s, %s\n", plural(len(s.Streams), "stream", "streams"), plural(pushes, "push", "pushes"),
		plural(acks, "ACK", "ACKs"), plural(nacks, "NACK", "NACKs"), plural(len(s.Episodes), "detector episode", "detector episodes"))

	for _, ss := range s.Streams {
		fmt.Fprintf(w, "\nstream %d  %s %s  node=%s  peer=%s  conn %d\n", ss.ID, ss.Protocol, shortMethod(ss.Method), orDash(ss.Node), orDash(ss.Peer), ss.Conn)
		var facts []string
		opened := "opened " + stamp(ss.Opened)
		if ss.Partial {
			opened += " (before the first file: counts start late)"
		}
		facts = append(facts, opened)
		if ss.Closed.IsZero() {
			facts = append(facts, "still open at the end of the capture")
		} else {
			c := fmt.Sprintf("closed after %s: %s", ss.Closed.Sub(ss.Opened).Round(time.Millisecond), ss.CloseCode)
			if ss.CloseMessage != "" {
				c += fmt.Sprintf(" %q", ss.CloseMessage)
			}
			facts = append(facts, c)
		}
		if ss.FullSync != nil {
			facts = append(facts, fmt.Sprintf("full sync in %s (%s)", export.Latency(*ss.FullSync), strings.Join(ss.FullSyncTypes, " ")))
		} else if ss.Protocol != string(codec.Opaque) {
			facts = append(facts, "no full sync")
		}
		if ss.DecodeErrors > 0 {
			facts = append(facts, fmt.Sprintf("%d undecodable frames", ss.DecodeErrors))
		}
		if ss.Skipped > 0 {
			facts = append(facts, fmt.Sprintf("%d frames relayed but not captured", ss.Skipped))
		}
		fmt.Fprintf(w, "  %s\n", strings.Join(facts, "; "))
		if len(ss.Types) == 0 {
			continue
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  TYPE\tPUSHES\tACK\tNACK\tACK p50/p90/p99\tFULL initial/repeated\tREDUNDANT\tSTALE NONCES\tSTORMS\tLOOPS\tLAST")
		for _, t := range ss.Types {
			lat := "-"
			if t.ACKLatency.N > 0 {
				lat = export.Latency(t.ACKLatency.P50) + "/" + export.Latency(t.ACKLatency.P90) + "/" + export.Latency(t.ACKLatency.P99)
			}
			last := "-"
			if t.LastVersion != "" || t.Pushes > 0 {
				last = "v=" + t.LastVersion + " " + orDefault(t.LastResult, "unanswered")
			}
			fmt.Fprintf(tw, "  %s\t%d\t%d\t%d\t%s\t%d/%d\t%d\t%d\t%d\t%d\t%s\n", t.Type, t.Pushes, t.ACKs, t.NACKs, lat,
				t.FullInitial, t.FullRepeated, t.Redundant, t.StaleNonces, t.Storms, t.Loops, last)
		}
		tw.Flush()
		for _, t := range ss.Types {
			var other []string
			for _, o := range []struct {
				n    int
				what string
			}{{t.Superseded, "superseded before an answer"}, {t.Timeouts, "unanswered (timed out)"}, {t.Closed, "unanswered when the stream closed"}, {t.LateAnswers, "answered after timing out"}} {
				if o.n > 0 {
					other = append(other, fmt.Sprintf("%d %s", o.n, o.what))
				}
			}
			if len(other) > 0 {
				fmt.Fprintf(w, "  %s pushes: %s\n", t.Type, strings.Join(other, ", "))
			}
		}
	}

	if len(s.Episodes) > 0 {
		fmt.Fprintln(w, "\ndetector episodes:")
		for _, ep := range s.Episodes {
			end := "still going at the end of the capture"
			if !ep.Ended.IsZero() {
				end = fmt.Sprintf("ended after %s, %d in all", ep.Duration.Round(time.Millisecond), ep.Count)
			}
			fmt.Fprintf(w, "  %s  %s  %s: %s (%s)\n", stamp(ep.Started), export.DetectorName(ep.Detector), ep.Key, ep.Detail, end)
		}
	}
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

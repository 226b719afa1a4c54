package replay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/export"
	"github.com/adstap/adstap/export/livelog"
	"github.com/adstap/adstap/internal/feed"
	"github.com/adstap/adstap/internal/inspect"
	"github.com/adstap/adstap/origin"
	"github.com/adstap/adstap/track"
)

// ServeConfig says what adstap replay serves, and how.
type ServeConfig struct {
	Sent     *inspect.Sent
	Listener net.Listener
	// Bisect is the type to bisect on a NACK (cds, or a type URL); empty
	// for none.
	Bisect string
	// Settle is how long the replay waits, once the client has answered
	// every push, for it to ask for a type it has not asked for yet;
	// zero means DefaultSettle.
	Settle time.Duration
	// AnswerTimeout is how long the client may leave a push unanswered,
	// or the replay without a request once connected; zero means
	// DefaultAnswerTimeout.
	AnswerTimeout time.Duration
	// Out gets what the replay says: the pushes, the client's answers,
	// the rounds of a bisection and the verdict.
	Out io.Writer
}

// Defaults of ServeConfig.
const (
	DefaultSettle        = 3 * time.Second
	DefaultAnswerTimeout = 30 * time.Second
)

// Outcome is how the client took the configuration.
type Outcome struct {
	// Rejected holds the types whose latest push the client NACKed.
	Rejected []Rejected
	// Bisection is the result of --bisect, nil when there was none.
	Bisection *Bisection
	// Unasked lists the types the capture holds that the client never
	// asked for.
	Unasked []string
}

// Rejected is a type the client NACKed, and what it said.
type Rejected struct {
	TypeURL, Version, Message string
	Names                     []string // the pushed resources the message names
	Source                    string   // the Istio objects in words (origin)
}

// Serve serves what cfg.Sent holds on cfg.Listener to the first ADS client
// that connects, prints each push and answer, and returns once the client
// has answered everything (and the bisection, if asked for, is done). A
// client that leaves or stops answering first is an error; one that asks
// for what the capture does not hold is an InputError. ctx ends it too.
func Serve(ctx context.Context, cfg ServeConfig) (*Outcome, error) {
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	if cfg.Settle <= 0 {
		cfg.Settle = DefaultSettle
	}
	if cfg.AnswerTimeout <= 0 {
		cfg.AnswerTimeout = DefaultAnswerTimeout
	}
	if cfg.Bisect != "" {
		url, ok := typeURLOf(cfg.Sent, cfg.Bisect)
		if !ok {
			return nil, inputErrorf("--bisect %s: the capture sent node %s no such type; it sent %s", cfg.Bisect, cfg.Sent.Node, typeList(cfg.Sent))
		}
		cfg.Bisect = url
	}
	log := slog.New(export.NewPretty(cfg.Out, slog.LevelInfo))
	r := &replayServer{cfg: cfg, log: log, done: make(chan served, 1)}
	r.announce()
	srv := grpc.NewServer(grpc.ForceServerCodecV2(codec.Passthrough{}), grpc.UnknownServiceHandler(r.handle), grpc.MaxRecvMsgSize(math.MaxInt32))
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(cfg.Listener) }()
	var res served
	select {
	case res = <-r.done:
	case err := <-serveErr:
		res = served{err: fmt.Errorf("serving on %s: %w", cfg.Listener.Addr(), err)}
	case <-ctx.Done():
		res = served{err: fmt.Errorf("interrupted: %w", ctx.Err())}
		r.mu.Lock()
		if s := r.session; s != nil {
			res.outcome = s.outcome()
		}
		r.mu.Unlock()
	}
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	srv.Stop()
	if res.outcome != nil {
		printOutcome(log, res.outcome)
	}
	return res.outcome, res.err
}

type served struct {
	outcome *Outcome
	err     error
}

// replayServer takes one client at a time: the configuration is one node's.
type replayServer struct {
	cfg  ServeConfig
	log  *slog.Logger
	done chan served

	mu      sync.Mutex
	session *session
	streams uint64
	closed  bool
}

func (r *replayServer) announce() {
	s := r.cfg.Sent
	proto := "SotW"
	if s.Delta {
		proto = "Delta"
	}
	r.log.Info(fmt.Sprintf("replaying what node %s had been sent as of %s (%s, %s)", s.Node, s.At, fileNames(s), proto))
	for _, t := range s.Types {
		captured := "unanswered when the capture ends"
		switch t.Result {
		case "":
		case track.ResultNACK:
			captured = fmt.Sprintf("NACKed in the capture: %s", t.Error)
		case track.ResultClosed:
			captured = "unanswered when its stream closed in the capture"
		case track.ResultSuperseded:
			captured = "superseded before its answer in the capture"
		case track.ResultTimeout:
			captured = "unanswered (timed out) in the capture"
		default:
			captured = strings.ToUpper(string(t.Result)) + " in the capture"
		}
		r.log.Info(fmt.Sprintf("  %s v=%s %s, %s", typeLabel(t.TypeURL), t.Version, plural(len(t.Resources), "resource", "resources"), captured))
	}
	if red := redactedNames(s); len(red) > 0 {
		r.log.Warn(fmt.Sprintf("the capture replaced secrets in %s: they are served as captured, with fingerprints for keys, so the client cannot be given what it was: %s",
			plural(len(red), "resource", "resources"), listSome(red)))
	}
	r.log.Info(fmt.Sprintf("serving ADS on %s; waiting for a client", r.cfg.Listener.Addr()))
}

// handle serves one stream: the first ADS stream is the client; any other
// is turned away with a status that says why.
func (r *replayServer) handle(_ any, stream grpc.ServerStream) error {
	method, _ := grpc.MethodFromServerStream(stream)
	proto := codec.ProtocolOf(method)
	if !strings.HasPrefix(method, "/envoy.service.discovery.v3.AggregatedDiscoveryService/") || proto == codec.Opaque {
		return status.Errorf(codes.Unimplemented, "adstap replay serves ADS only (envoy.service.discovery.v3.AggregatedDiscoveryService), not %s", method)
	}
	r.mu.Lock()
	if r.closed || r.session != nil {
		r.mu.Unlock()
		return status.Error(codes.ResourceExhausted, "adstap replay serves one client, and it has one")
	}
	r.streams++
	s := newSession(r, stream, r.streams, proto == codec.Delta)
	r.session = s
	r.mu.Unlock()
	res := s.run()
	r.done <- res
	if res.err != nil {
		return status.Error(codes.Aborted, "adstap replay: "+res.err.Error())
	}
	return nil
}

// session is the replay to one client.
type session struct {
	cfg    ServeConfig
	sent   *inspect.Sent
	log    *slog.Logger
	live   *livelog.Log
	stream grpc.ServerStream
	id     uint64
	delta  bool
	tr     *track.Tracker
	types  map[string]*typeServe
	nonces int
	resp   codec.Response
	// quiet holds the nonces of a bisection's rounds, whose answers the
	// bisection prints itself.
	quiet map[string]bool
	// unanswered are the types the client asks for that the capture
	// asked for and never got.
	unanswered map[string]bool
	bis        *bisection
	result     *Bisection
	// restoring is the nonce of the push that gives the client the whole
	// set back after a bisection.
	restoring string
	lastSeen  time.Time
	// mu guards the outcome, which ctx's end reads from another goroutine.
	mu sync.Mutex
}

// typeServe is one type of the capture, as served to the client.
type typeServe struct {
	st *inspect.SentType
	// asked: the client asked for the type; its subscription is names,
	// or everything with wildcard.
	asked    bool
	wildcard bool
	names    map[string]bool
	// given is what a Delta client has been sent, by name.
	given map[string]bool
	// sent is the nonce of the latest push served. Whether it still
	// awaits its answer is the tracker's to say (awaiting).
	sent string
	// last holds the resources (indexes into st.Resources) of the latest
	// push that was not a bisection round, which a bisection starts from.
	last      []int
	result    track.PushResult
	message   string
	nackNames []string // the names the NACK's message mentions
	source    string
	// missing are the names the client asked for that the capture does
	// not hold, said once.
	missing map[string]bool
}

func newSession(r *replayServer, stream grpc.ServerStream, id uint64, delta bool) *session {
	s := &session{
		cfg: r.cfg, sent: r.cfg.Sent, log: r.log, stream: stream, id: id, delta: delta,
		tr: track.New(track.Config{}), types: map[string]*typeServe{}, quiet: map[string]bool{}, unanswered: map[string]bool{},
	}
	s.live = livelog.New(livelog.Config{OutputConfig: export.OutputConfig{Logger: r.log}})
	for _, t := range s.sent.Types {
		s.types[t.TypeURL] = &typeServe{st: t, missing: map[string]bool{}}
	}
	return s
}

// errClient is how a client ended the replay early.
var errClient = errors.New("the client")

func (s *session) run() served {
	method, _ := grpc.MethodFromServerStream(s.stream)
	proto := codec.SotW
	if s.delta {
		proto = codec.Delta
	}
	now := time.Now()
	s.lastSeen = now
	s.emit(s.tr.OpenStream(track.StreamMeta{ID: s.id, ConnID: s.id, Method: method, Protocol: proto, Peer: peerOf(s.stream.Context()), OpenedAt: now}))
	if s.delta != s.sent.Delta {
		s.log.Info(fmt.Sprintf("the capture is %s and this client speaks %s: the same resources, in %s envelopes", protoName(s.sent.Delta), protoName(s.delta), protoName(s.delta)))
	}
	reqs := make(chan []byte)
	recvErr := make(chan error, 1)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			var f codec.RawMessage
			if err := s.stream.RecvMsg(&f); err != nil {
				recvErr <- err
				return
			}
			b := f.Data.Materialize()
			f.Data.Free()
			select {
			case reqs <- b:
			case <-stop:
				return
			}
		}
	}()
	timer := time.NewTimer(s.cfg.AnswerTimeout)
	defer timer.Stop()
	res := s.loop(reqs, recvErr, timer)
	code, msg := uint32(codes.OK), ""
	if res.err != nil {
		code, msg = uint32(codes.Aborted), res.err.Error()
	}
	s.emit(s.tr.CloseStream(s.id, time.Now(), code, msg))
	if s.bis != nil {
		s.bis.b.stop()
	}
	return res
}

func (s *session) loop(reqs <-chan []byte, recvErr <-chan error, timer *time.Timer) served {
	for {
		deadline, why := s.deadline()
		timer.Reset(time.Until(deadline))
		select {
		case b := <-reqs:
			s.lastSeen = time.Now()
			done, err := s.request(b)
			if err != nil {
				return served{outcome: s.outcome(), err: err}
			}
			if done || s.finished() {
				return served{outcome: s.outcome()}
			}
		case err := <-recvErr:
			if s.answeredAll() {
				// Every push it was sent is answered: the verdict stands.
				s.log.Info("the client closed its stream: " + closedHow(err))
				return served{outcome: s.outcome()}
			}
			return served{outcome: s.outcome(), err: s.gone(err)}
		case <-timer.C:
			if why == "" {
				return served{outcome: s.outcome()}
			}
			return served{outcome: s.outcome(), err: fmt.Errorf("%w %s", errClient, why)}
		}
	}
}

// deadline is when the replay stops waiting, and why ("" when settled: the
// verdict is in).
func (s *session) deadline() (time.Time, string) {
	var oldest *typeServe
	var oldestSince time.Time
	for _, t := range s.types {
		if since, ok := s.awaiting(t); ok && (oldest == nil || since.Before(oldestSince)) {
			oldest, oldestSince = t, since
		}
	}
	if oldest != nil {
		return oldestSince.Add(s.cfg.AnswerTimeout), fmt.Sprintf("did not answer the %s push (nonce %s) within %s", typeLabel(oldest.st.TypeURL), oldest.sent, s.cfg.AnswerTimeout)
	}
	if !s.anyAsked() {
		return s.lastSeen.Add(s.cfg.AnswerTimeout), fmt.Sprintf("asked for nothing within %s", s.cfg.AnswerTimeout)
	}
	return s.lastSeen.Add(s.cfg.Settle), ""
}

// awaiting reports whether the latest push of a type served still awaits
// its answer, as the session's tracker judges it, and since when.
func (s *session) awaiting(t *typeServe) (time.Time, bool) {
	if t.sent == "" {
		return time.Time{}, false
	}
	nonce, since, ok := s.tr.Awaiting(s.id, t.st.TypeURL)
	return since, ok && nonce == t.sent
}

func (s *session) anyAsked() bool {
	for _, t := range s.types {
		if t.asked {
			return true
		}
	}
	return false
}

// finished says the verdict is in before the settle time: every type of
// the capture was pushed and answered, and no bisection is running.
func (s *session) finished() bool {
	if s.bis != nil {
		return false
	}
	for _, t := range s.types {
		if _, waits := s.awaiting(t); !t.asked || waits || t.result == "" {
			return false
		}
	}
	return true
}

// answeredAll says the client answered every push it was sent, and some.
func (s *session) answeredAll() bool {
	answered := false
	for _, t := range s.types {
		if _, waits := s.awaiting(t); waits {
			return false
		}
		answered = answered || t.result != ""
	}
	return answered && s.bis == nil
}

// closedHow says how a client's stream ended, from its receive error.
func closedHow(err error) string {
	if errors.Is(err, io.EOF) {
		return "it closed its side"
	}
	if st, ok := status.FromError(err); ok {
		if st.Message() != "" {
			return st.Code().String() + ": " + st.Message()
		}
		return st.Code().String()
	}
	return err.Error()
}

// gone says how the client's stream ended before the verdict.
func (s *session) gone(err error) error {
	what := closedHow(err)
	if b := s.bis; b != nil {
		names := b.names(b.candidates())
		return fmt.Errorf("%w left during round %d of the %s bisection (%s); the fault is among these %s: %s",
			errClient, b.b.rounds, typeLabel(b.st.TypeURL), what, plural(len(names), "resource", "resources"), listSome(names))
	}
	return fmt.Errorf("%w left before answering every push (%s)", errClient, what)
}

// request handles one request of the client; done ends the replay.
func (s *session) request(b []byte) (done bool, err error) {
	evs, d := feed.Track(s.tr, &s.resp, feed.Frame{Stream: s.id, At: time.Now(), Delta: s.delta, Data: mem.BufferSlice{mem.SliceBuffer(b)}, Size: len(b)})
	if d.Err != nil {
		s.emit(evs)
		return false, fmt.Errorf("%w sent an undecodable request: %v", errClient, d.Err)
	}
	req := d.Request
	var seen *track.RequestSeen
	for _, e := range evs {
		switch e := e.(type) {
		case track.RequestSeen:
			seen = &e
		case track.PushEnded:
			over, err := s.answered(e)
			if err != nil {
				return false, err
			}
			done = done || over
		}
	}
	s.emit(evs)
	if done {
		return true, nil
	}
	ts := s.types[req.TypeURL]
	if ts == nil && slices.Contains(s.sent.Asked, req.TypeURL) {
		if !s.unanswered[req.TypeURL] {
			s.unanswered[req.TypeURL] = true
			s.log.Info(fmt.Sprintf("the client asks for %s, which the captured node asked for too and was never sent: not answered here either", typeLabel(req.TypeURL)))
		}
		return false, nil
	}
	if ts == nil {
		return false, inputErrorf("the client asks for %s, which the capture never sent node %s (it sent %s): replay to the kind of client that was captured",
			typeLabel(req.TypeURL), s.sent.Node, typeList(s.sent))
	}
	first := !ts.asked
	s.mu.Lock() // the outcome reads it from Serve's goroutine on ctx's end
	ts.asked = true
	s.mu.Unlock()
	s.subscribe(ts, req, first)
	changed := seen != nil && (seen.Kind == track.KindInitial || seen.Kind == track.KindSubscription || (seen.SubscriptionChanged && seen.Kind != track.KindStale))
	if !first && !changed {
		return false, nil
	}
	if err := s.checkNames(ts); err != nil {
		return false, err
	}
	part, ok := s.wanted(ts, first)
	if !ok {
		return false, nil
	}
	if b := s.bis; b != nil && b.st == ts.st {
		s.log.Info(fmt.Sprintf("the client changed its %s subscription: the bisection starts over from the push that answers it", typeLabel(ts.st.TypeURL)))
		b.b.stop()
		s.bis = nil
	}
	ts.last = part
	_, err = s.push(ts, ts.st.Version, part, nil)
	return false, err
}

// subscribe applies a request's names to the type's subscription.
func (s *session) subscribe(ts *typeServe, req *codec.Request, first bool) {
	if ts.names == nil {
		ts.names = map[string]bool{}
	}
	if !s.delta {
		clear(ts.names)
		ts.wildcard = len(req.ResourceNames) == 0 && (first || ts.wildcard)
		for _, n := range req.ResourceNames {
			if n == "*" {
				ts.wildcard = true
				continue
			}
			ts.names[n] = true
		}
		return
	}
	if first && len(req.Subscribe) == 0 {
		ts.wildcard = true
	}
	for _, n := range req.Subscribe {
		if n == "*" {
			ts.wildcard = true
			continue
		}
		ts.names[n] = true
	}
	for _, n := range req.Unsubscribe {
		if n == "*" {
			ts.wildcard = false
			continue
		}
		delete(ts.names, n)
		delete(ts.given, n)
	}
}

// checkNames says, once per name, what the client asks for that the
// capture does not hold; when it holds none of it, the client is of
// another kind than the one captured.
func (s *session) checkNames(ts *typeServe) error {
	if ts.wildcard || len(ts.names) == 0 {
		return nil
	}
	have := map[string]bool{}
	for _, r := range ts.st.Resources {
		have[r.Name] = true
	}
	var missing []string
	found := false
	for n := range ts.names {
		if have[n] {
			found = true
		} else if !ts.missing[n] {
			ts.missing[n] = true
			missing = append(missing, n)
		}
	}
	slices.Sort(missing)
	if !found && len(ts.st.Resources) > 0 {
		var held []string
		for _, r := range ts.st.Resources {
			held = append(held, r.Name)
		}
		return inputErrorf("the client asks for %s %s; the capture sent node %s only %s: replay to the kind of client that was captured",
			typeLabel(ts.st.TypeURL), listSome(slices.Sorted(maps.Keys(ts.names))), s.sent.Node, listSome(held))
	}
	if len(missing) > 0 {
		s.log.Warn(fmt.Sprintf("the client asks for %s %s, which the capture never sent node %s", typeLabel(ts.st.TypeURL), listSome(missing), s.sent.Node))
	}
	return nil
}

// wanted is what the client's subscription of ts asks to be pushed, if
// anything (ok false: nothing new). In SotW a
// listener or cluster push is the whole state of the type, as the capture
// has it, whatever names the client asks for: what the client does with
// those it did not ask for (ignore them, or judge them all the same) is
// part of what is replayed, and a client that names its resources one at
// a time (grpc-go asks anew for each) gets the same push rather than one
// per name.
func (s *session) wanted(ts *typeServe, first bool) (part []int, ok bool) {
	whole := !s.delta && codec.WholeType(ts.st.TypeURL)
	for i, r := range ts.st.Resources {
		if whole || ts.wildcard || ts.names[r.Name] {
			if s.delta && !first && ts.given[r.Name] {
				continue
			}
			part = append(part, i)
		}
	}
	if s.delta && !first && len(part) == 0 {
		return nil, false // nothing new to send
	}
	if !s.delta && !first && slices.Equal(part, ts.last) {
		return nil, false // the client has it, or has rejected it
	}
	return part, true
}

// push sends the resources part of ts (indexes into its resources), and in
// Delta the removal of the names in removed.
func (s *session) push(ts *typeServe, version string, part []int, removed []string) (string, error) {
	s.nonces++
	nonce := strconv.Itoa(s.nonces)
	res := make([][]byte, len(part))
	for i, j := range part {
		r := ts.st.Resources[j]
		switch {
		case !s.delta:
			res[i] = r.Any
		case r.Wrapped != nil:
			res[i] = r.Wrapped
		default:
			res[i] = codec.AppendResource(nil, r.Name, strconv.FormatUint(xxhash.Sum64(r.Any), 16), r.Any)
		}
	}
	var b []byte
	if s.delta {
		if ts.given == nil {
			ts.given = map[string]bool{}
		}
		for _, j := range part {
			ts.given[ts.st.Resources[j].Name] = true
		}
		for _, n := range removed {
			delete(ts.given, n)
		}
		b = codec.AppendDeltaResponse(nil, ts.st.TypeURL, version, nonce, res, removed)
	} else {
		b = codec.AppendSotWResponse(nil, ts.st.TypeURL, version, nonce, res)
	}
	now := time.Now()
	// A push the tap cannot decode is served all the same, as the capture
	// has it, and said (a DecodeError in the live log): the client's
	// answer is then judged without knowing what it answers.
	evs, _ := feed.Track(s.tr, &s.resp, feed.Frame{Stream: s.id, At: now, Response: true, Delta: s.delta, Data: mem.BufferSlice{mem.SliceBuffer(b)}, Size: len(b)})
	s.emit(evs)
	s.resp.Reset()
	ts.sent = nonce
	if err := s.stream.SendMsg(&codec.RawMessage{Data: mem.BufferSlice{mem.SliceBuffer(b)}}); err != nil {
		return "", fmt.Errorf("%w could not be sent the %s push: %v", errClient, typeLabel(ts.st.TypeURL), err)
	}
	return nonce, nil
}

// answered takes the client's answer to a push; done says the bisection
// asked for is over, which ends the replay: the client holds one of its
// parts now, not the configuration.
func (s *session) answered(e track.PushEnded) (done bool, err error) {
	ts := s.types[e.Push.TypeURL]
	if ts == nil || e.Push.Nonce != ts.sent {
		return false, nil // an answer to a push served before the latest
	}
	if b := s.bis; b != nil && b.st == ts.st && e.Push.Nonce == b.nonce {
		return s.round(ts, b, e)
	}
	if e.Result != track.ResultACK && e.Result != track.ResultNACK {
		return false, nil
	}
	s.mu.Lock()
	ts.result, ts.message, ts.nackNames, ts.source = e.Result, e.Error, e.ErrorNames, ""
	if e.Result == track.ResultNACK {
		ts.source = origin.Of(e.Rejected).Summary()
	}
	s.mu.Unlock()
	if e.Push.Nonce == s.restoring {
		s.restoring = ""
		s.log.Info(fmt.Sprintf("bisect %s: the whole set pushed again, as the capture has it: %s", typeLabel(ts.st.TypeURL), strings.ToUpper(string(e.Result))))
		return true, nil
	}
	if e.Result == track.ResultNACK && ts.st.TypeURL == s.cfg.Bisect && s.result == nil {
		return s.startBisection(ts, e)
	}
	return false, nil
}

// startBisection bisects what the NACK e of ts's latest push rejected;
// done says there was nothing to bisect: the push held one resource.
func (s *session) startBisection(ts *typeServe, e track.PushEnded) (done bool, err error) {
	a, res := newBisection(s.log, ts.st, ts.last, s.delta, e)
	if res != nil {
		s.bisected(res)
		return true, nil
	}
	s.bis = a
	return s.nextRound(ts, a)
}

// nextRound pushes the bisection's next part or, once it is over, the
// whole set again.
func (s *session) nextRound(ts *typeServe, a *bisection) (done bool, err error) {
	r, res := a.next()
	if res != nil {
		s.bisected(res)
		// The client holds a part: give it back the whole set, as the
		// capture has it (an Envoy's config dump then shows that, and a
		// grpc-go client does not take every cluster it lost for gone
		// when the replay ends).
		nonce, err := s.push(ts, ts.st.Version, a.set, nil)
		if err != nil {
			return false, err
		}
		s.quiet[nonce] = true
		s.restoring = nonce
		return false, nil
	}
	nonce, err := s.push(ts, r.version, r.idx, r.removed)
	if err != nil {
		return false, err
	}
	s.quiet[nonce] = true
	a.nonce = nonce
	return false, nil
}

// round takes the client's answer to a bisection's round.
func (s *session) round(ts *typeServe, a *bisection, e track.PushEnded) (done bool, err error) {
	if e.Result != track.ResultACK && e.Result != track.ResultNACK {
		return false, fmt.Errorf("%w ended round %d of the %s bisection as %s", errClient, a.b.rounds, typeLabel(ts.st.TypeURL), e.Result)
	}
	a.answer(e)
	return s.nextRound(ts, a)
}

// bisected keeps what the bisection found for the outcome.
func (s *session) bisected(res *Bisection) {
	s.mu.Lock()
	s.result = res
	s.mu.Unlock()
	s.bis = nil
}

// emit writes the live log's lines for evs, but for a bisection's rounds,
// which it prints itself, and the detectors and full pushes, which the
// replay's own pushes would set off.
func (s *session) emit(evs []track.Event) {
	for _, e := range evs {
		switch e := e.(type) {
		case track.PushEnded:
			if s.quiet[e.Push.Nonce] {
				continue
			}
		case track.FullPush, track.DetectorStarted, track.DetectorEnded:
			continue
		}
		s.live.OnEvent(e)
	}
}

// outcome is the verdict so far.
func (s *session) outcome() *Outcome {
	s.mu.Lock()
	defer s.mu.Unlock()
	o := &Outcome{Bisection: s.result}
	for _, t := range s.sent.Types {
		ts := s.types[t.TypeURL]
		if !ts.asked {
			o.Unasked = append(o.Unasked, t.TypeURL)
		}
		if ts.result == track.ResultNACK {
			o.Rejected = append(o.Rejected, Rejected{TypeURL: t.TypeURL, Version: t.Version, Message: ts.message, Names: ts.nackNames, Source: ts.source})
		}
	}
	return o
}

func printOutcome(log *slog.Logger, o *Outcome) {
	var unasked []string
	for _, t := range o.Unasked {
		unasked = append(unasked, typeLabel(t))
	}
	if len(unasked) > 0 {
		log.Info(fmt.Sprintf("the client never asked for %s, which the capture holds", strings.Join(unasked, ", ")))
	}
	for _, r := range o.Rejected {
		line := fmt.Sprintf("verdict: the client rejects %s v=%s: %s", typeLabel(r.TypeURL), r.Version, r.Message)
		if r.Source != "" {
			line += " — " + r.Source
		}
		log.Warn(line)
	}
	if len(o.Rejected) == 0 {
		log.Info("verdict: the client accepted every push")
	}
}

func typeURLOf(s *inspect.Sent, name string) (string, bool) {
	for _, t := range s.Types {
		if t.TypeURL == name || codec.ShortType(t.TypeURL) == strings.ToLower(name) {
			return t.TypeURL, true
		}
	}
	return "", false
}

func typeList(s *inspect.Sent) string {
	var out []string
	for _, t := range s.Types {
		out = append(out, typeLabel(t.TypeURL))
	}
	return strings.Join(out, ", ")
}

func protoName(delta bool) string {
	if delta {
		return "Delta"
	}
	return "SotW"
}

func peerOf(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return "?"
}

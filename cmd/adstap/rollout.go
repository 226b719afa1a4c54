package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/adstap/adstap/export/tracing"
	"github.com/adstap/adstap/internal/rollout"
	"github.com/adstap/adstap/internal/runconfig"
)

type rolloutFlags struct {
	jaeger  string
	object  string
	since   time.Duration
	service string
	output  string
	timeout time.Duration
}

func rolloutCommand(f *rolloutFlags) *command {
	c := newCommand("rollout",
		"adstap rollout shows how a push round reached the fleet, from the spans every tap sent to Jaeger: the proxies it reached, those that ACKed, NACKed (with the proxy's message and the Istio object), still wait or were passed by a newer push; time to ACK p50, p99 and max; the slowest proxies. With --object, every round that changed that Istio object, each to the ACK of every proxy.",
		"adstap rollout --jaeger=http://HOST:16686 [VERSION | PUSH_ID | --object=KIND/NAMESPACE/NAME] [flags]")
	c.group("Where")
	c.String(&f.jaeger, "jaeger", "", "Jaeger's query API: the `URL` people browse, http(s)://HOST:16686 (api_v3 over HTTP, under a path prefix if Jaeger has one), or its gRPC API, HOST:16685 (grpc:// plaintext, grpcs:// TLS); both give the same answer")
	c.String(&f.service, "service", tracing.DefaultServiceName, "the taps' service `name` in Jaeger (their OTEL_SERVICE_NAME)")
	c.group("Which rounds")
	c.String(&f.object, "object", "", "every push round that changed this Istio `object`, KIND/NAMESPACE/NAME: destination-rule/shop/reviews (or DestinationRule/shop/reviews)")
	f.since = time.Hour
	c.Var(runconfig.Duration(&f.since), "since", "look at the spans of the last `duration`")
	c.group("Output")
	c.String(&f.output, "o", "table", "`format`: table or json")
	f.timeout = 30 * time.Second
	c.Var(runconfig.Duration(&f.timeout), "timeout", "give up on Jaeger after this `duration`")
	c.epilog = `Without VERSION or --object: the latest full push. VERSION is a push's
version (xds.version: every round of it, the full push and the incremental
pushes under it) or one round's push id (xds.push_id, "VERSION eds:HASH").

Proxies are named pod.namespace from each tap's resource attributes
(k8s.pod.name, k8s.namespace.name: the injection template sets them), or by
their node id. A push shows only once it ended: one still unanswered shows as
WAITING once it is older than the tap's --push-timeout.

Exit status: 0 when every proxy of every round ACKed; 3 when one did not;
1 when Jaeger cannot be read or holds no such round; 2 for bad flags.
`
	return c
}

func runRollout(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var f rolloutFlags
	cmd := rolloutCommand(&f)
	flagArgs, rest := splitArgs(cmd.fs, args)
	if code, done := cmd.parseArgs(flagArgs, stdout, stderr); done {
		return code
	}
	q, err := rolloutQuery(f, rest)
	if err != nil {
		fmt.Fprintf(stderr, "adstap rollout: %v (see adstap rollout --help)\n", err)
		return exitUsage
	}
	j, err := rollout.Dial(f.jaeger)
	if err != nil {
		fmt.Fprintf(stderr, "adstap rollout: %v (see adstap rollout --help)\n", err)
		return exitUsage
	}
	defer j.Close()
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	rep, err := rollout.Read(ctx, j, q)
	if err != nil {
		fmt.Fprintf(stderr, "adstap rollout: %v\n", err)
		return exitFailure
	}
	if rep.Note != "" {
		fmt.Fprintf(stderr, "adstap rollout: %s\n", rep.Note)
	}
	if f.output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(rep)
	} else {
		printRollout(stdout, rep, time.Now())
	}
	if !rep.Converged {
		return exitOutOfSync
	}
	return exitOK
}

// rolloutQuery checks the flags and the VERSION argument.
func rolloutQuery(f rolloutFlags, rest []string) (rollout.Query, error) {
	q := rollout.Query{Service: f.service, Since: f.since}
	switch {
	case f.jaeger == "":
		return q, errors.New("--jaeger is required: Jaeger's query API, http://HOST:16686 or HOST:16685 (gRPC)")
	case f.output != "table" && f.output != "json":
		return q, fmt.Errorf("-o %q: want table or json", f.output)
	case f.since <= 0:
		return q, fmt.Errorf("--since %s: want a duration above zero", f.since)
	case len(rest) > 1:
		return q, fmt.Errorf("unexpected argument %q: name one VERSION or push id (quote a push id: it holds a space)", rest[1])
	case len(rest) == 1 && f.object != "":
		return q, fmt.Errorf("VERSION %q and --object exclude each other", rest[0])
	}
	if len(rest) == 1 {
		q.Version = rest[0]
	}
	if f.object != "" {
		obj, err := rollout.ParseObject(f.object)
		if err != nil {
			return q, err
		}
		q.Object = obj
	}
	return q, nil
}

// printRollout writes each round: what it changed, how many proxies it
// reached in each state, time to ACK, then its problems and slowest proxies.
func printRollout(w io.Writer, rep rollout.Report, now time.Time) {
	for i, r := range rep.Rounds {
		if i > 0 {
			fmt.Fprintln(w)
		}
		kind := "incremental push"
		if r.FullPush {
			kind = "full push"
		}
		fmt.Fprintf(w, "Push round %s (%s: %s), trace %s, %s ago\n", printable(r.PushID), kind, strings.Join(r.Types, ", "), r.TraceID, age(now, r.Start))
		if len(r.Objects) > 0 {
			fmt.Fprintf(w, "  changed: %s\n", strings.Join(r.Objects, ", "))
		}
		var counts []string
		for _, s := range []string{rollout.StateACKed, rollout.StateNACKed, rollout.StateWaiting, rollout.StateSuperseded, rollout.StateClosed} {
			if n := r.Counts[s]; n > 0 || s == rollout.StateACKed || s == rollout.StateNACKed || s == rollout.StateWaiting {
				counts = append(counts, fmt.Sprintf("%d %s", n, strings.ToLower(s)))
			}
		}
		fmt.Fprintf(w, "  %d proxies reached: %s\n", r.Reached, strings.Join(counts, ", "))
		if q := r.TimeToACK; q != nil {
			fmt.Fprintf(w, "  time to ACK: p50 %s, p99 %s, max %s\n", seconds(q.P50), seconds(q.P99), seconds(q.Max))
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		header := false
		var slowest []rollout.Proxy
		for _, p := range r.Proxies {
			if p.State == rollout.StateACKed {
				if len(slowest) < 5 {
					slowest = append(slowest, p)
				}
				continue
			}
			if !header {
				fmt.Fprintln(tw, "  PROXY\tSTATE\tTYPES\tMESSAGE\tISTIO CONFIG")
				header = true
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", printable(p.Name), p.State, typesByState(p), orDash(printable(p.Message)), orDash(objectsOrSource(p)))
		}
		tw.Flush()
		if len(slowest) > 0 && r.Counts[rollout.StateACKed] > 1 {
			var s []string
			for _, p := range slowest {
				s = append(s, fmt.Sprintf("%s %s", printable(p.Name), seconds(p.TimeToACK)))
			}
			fmt.Fprintf(w, "  slowest to ACK: %s\n", strings.Join(s, ", "))
		}
	}
}

// typesByState says which type did what, worst first: "cds nacked ×2431;
// eds,lds,rds acked".
func typesByState(p rollout.Proxy) string {
	if len(p.TypeStates) == 0 {
		return strings.Join(p.Types, ",")
	}
	var parts []string
	for _, st := range []string{rollout.StateNACKed, rollout.StateWaiting, rollout.StateClosed, rollout.StateSuperseded, rollout.StateACKed} {
		var types []string
		for _, t := range p.Types {
			if p.TypeStates[t] == st {
				types = append(types, t)
			}
		}
		if len(types) == 0 {
			continue
		}
		part := strings.Join(types, ",") + " " + strings.ToLower(st)
		if st == rollout.StateNACKed && p.NACKs > 1 {
			part += fmt.Sprintf(" ×%d", p.NACKs)
		}
		parts = append(parts, part)
	}
	return strings.Join(parts, "; ")
}

func objectsOrSource(p rollout.Proxy) string {
	if len(p.Objects) > 0 {
		return strings.Join(p.Objects, ", ")
	}
	return p.Source
}

// seconds is a time to ACK in words: 12ms, 1.4s.
func seconds(s float64) string {
	d := time.Duration(s * float64(time.Second))
	switch {
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < time.Second:
		return d.Round(100 * time.Microsecond).String()
	}
	return d.Round(10 * time.Millisecond).String()
}

package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/export/csds"
	"github.com/adstap/adstap/track"
)

// problemNotSent: a resource a proxy asks for by name and does not have.
const problemNotSent = "not_sent"

// resourcesPath is /debug/resources with the filters.
func resourcesPath(node, typ string, problems bool) string {
	q := url.Values{}
	if node != "" {
		q.Set("node", node)
	}
	if typ != "" {
		q.Set("type", typ)
	}
	if problems {
		q.Set("problems", "1")
	}
	if len(q) == 0 {
		return "/debug/resources"
	}
	return "/debug/resources?" + q.Encode()
}

// addResourceProblems adds to rep the resources its proxies asked for and
// never got. A tap that does not follow resources one by one (an older one,
// or --initial-fetch-timeout=0) adds none.
func addResourceProblems(ctx context.Context, client *adminClient, node string, rep *statusReport) {
	var page csds.ResourcesPage
	if client.get(ctx, resourcesPath(node, "", true), &page) != nil {
		return
	}
	for _, s := range page.Streams {
		for _, r := range s.Resources {
			if !r.NotSent {
				continue
			}
			name := proxyName(s.NodeID, s.Stream)
			rep.Problems = append(rep.Problems, statusProblem{Kind: problemNotSent, Proxy: name, Stream: s.Stream, Type: codec.ShortType(r.TypeURL),
				Message: fmt.Sprintf("%s (stream %d) %s %s %s: asked for %s ago, never sent", name, s.Stream, codec.ShortType(r.TypeURL), r.Name, r.Status, age(page.Now, r.Updated))})
			rep.InSync = false
		}
	}
}

// resourceRow is one resource of one proxy, as status --resources shows it.
type resourceRow struct {
	Proxy  string `json:"proxy"`
	Stream uint64 `json:"stream"`
	track.ResourceStatus
	Age string `json:"age"`
}

// runStatusResources is adstap status --resources: each resource of each
// proxy, problems first, then those still asked for, then the rest.
func runStatusResources(ctx context.Context, client *adminClient, f statusFlags, stdout, stderr io.Writer) int {
	var page csds.ResourcesPage
	if err := client.get(ctx, resourcesPath(f.node, f.resourceType, false), &page); err != nil {
		fmt.Fprintf(stderr, "adstap status: %v\n", err)
		return exitFailure
	}
	rows := []resourceRow{}
	for _, s := range page.Streams {
		for _, r := range s.Resources {
			rows = append(rows, resourceRow{Proxy: proxyName(s.NodeID, s.Stream), Stream: s.Stream, ResourceStatus: r, Age: age(page.Now, r.Updated)})
		}
	}
	rank := func(r resourceRow) int {
		switch {
		case r.Status.Problem() || r.NotSent:
			return 0
		case r.Status == track.ClientRequested:
			return 1
		}
		return 2
	}
	slices.SortStableFunc(rows, func(a, b resourceRow) int {
		return cmp.Or(cmp.Compare(rank(a), rank(b)), cmp.Compare(a.Proxy, b.Proxy), cmp.Compare(a.TypeURL, b.TypeURL), cmp.Compare(a.Name, b.Name))
	})
	problems := 0
	for _, r := range rows {
		if rank(r) == 0 {
			problems++
		}
	}
	if f.output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(struct {
			Now       any           `json:"now"`
			Source    string        `json:"source"`
			Resources []resourceRow `json:"resources"`
			Problems  int           `json:"problems"`
		}{page.Now, client.base, rows, problems})
	} else {
		printResources(stdout, rows)
	}
	if problems > 0 {
		return exitOutOfSync
	}
	return exitOK
}

func printResources(w io.Writer, rows []resourceRow) {
	if len(rows) == 0 {
		fmt.Fprintln(w, "No resources: no proxy asked for any, or the tap does not follow them one by one (--initial-fetch-timeout=0 without --csds-listen).")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PROXY\tTYPE\tNAME\tSTATUS\tVERSION\tAGE\tERROR")
	for _, r := range rows {
		status := r.Status.String()
		if r.NotSent {
			status += " (never sent)"
		}
		errText := r.ErrorDetails
		if errText != "" && r.ErrorVersion != "" {
			errText = "v" + r.ErrorVersion + ": " + errText
		}
		if i := strings.IndexByte(errText, '\n'); i >= 0 {
			errText = errText[:i] + " …"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", printable(r.Proxy), codec.ShortType(r.TypeURL), printable(r.Name), status,
			orDash(printable(r.Version)), r.Age, printable(errText))
	}
	tw.Flush()
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/export/page"
	"github.com/adstap/adstap/export/retained"
	"github.com/adstap/adstap/track"
)

type configFlags struct {
	admin  string
	node   string
	stream uint64
	typ    string
	output string
}

// configTypes are the names `adstap config --type` takes, as istioctl
// proxy-config spells them, with the tap's short names.
var configTypes = map[string]string{
	"cluster": codec.ShortCluster, "listener": codec.ShortListener, "route": codec.ShortRoute, "endpoint": codec.ShortEndpoint, "secret": codec.ShortSecret,
	codec.ShortCluster: codec.ShortCluster, codec.ShortListener: codec.ShortListener, codec.ShortRoute: codec.ShortRoute,
	codec.ShortEndpoint: codec.ShortEndpoint, codec.ShortSecret: codec.ShortSecret, codec.ShortExtensionConfig: codec.ShortExtensionConfig,
}

func configCommand(f *configFlags) *command {
	c := newCommand("config",
		"adstap config shows, from a running tap, the resources of one type that a proxy accepted, as istioctl proxy-config does: the configuration the proxy runs, read off the wire. The tap keeps resources only with --retain-resources; secrets show as fingerprints, as on every other output.",
		"adstap config (--node ID | --stream ID) --type cluster|listener|route|endpoint|secret [flags]")
	c.group("Which proxy")
	adminFlag(c, &f.admin)
	c.String(&f.node, "node", "", "the proxy's node `id` (its newest stream with the type is shown)")
	c.Var(uint64Value{&f.stream}, "stream", "the stream `id` (from adstap status -o wide)")
	c.String(&f.typ, "type", "", "`type`: cluster, listener, route, endpoint or secret (or cds, lds, rds, eds, sds, ecds)")
	c.group("Output")
	c.String(&f.output, "o", "table", "`format`: table or json (the resources whole, decoded)")
	return c
}

type uint64Value struct{ p *uint64 }

func (v uint64Value) String() string {
	if v.p == nil || *v.p == 0 {
		return ""
	}
	return strconv.FormatUint(*v.p, 10)
}

func (v uint64Value) Set(s string) error {
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n == 0 {
		return errors.New("want a stream id, a positive number")
	}
	*v.p = n
	return nil
}

func runConfig(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var f configFlags
	cmd := configCommand(&f)
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(stderr, "adstap config: "+format+"\n", a...)
		return code
	}
	if code, done := cmd.parseArgs(args, stdout, stderr); done {
		return code
	}
	short, ok := configTypes[strings.ToLower(f.typ)]
	switch {
	case f.typ == "":
		return fail(exitUsage, "--type is required: cluster, listener, route, endpoint or secret")
	case !ok:
		return fail(exitUsage, "--type %q: want cluster, listener, route, endpoint or secret", f.typ)
	case (f.node == "") == (f.stream == 0):
		return fail(exitUsage, "give one of --node or --stream")
	case f.output != "table" && f.output != "json":
		return fail(exitUsage, "-o %q: want table or json", f.output)
	}
	client, err := newAdminClient(f.admin)
	if err != nil {
		return fail(exitUsage, "%v", err)
	}
	stream := f.stream
	if stream == 0 {
		var streams page.Streams
		if err := client.get(ctx, "/debug/streams?node="+url.QueryEscape(f.node)+"&type="+short, &streams); err != nil {
			return fail(exitFailure, "%v", err)
		}
		if len(streams.Streams) == 0 {
			return fail(exitFailure, "no stream of node %q has %s (adstap status lists the proxies)", printable(f.node), short)
		}
		stream = streams.Streams[len(streams.Streams)-1].ID // the newest
	}
	var cfg retained.Page
	if err := client.get(ctx, fmt.Sprintf("/debug/config?stream=%d&type=%s", stream, short), &cfg); err != nil {
		return fail(exitFailure, "%v", err)
	}
	statuses := resourceStatuses(ctx, client, stream, short)
	if f.output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(configWithStatus{Page: cfg, Status: statuses})
		return exitOK
	}
	printConfig(stdout, short, cfg, statuses)
	return exitOK
}

// configTable is how one type's resources show in columns.
type configTable struct {
	head []string
	row  func(r map[string]any) []string
}

var configTables = map[string]configTable{
	codec.ShortCluster: {[]string{"NAME", "TYPE", "LB POLICY", "CONNECT TIMEOUT"}, func(r map[string]any) []string {
		return []string{str(r, "name"), or(str(r, "type"), "STATIC"), or(str(r, "lbPolicy"), "ROUND_ROBIN"), str(r, "connectTimeout")}
	}},
	codec.ShortListener: {[]string{"NAME", "ADDRESS", "FILTER CHAINS"}, func(r map[string]any) []string {
		addr := socketAddress(r["address"])
		if _, ok := r["apiListener"]; ok {
			addr = "(API listener)"
		}
		return []string{str(r, "name"), addr, strconv.Itoa(len(list(r, "filterChains")))}
	}},
	codec.ShortRoute: {[]string{"NAME", "VIRTUAL HOSTS", "DOMAINS", "ROUTES"}, func(r map[string]any) []string {
		var domains []string
		routes := 0
		for _, vh := range list(r, "virtualHosts") {
			vhm, _ := vh.(map[string]any)
			for _, d := range list(vhm, "domains") {
				domains = append(domains, fmt.Sprint(d))
			}
			routes += len(list(vhm, "routes"))
		}
		return []string{str(r, "name"), strconv.Itoa(len(list(r, "virtualHosts"))), firstFew(domains, 3), strconv.Itoa(routes)}
	}},
	codec.ShortEndpoint: {[]string{"CLUSTER", "ENDPOINTS"}, func(r map[string]any) []string {
		var eps []string
		for _, l := range list(r, "endpoints") {
			lm, _ := l.(map[string]any)
			for _, e := range list(lm, "lbEndpoints") {
				em, _ := e.(map[string]any)
				ep, _ := em["endpoint"].(map[string]any)
				eps = append(eps, socketAddress(ep["address"]))
			}
		}
		return []string{str(r, "clusterName"), firstFew(eps, 4)}
	}},
	codec.ShortSecret: {[]string{"NAME", "KIND", "CONTENT"}, func(r map[string]any) []string {
		kind, content := "", ""
		for _, k := range []string{"tlsCertificate", "validationContext", "sessionTicketKeys", "genericSecret", "validationContextSdsSecretConfig"} {
			if v, ok := r[k]; ok {
				kind = k
				content = secretSummary(v)
			}
		}
		return []string{str(r, "name"), kind, content}
	}},
}

func printConfig(w io.Writer, short string, cfg retained.Page, statuses []track.ResourceStatus) {
	noun := "resources"
	if len(cfg.Resources) == 1 {
		noun = "resource"
	}
	fmt.Fprintf(w, "Stream %d, %s version %s: %d %s", cfg.Stream, short, or(printable(cfg.Version), "(none)"), len(cfg.Resources), noun)
	if cfg.Incomplete {
		fmt.Fprint(w, " (retention hit --retain-max-bytes: newer pushes were not kept)")
	}
	fmt.Fprintln(w)
	if len(cfg.Resources) == 0 {
		return
	}
	tab, ok := configTables[short]
	if !ok {
		tab = configTable{[]string{"NAME", "TYPE"}, func(r map[string]any) []string { return []string{str(r, "name"), str(r, "@type")} }}
	}
	byName := map[string]track.ResourceStatus{}
	for _, st := range statuses {
		byName[st.Name] = st
	}
	if len(statuses) > 0 {
		tab.head = append(slices.Clone(tab.head), "STATUS")
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(tab.head, "\t"))
	for _, raw := range cfg.Resources {
		var r map[string]any
		if json.Unmarshal(raw, &r) != nil {
			continue
		}
		if n, ok := r["undecoded_bytes"]; ok {
			fmt.Fprintf(tw, "(%s, %v bytes, not decoded by this build)\n", printable(str(r, "@type")), n)
			continue
		}
		cells := tab.row(r)
		if len(statuses) > 0 {
			cells = append(cells, resourceStatusCell(byName, cells[0]))
		}
		for i := range cells {
			cells[i] = or(printable(cells[i]), "-")
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	tw.Flush()
}

func str(m map[string]any, k string) string {
	if m == nil {
		return ""
	}
	switch v := m[k].(type) {
	case string:
		return v
	case nil:
		return ""
	default:
		return fmt.Sprint(v)
	}
}

func list(m map[string]any, k string) []any {
	if m == nil {
		return nil
	}
	l, _ := m[k].([]any)
	return l
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// socketAddress reads an envoy Address as protojson writes it.
func socketAddress(a any) string {
	am, _ := a.(map[string]any)
	sa, _ := am["socketAddress"].(map[string]any)
	if sa == nil {
		if p, ok := am["pipe"].(map[string]any); ok {
			return "unix:" + str(p, "path")
		}
		return ""
	}
	return str(sa, "address") + ":" + str(sa, "portValue")
}

func firstFew(items []string, n int) string {
	if len(items) <= n {
		return strings.Join(items, ", ")
	}
	return strings.Join(items[:n], ", ") + fmt.Sprintf(" +%d more", len(items)-n)
}

// secretSummary says what a secret holds without showing it: the tap
// already replaced private material with fingerprints, and a table has no
// room for certificates.
func secretSummary(v any) string {
	m, _ := v.(map[string]any)
	return strings.Join(slices.Sorted(maps.Keys(m)), ", ")
}

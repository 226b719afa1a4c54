package main

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/adstap/adstap/internal/testutil/leakcheck"
)

// adstap status --resources lists each resource of each proxy, problems
// first: the cluster the sidecar's NACK names, NACKED at no version with
// the rejected one, before what is ACKED.
func TestStatusResources(t *testing.T) {
	leakcheck.Check(t)
	m := startStatusMesh(t)

	code, out, stderr := cli(t, "status", "--admin", m.admin, "--resources")
	if code != exitOutOfSync {
		t.Errorf("exit status %d, want %d (a resource is NACKED); stderr %s", code, exitOutOfSync, stderr)
	}
	lines := strings.Split(out, "\n")
	if !regexp.MustCompile(`^PROXY\s+TYPE\s+NAME\s+STATUS\s+VERSION\s+AGE\s+ERROR$`).MatchString(lines[0]) {
		t.Errorf("header %q", lines[0])
	}
	first := regexp.MustCompile(`^reviews-v2-5d8b\.demo\s+cds\s+outbound\|8080\|\|svc-00001\.ns-1\.svc\.cluster\.local\s+NACKED\s+-\s+\S+\s+v\S+: Error adding/updating cluster`)
	if len(lines) < 2 || !first.MatchString(lines[1]) {
		t.Errorf("the NACKED cluster does not come first:\n%s", out)
	}
	if !regexp.MustCompile(`(?m)^greeter-client-7d9f\.demo\s+lds\s+greeter\s+ACKED\s+2026-11-30T09:00:00Z/1\s`).MatchString(out) {
		t.Errorf("the proxyless client's listener is not ACKED:\n%s", out)
	}

	code, out, _ = cli(t, "status", "--admin", m.admin, "--resources", "--type", "lds", "--node", m.good, "-o", "json")
	var rep struct {
		Resources []resourceRow `json:"resources"`
		Problems  int           `json:"problems"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("-o json: %v\n%s", err, out)
	}
	if code != exitOK || rep.Problems != 0 || len(rep.Resources) != 1 || rep.Resources[0].Name != "greeter" || rep.Resources[0].Status.String() != "ACKED" {
		t.Errorf("--type lds --node: exit %d, %+v", code, rep)
	}

	if code, _, _ := cli(t, "status", "--admin", m.admin, "--type", "lds"); code != exitUsage {
		t.Errorf("--type without --resources: exit %d, want %d", code, exitUsage)
	}
}

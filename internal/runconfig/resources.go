package runconfig

import (
	"errors"
	"time"

	"github.com/adstap/adstap/internal/pipeline"
	"github.com/adstap/adstap/track"
)

// defineResources defines the flags about each resource of each proxy: the
// CSDS listener and the wait after which a resource asked for and not sent
// is a finding.
func defineResources(t Table, f *Flags) {
	t.Group("Per resource (what each proxy asked for, has, rejected, or never got)")
	t.String(&f.CSDSListen, "csds-listen", "", "serve CSDS (envoy.service.status.v3.ClientStatusDiscoveryService) for every proxy the tap relays on this `host:port`, never the relay's listener: one ClientConfig per proxy, each resource's client status, version and rejection, and with --retain-resources the accepted resource (redacted); it discloses every proxy's configuration, so keep it on loopback (127.0.0.1:15103); \"\" serves none")
	f.InitialFetchTimeout = track.DefaultInitialFetchTimeout
	t.Var(offDuration{&f.InitialFetchTimeout}, "initial-fetch-timeout", "a resource a proxy asks for by name and is not sent within this `duration` is reported (live log, adstap status, adstap_resources_not_sent) and is DOES_NOT_EXIST in CSDS, as gRPC's xDS client has it; Envoy's default, which Istio sets to 0 (wait forever, silently) for EDS; 0 turns per-resource tracking off unless --csds-listen needs it")
}

// applyResources turns the per-resource flags into the run's configuration.
func applyResources(f Flags, run *pipeline.RunConfig) {
	run.CSDSListen = f.CSDSListen
	run.Observe.Resources = f.InitialFetchTimeout > 0
	run.Observe.Detect.InitialFetchTimeout = f.InitialFetchTimeout
	if f.InitialFetchTimeout == 0 {
		run.Observe.Detect.InitialFetchTimeout = neverTimeout
	}
}

// neverTimeout is a wait that never ends while a stream lives.
const neverTimeout = 100 * 365 * 24 * time.Hour

// offDuration is a duration flag that may be 0, for off.
type offDuration struct{ p *time.Duration }

func (d offDuration) String() string {
	if d.p == nil {
		return ""
	}
	return d.p.String()
}

func (d offDuration) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil || v < 0 {
		return errors.New("want a duration such as 15s, or 0 for off")
	}
	*d.p = v
	return nil
}

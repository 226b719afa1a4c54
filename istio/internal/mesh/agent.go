package mesh

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	meshconfig "istio.io/api/mesh/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"

	"istio.io/istio/pilot/pkg/model"
	"istio.io/istio/pkg/bootstrap/platform"
	"istio.io/istio/pkg/config/mesh"
	"istio.io/istio/pkg/envoy"
	istioagent "istio.io/istio/pkg/istio-agent"
	"istio.io/istio/pkg/security"
	"istio.io/istio/pkg/test/env"
)

// AgentOptions configure istio-agent.
type AgentOptions struct {
	// Discovery is the discoveryAddress the agent dials (Tap.Addr).
	Discovery string
	// Workload and IP name the agent's proxy: its node id is
	// NodeID(Workload, IP).
	Workload, IP string
	// Headers are extra metadata the agent sends upstream (its XDS_HEADERS),
	// besides the ClusterID it always sends.
	Headers map[string]string
	// Probe, host:port, is a TCP readiness probe the agent runs: it reports
	// the workload's health to istiod on the Envoy's stream (health
	// requests, never answered).
	Probe string
	// DNS runs the agent's DNS proxy, so the agent asks istiod for the name
	// table itself (NDS); clients must then send DNS_CAPTURE in their node
	// metadata for istiod to answer it.
	DNS bool
}

// ClusterID is the ClusterID header the agent sends upstream.
const ClusterID = "Kubernetes"

// Agent is istio-agent (pkg/istio-agent) as a sidecar runs it, Envoy
// disabled: its XDS proxy listens on a Unix socket (Socket) where Envoy
// would connect, and dials Discovery in plaintext
// (controlPlaneAuthPolicy: NONE). It asks istiod for its own PCDS (dynamic
// proxy config) and, with AgentOptions.DNS, NDS.
type Agent struct {
	*istioagent.Agent
	// Socket is the agent's XDS socket, Envoy's xds-grpc cluster.
	Socket string
	// Addr is the socket as an address adsc dials: unix:///path.
	Addr string
}

// StartAgent starts istio-agent. It stops when the test ends.
func StartAgent(t *testing.T, opts AgentOptions) *Agent {
	t.Helper()
	// A Unix socket's path is at most 107 bytes: t.TempDir's can be longer.
	dir, err := os.MkdirTemp("", "agent")
	if err != nil {
		t.Fatalf("agent: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	socket := filepath.Join(dir, "XDS")

	pc := mesh.DefaultProxyConfig()
	pc.DiscoveryAddress = opts.Discovery
	pc.ControlPlaneAuthPolicy = meshconfig.AuthenticationPolicy_NONE
	if opts.Probe != "" {
		host, port, err := net.SplitHostPort(opts.Probe)
		if err != nil {
			t.Fatalf("agent: probe %q: %v", opts.Probe, err)
		}
		p, err := strconv.ParseUint(port, 10, 16)
		if err != nil {
			t.Fatalf("agent: probe %q: %v", opts.Probe, err)
		}
		pc.ReadinessProbe = &networking.ReadinessProbe{
			PeriodSeconds:     1,
			HealthCheckMethod: &networking.ReadinessProbe_TcpSocket{TcpSocket: &networking.TCPHealthCheckConfig{Host: host, Port: uint32(p)}},
		}
	}
	certs := filepath.Join(env.IstioSrc, "tests/testdata/certs/pilot")
	sec := &security.Options{
		// The workload certificate comes from files, so the agent needs no
		// CA: with Envoy disabled it still loads one, for proxyless gRPC.
		FileMountedCerts:  true,
		CertChainFilePath: filepath.Join(certs, "cert-chain.pem"),
		KeyFilePath:       filepath.Join(certs, "key.pem"),
		RootCertFilePath:  filepath.Join(certs, "root-cert.pem"),
		ClusterID:         ClusterID,
		TrustDomain:       "cluster.local",
		WorkloadNamespace: Namespace,
		ServiceAccount:    "default",
	}
	ao := &istioagent.AgentOptions{
		ServiceNode:                NodeID(opts.Workload, opts.IP),
		ProxyType:                  model.SidecarProxy,
		ProxyNamespace:             Namespace,
		ProxyDomain:                Namespace + ".svc.cluster.local",
		ProxyIPAddresses:           []string{opts.IP},
		XdsUdsPath:                 socket,
		XDSHeaders:                 opts.Headers,
		DisableEnvoy:               true,
		EnableDynamicProxyConfig:   true,
		Platform:                   &platform.Unknown{},
		WorkloadIdentitySocketFile: security.DefaultWorkloadIdentitySocketFile,
	}
	if opts.DNS {
		ao.DNSCapture = true
		ao.DNSAddr = "127.0.0.1:0"
	}
	a := istioagent.NewAgent(pc, ao, sec, envoy.ProxyConfig{})
	ctx, cancel := context.WithCancel(context.Background())
	wait, err := a.Run(ctx)
	if err != nil {
		cancel()
		a.Close()
		t.Fatalf("agent: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		wait()
		a.Close()
	})
	return &Agent{Agent: a, Socket: socket, Addr: "unix://" + socket}
}

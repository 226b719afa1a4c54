package redact_test

import (
	"bytes"
	"strings"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/google/go-cmp/cmp"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/testutil/xdstest"
	"github.com/adstap/adstap/internal/xdsconfig"
	"github.com/adstap/adstap/redact"
)

func TestRedactRemovesEveryKeyByte(t *testing.T) {
	leakcheck.Check(t)
	ca := xdstest.NewCA(t)
	kp := ca.Issue(t, "workload", []string{"reviews.default.svc"}, nil, false)
	keyBody := bytes.TrimSpace(kp.KeyPEM)
	secret := xdsconfig.Secret("default", kp.CertPEM, kp.KeyPEM)
	generic := &tlsv3.Secret{Name: "hmac", Type: &tlsv3.Secret_GenericSecret{GenericSecret: &tlsv3.GenericSecret{
		Secret: &core.DataSource{Specifier: &core.DataSource_InlineBytes{InlineBytes: []byte("hmac-key-material-0123456789")}}}}}
	inlineListener := &listenerv3.Listener{Name: "virtualInbound", FilterChains: []*listenerv3.FilterChain{{
		TransportSocket: &core.TransportSocket{Name: "tls", ConfigType: &core.TransportSocket_TypedConfig{TypedConfig: xdstest.MustAny(&tlsv3.DownstreamTlsContext{
			CommonTlsContext: &tlsv3.CommonTlsContext{TlsCertificates: []*tlsv3.TlsCertificate{{
				CertificateChain: &core.DataSource{Specifier: &core.DataSource_InlineBytes{InlineBytes: kp.CertPEM}},
				PrivateKey:       &core.DataSource{Specifier: &core.DataSource_InlineString{InlineString: string(kp.KeyPEM)}},
			}}},
		})}},
	}}}

	tests := []struct {
		name    string
		delta   bool
		resp    proto.Message
		secrets [][]byte // must be gone
		keep    [][]byte // must remain
	}{
		{"SDS secret, SotW", false, &discovery.DiscoveryResponse{TypeUrl: codec.TypeSecret, VersionInfo: "v1",
			Resources: []*anypb.Any{xdstest.MustAny(secret)}}, [][]byte{keyBody, keyBody[40:80]}, [][]byte{kp.CertPEM}},
		{"SDS secret, Delta", true, &discovery.DeltaDiscoveryResponse{TypeUrl: codec.TypeSecret, Nonce: "n",
			Resources: []*discovery.Resource{{Name: "default", Version: "1", Resource: xdstest.MustAny(secret)}}}, [][]byte{keyBody}, [][]byte{kp.CertPEM}},
		{"generic secret", false, &discovery.DiscoveryResponse{TypeUrl: codec.TypeSecret,
			Resources: []*anypb.Any{xdstest.MustAny(generic)}}, [][]byte{[]byte("hmac-key-material")}, nil},
		{"key inline in a listener's TLS context", false, &discovery.DiscoveryResponse{TypeUrl: codec.TypeListener,
			Resources: []*anypb.Any{xdstest.MustAny(inlineListener)}}, [][]byte{keyBody}, [][]byte{kp.CertPEM, []byte("virtualInbound")}},
		{"SotW TTL wrapper", false, &discovery.DiscoveryResponse{TypeUrl: codec.TypeSecret,
			Resources: []*anypb.Any{xdstest.MustAny(&discovery.Resource{Name: "default", Resource: xdstest.MustAny(secret)})}}, [][]byte{keyBody}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := xdstest.MustMarshal(tc.resp)
			out, redacted, err := redact.Response(in, tc.delta)
			if err != nil || !redacted {
				t.Fatalf("RedactResponse = redacted %v, err %v; want redacted", redacted, err)
			}
			for _, s := range tc.secrets {
				if bytes.Contains(out, s) {
					t.Errorf("secret bytes %q… survive redaction", s[:min(len(s), 24)])
				}
			}
			for _, k := range tc.keep {
				if !bytes.Contains(out, k) {
					t.Errorf("redaction removed %q…, which is not secret", k[:min(len(k), 24)])
				}
			}
			if !bytes.Contains(out, []byte("[redacted by adstap: sha256 ")) {
				t.Error("no fingerprint where the secret was")
			}
			// Still a valid response of the same shape.
			var r codec.Response
			if err := r.Decode(out, tc.delta); err != nil {
				t.Fatalf("the redacted response does not decode: %v", err)
			}
		})
	}
}

func TestRedactLeavesOrdinaryResponsesAlone(t *testing.T) {
	leakcheck.Check(t)
	ca := xdstest.NewCA(t)
	kp := ca.Issue(t, "x", nil, nil, false)
	sdsCluster := xdsconfig.Cluster("outbound|9080||reviews", true)
	in := xdstest.MustMarshal(&discovery.DiscoveryResponse{TypeUrl: codec.TypeCluster, Resources: []*anypb.Any{xdstest.MustAny(sdsCluster)}})
	out, redacted, err := redact.Response(in, false)
	if err != nil || redacted || &out[0] != &in[0] {
		t.Errorf("a cluster without secrets: redacted %v, err %v, same bytes %v; want it untouched", redacted, err, &out[0] == &in[0])
	}
	if redact.Fingerprint(kp.KeyPEM) == redact.Fingerprint(append([]byte{}, kp.KeyPEM[:10]...)) {
		t.Error("different secrets share a fingerprint")
	}
}

func TestRedactHeaders(t *testing.T) {
	leakcheck.Check(t)
	in := map[string][]string{
		"authorization": {"Bearer eyJhbGciOiJSUzI1NiIsImtpZCI6IjEifQ.payload.sig"},
		"x-istio-token": {"raw-token"},
		"clusterid":     {"Kubernetes"},
		"x-custom":      {"a", "b"},
		"content-type":  {"application/grpc"},
	}
	got := redact.Headers(in)
	if diff := cmp.Diff(in["clusterid"], got["clusterid"]); diff != "" || len(got["x-custom"]) != 2 {
		t.Errorf("ordinary headers changed: %v", got)
	}
	for _, k := range []string{"authorization", "x-istio-token"} {
		if strings.Contains(got[k][0], "eyJ") || strings.Contains(got[k][0], "raw-token") || !strings.Contains(got[k][0], "[redacted by adstap") {
			t.Errorf("%s = %q, want the credential replaced by its fingerprint", k, got[k][0])
		}
	}
	if !strings.HasPrefix(got["authorization"][0], "Bearer [redacted") {
		t.Errorf("authorization = %q, want the scheme kept", got["authorization"][0])
	}
	if in["authorization"][0] == got["authorization"][0] {
		t.Error("RedactHeaders changed its input instead of a copy")
	}
}

func TestRedactKeysQuotedInNACKs(t *testing.T) {
	leakcheck.Check(t)
	ca := xdstest.NewCA(t)
	kp := ca.Issue(t, "x", nil, nil, false)
	keyBody := bytes.TrimSpace(kp.KeyPEM)[30:80] // inside the first line of base64
	// grpc-go quotes the rejected resource in proto text form, newlines escaped.
	quoted := strings.ReplaceAll(string(kp.KeyPEM), "\n", `\n`)
	msg := `error parsing "ClusterResource" response: resource "c": unexpected lbPolicy MAGLEV in response: name:"c" transport_socket:{typed_config:{[type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext]:{common_tls_context:{tls_certificates:{private_key:{inline_string:"` + quoted + `"}}}}}}`
	for _, delta := range []bool{false, true} {
		var req proto.Message = &discovery.DiscoveryRequest{TypeUrl: codec.TypeCluster, ResponseNonce: "1", ErrorDetail: &rpcstatus.Status{Code: 3, Message: msg}}
		if delta {
			req = &discovery.DeltaDiscoveryRequest{TypeUrl: codec.TypeCluster, ResponseNonce: "1", ErrorDetail: &rpcstatus.Status{Code: 3, Message: msg}}
		}
		in := xdstest.MustMarshal(req)
		out, redacted, err := redact.Request(in, delta)
		if err != nil || !redacted || bytes.Contains(out, keyBody) {
			t.Errorf("delta=%v: RedactRequest = redacted %v, err %v, key still there %v", delta, redacted, err, bytes.Contains(out, keyBody))
		}
		decoded, err := redact.DecodeRequest(in, delta)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(decoded.ErrorDetail.Message, string(keyBody[:40])) || !strings.Contains(decoded.ErrorDetail.Message, "unexpected lbPolicy MAGLEV") {
			t.Errorf("delta=%v: the decoded NACK message keeps the key or lost the rest: %q", delta, decoded.ErrorDetail.Message)
		}
	}
}

package redact_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/testutil/xdstest"
	"github.com/adstap/adstap/internal/xdsconfig"
	"github.com/adstap/adstap/redact"
)

// fixtures builds responses with secrets where Envoy and Istio put them,
// and in a few places only a walk of every field would look.
type fixtures struct {
	rng       *rand.Rand
	cert, key []byte
	n         int
	secrets   [][]byte // every secret put in, to look for afterwards
}

// secret is a new secret; text is valid UTF-8, as a string field holds.
func (f *fixtures) secret(text bool) []byte {
	f.n++
	var s []byte
	switch f.rng.IntN(3 - btoi(text)) {
	case 0:
		s = fmt.Appendf(nil, "%s#%d", f.key, f.n) // a PEM key
	case 1:
		s = fmt.Appendf(nil, "hmac-key-material-%d-%x", f.n, f.rng.Uint64())
	default:
		s = make([]byte, 32+f.rng.IntN(64)) // raw key bytes, no PEM to spot
		for i := range s {
			s[i] = byte(f.rng.Uint32())
		}
	}
	f.secrets = append(f.secrets, s)
	return s
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// dataSource is inline (bytes or string) most of the time, else a file or
// an environment variable, which are not secrets.
func (f *fixtures) dataSource() *core.DataSource {
	switch f.rng.IntN(6) {
	case 0:
		return &core.DataSource{Specifier: &core.DataSource_Filename{Filename: "/etc/certs/key.pem"}}
	case 1:
		return &core.DataSource{Specifier: &core.DataSource_EnvironmentVariable{EnvironmentVariable: "KEY"}}
	case 2:
		return &core.DataSource{Specifier: &core.DataSource_InlineString{InlineString: string(f.secret(true))}}
	default:
		return &core.DataSource{Specifier: &core.DataSource_InlineBytes{InlineBytes: f.secret(false)},
			WatchedDirectory: &core.WatchedDirectory{Path: "/etc/certs"}}
	}
}

func (f *fixtures) tlsCertificate() *tlsv3.TlsCertificate {
	c := &tlsv3.TlsCertificate{
		CertificateChain: &core.DataSource{Specifier: &core.DataSource_InlineBytes{InlineBytes: f.cert}},
		PrivateKey:       f.dataSource(),
	}
	if f.rng.IntN(3) == 0 {
		c.Password = f.dataSource()
	}
	return c
}

func (f *fixtures) common() *tlsv3.CommonTlsContext {
	c := &tlsv3.CommonTlsContext{AlpnProtocols: []string{"h2"}}
	for range f.rng.IntN(3) {
		c.TlsCertificates = append(c.TlsCertificates, f.tlsCertificate())
	}
	return c
}

func (f *fixtures) transportSocket(downstream bool) *core.TransportSocket {
	var tc proto.Message = &tlsv3.UpstreamTlsContext{Sni: "outbound.example", CommonTlsContext: f.common()}
	if downstream {
		d := &tlsv3.DownstreamTlsContext{CommonTlsContext: f.common()}
		if f.rng.IntN(2) == 0 {
			d.SessionTicketKeysType = &tlsv3.DownstreamTlsContext_SessionTicketKeys{SessionTicketKeys: &tlsv3.TlsSessionTicketKeys{
				Keys: []*core.DataSource{f.dataSource(), f.dataSource()}}}
		}
		tc = d
	}
	return &core.TransportSocket{Name: "envoy.transport_sockets.tls", ConfigType: &core.TransportSocket_TypedConfig{TypedConfig: xdstest.MustAny(tc)}}
}

// resource returns a resource of a random kind, and its type URL.
func (f *fixtures) resource() (proto.Message, string) {
	name := fmt.Sprintf("outbound|8080||svc-%d.default.svc.cluster.local", f.rng.IntN(1000))
	switch f.rng.IntN(9) {
	case 0:
		return xdsconfig.Secret("default", f.cert, f.secret(false)), codec.TypeSecret
	case 1:
		return &tlsv3.Secret{Name: "hmac", Type: &tlsv3.Secret_GenericSecret{GenericSecret: &tlsv3.GenericSecret{Secret: f.dataSource()}}}, codec.TypeSecret
	case 2:
		return &tlsv3.Secret{Name: "tickets", Type: &tlsv3.Secret_SessionTicketKeys{SessionTicketKeys: &tlsv3.TlsSessionTicketKeys{
			Keys: []*core.DataSource{f.dataSource(), f.dataSource(), f.dataSource()}}}}, codec.TypeSecret
	case 3:
		return &tlsv3.Secret{Name: "ROOTCA", Type: &tlsv3.Secret_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
			TrustedCa: &core.DataSource{Specifier: &core.DataSource_InlineBytes{InlineBytes: f.cert}}}}}, codec.TypeSecret
	case 4:
		return xdsconfig.Clusters(1, 200+f.rng.IntN(800))[0], codec.TypeCluster
	case 5:
		c := xdsconfig.Cluster(name, true)
		c.TransportSocket = f.transportSocket(false)
		c.TransportSocketMatches = []*clusterv3.Cluster_TransportSocketMatch{{Name: "tlsMode-istio", TransportSocket: f.transportSocket(false)}}
		return c, codec.TypeCluster
	case 6:
		// A key for the gRPC channel of the cluster's EDS, deep in its config source.
		c := xdsconfig.Cluster(name, true)
		c.EdsClusterConfig.EdsConfig = &core.ConfigSource{ConfigSourceSpecifier: &core.ConfigSource_ApiConfigSource{ApiConfigSource: &core.ApiConfigSource{
			ApiType: core.ApiConfigSource_GRPC,
			GrpcServices: []*core.GrpcService{{TargetSpecifier: &core.GrpcService_GoogleGrpc_{GoogleGrpc: &core.GrpcService_GoogleGrpc{
				TargetUri: "xds.example:443", StatPrefix: "eds",
				ChannelCredentials: &core.GrpcService_GoogleGrpc_ChannelCredentials{CredentialSpecifier: &core.GrpcService_GoogleGrpc_ChannelCredentials_SslCredentials{
					SslCredentials: &core.GrpcService_GoogleGrpc_SslCredentials{PrivateKey: f.dataSource(), CertChain: &core.DataSource{Specifier: &core.DataSource_InlineBytes{InlineBytes: f.cert}}}}},
			}}}},
		}}}
		// And an Any of a type no binary knows, whose bytes stay as they are.
		c.TypedExtensionProtocolOptions = map[string]*anypb.Any{
			"unknown": {TypeUrl: "type.googleapis.com/example.Unknown", Value: []byte("-----BEGIN PRIVATE KEY----- not parsed")},
			"tls":     xdstest.MustAny(&tlsv3.UpstreamTlsContext{CommonTlsContext: f.common()}),
		}
		return c, codec.TypeCluster
	case 7:
		l := xdsconfig.Listener("virtualInbound", "route")
		l.FilterChains = append(l.FilterChains, &listenerv3.FilterChain{Name: "tls", TransportSocket: f.transportSocket(true)})
		l.DefaultFilterChain = &listenerv3.FilterChain{Name: "default", TransportSocket: f.transportSocket(true)}
		return l, codec.TypeListener
	default:
		// SotW's TTL wrapper around a secret.
		s, _ := f.resource()
		return &discovery.Resource{Name: "wrapped", Resource: xdstest.MustAny(s)}, codec.TypeSecret
	}
}

// response is a random response of a few resources.
func (f *fixtures) response() (msg []byte, delta bool) {
	delta = f.rng.IntN(3) == 0
	var typeURL string
	var resources []*anypb.Any
	for range 1 + f.rng.IntN(4) {
		r, t := f.resource()
		typeURL = t
		resources = append(resources, xdstest.MustAny(r))
	}
	if !delta {
		return xdstest.MustMarshal(&discovery.DiscoveryResponse{VersionInfo: "v1", TypeUrl: typeURL, Nonce: "n", Resources: resources}), false
	}
	d := &discovery.DeltaDiscoveryResponse{SystemVersionInfo: "v1", TypeUrl: typeURL, Nonce: "n"}
	for i, a := range resources {
		d.Resources = append(d.Resources, &discovery.Resource{Name: fmt.Sprint("r", i), Version: "1", Resource: a})
	}
	return xdstest.MustMarshal(d), true
}

// canonical is a response as JSON with every Any opened, so two encodings
// of the same content compare equal whatever their field order.
func canonical(t *testing.T, b []byte, delta bool) any {
	t.Helper()
	var msg proto.Message = &discovery.DiscoveryResponse{}
	if delta {
		msg = &discovery.DeltaDiscoveryResponse{}
	}
	if err := proto.Unmarshal(b, msg); err != nil {
		t.Fatalf("the redacted response does not decode: %v", err)
	}
	redact.StandInUnknownAnys(msg.ProtoReflect())
	j, err := protojson.MarshalOptions{Resolver: redact.Types}.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal(j, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// scanPieces redacts a response handed over in pieces and joins the result.
func scanPieces(t *testing.T, s *redact.Scanner, segs [][]byte, delta bool) ([]byte, bool, error) {
	t.Helper()
	r, err := s.Response(segs, delta)
	if err != nil {
		return nil, false, err
	}
	var out []byte
	for _, p := range r.AppendPieces(nil, segs) {
		out = append(out, p...)
	}
	if len(out) != r.Len() {
		t.Errorf("the pieces make %d bytes, Len says %d", len(out), r.Len())
	}
	return out, r.Redacted(), nil
}

// TestScannerRedactsWhatTheTypedWalkDid: on many responses with secrets in
// every place they can be, the scanner's result decodes to what decoding,
// redacting and encoding every message gave; no secret is left in either;
// and a response cut in pieces anywhere, as gRPC hands it over, gives the
// same bytes as in one piece.
func TestScannerRedactsWhatTheTypedWalkDid(t *testing.T) {
	leakcheck.Check(t)
	kp := xdstest.NewCA(t).Issue(t, "workload", nil, nil, false)
	f := &fixtures{rng: rand.New(rand.NewPCG(1, 2)), cert: kp.CertPEM, key: bytes.TrimSpace(kp.KeyPEM)}
	var s redact.Scanner
	redactedOnes := 0
	for i := range 300 {
		f.secrets = f.secrets[:0]
		in, delta := f.response()
		want, wantRedacted, err := typedResponse(in, delta)
		if err != nil {
			t.Fatal(err)
		}
		got, gotRedacted, err := redact.Response(in, delta)
		if err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		if gotRedacted != wantRedacted {
			t.Errorf("response %d: redacted %v, the typed walk says %v", i, gotRedacted, wantRedacted)
		}
		if !gotRedacted && &got[0] != &in[0] {
			t.Errorf("response %d: nothing redacted, yet the bytes were copied", i)
		}
		if diff := cmp.Diff(canonical(t, want, delta), canonical(t, got, delta)); diff != "" {
			t.Fatalf("response %d: the scanner's result differs from the typed walk's (-typed +scanner):\n%s", i, diff)
		}
		for _, secret := range f.secrets {
			if bytes.Contains(got, secret) && bytes.Contains(want, secret) {
				continue // a file name's content is no secret: both keep it
			}
			if bytes.Contains(got, secret) {
				t.Errorf("response %d: a secret survives the scanner", i)
			}
		}
		segs := xdstest.Chunk(in, xdstest.RandomSizes(uint64(i), 50)...)
		if i%3 == 0 {
			segs = xdstest.Chunk(in, 1+i%7)
		}
		inPieces, _, err := scanPieces(t, &s, segs, delta)
		if err != nil || !bytes.Equal(inPieces, got) {
			t.Errorf("response %d in %d pieces: %d bytes (err %v), want the %d bytes of one piece", i, len(segs), len(inPieces), err, len(got))
		}
		if gotRedacted {
			redactedOnes++
		}
	}
	if redactedOnes < 100 {
		t.Errorf("only %d of the responses held a secret: the fixtures do not test much", redactedOnes)
	}
}

// TestScannerReplacesOnlyThePathToASecret: the bytes of a response around
// a secret are its own, but for the lengths of the messages that hold the
// secret; a resource without a secret keeps every byte.
func TestScannerReplacesOnlyThePathToASecret(t *testing.T) {
	leakcheck.Check(t)
	kp := xdstest.NewCA(t).Issue(t, "workload", nil, nil, false)
	plain := xdsconfig.Clusters(3, 500)
	keyed := xdsconfig.WithInlineKey(xdsconfig.Cluster("outbound|443||db.example", true), kp.CertPEM, kp.KeyPEM)
	resources := []*anypb.Any{xdstest.MustAny(plain[0]), xdstest.MustAny(keyed), xdstest.MustAny(plain[1]), xdstest.MustAny(plain[2])}
	in := xdstest.MustMarshal(&discovery.DiscoveryResponse{VersionInfo: "v1", TypeUrl: codec.TypeCluster, Resources: resources})
	out, redacted, err := redact.Response(in, false)
	if err != nil || !redacted {
		t.Fatalf("redacted %v, err %v", redacted, err)
	}
	var before, after discovery.DiscoveryResponse
	if err := proto.Unmarshal(in, &before); err != nil {
		t.Fatal(err)
	}
	if err := proto.Unmarshal(out, &after); err != nil {
		t.Fatal(err)
	}
	for i := range before.Resources {
		same := bytes.Equal(before.Resources[i].Value, after.Resources[i].Value)
		if same != (i != 1) {
			t.Errorf("resource %d unchanged %v, want %v", i, same, i != 1)
		}
	}
	// The keyed cluster differs only where its key was.
	a, b := before.Resources[1].Value, after.Resources[1].Value
	if !bytes.Contains(b, []byte("[redacted by adstap: sha256 ")) || bytes.Contains(b, kp.KeyPEM[30:80]) {
		t.Error("the key was not replaced by its fingerprint")
	}
	prefix := 0
	for prefix < len(a) && a[prefix] == b[prefix] {
		prefix++
	}
	// Everything up to the transport socket is the same bytes: the name,
	// the EDS config. The socket is field 24, after those.
	nameEnd := bytes.Index(a, []byte("db.example")) + len("db.example")
	if prefix < nameEnd {
		t.Errorf("the cluster's bytes differ from byte %d, before its name ends (%d)", prefix, nameEnd)
	}
}

// TestScannerReadsMalformedMessagesSafely: a message cut short or
// corrupted is an error or a redaction, never a panic. When the typed
// decoder reads all of it, every Any included, the scanner reads it too,
// with the same result. When an Any inside does not decode (a flipped
// byte in a key's string makes it invalid UTF-8), the typed walk left that
// Any as it was, secret and all; the scanner finds at least the secrets the
// typed walk found, or fails, and the capture then leaves the message out.
// (A flipped tag or type URL on the path to a secret hides it from both.)
func TestScannerReadsMalformedMessagesSafely(t *testing.T) {
	leakcheck.Check(t)
	kp := xdstest.NewCA(t).Issue(t, "workload", nil, nil, false)
	f := &fixtures{rng: rand.New(rand.NewPCG(3, 4)), cert: kp.CertPEM, key: bytes.TrimSpace(kp.KeyPEM)}
	agreed, safer := 0, 0
	for i := range 400 {
		f.secrets = f.secrets[:0]
		in, delta := f.response()
		in = slices.Clone(in)
		switch i % 3 {
		case 0:
			in = in[:f.rng.IntN(len(in))]
		default:
			for range 1 + f.rng.IntN(3) {
				in[f.rng.IntN(len(in))] ^= byte(1 + f.rng.IntN(255))
			}
		}
		got, _, err := redact.Response(in, delta)
		want, _, werr := typedResponse(in, delta)
		switch {
		case werr != nil:
			continue // the typed decoder checks more (UTF-8 of every string)
		case anyUndecoded(in, delta):
			for _, secret := range f.secrets {
				if err == nil && bytes.Contains(got, secret) && !bytes.Contains(want, secret) {
					t.Errorf("case %d: a secret the typed walk found in a response with an Any that does not decode survives the scanner", i)
				}
			}
			safer++
			continue
		case err != nil:
			t.Errorf("case %d: the typed decoder reads it all, the scanner fails: %v", i, err)
			continue
		}
		if diff := cmp.Diff(canonical(t, want, delta), canonical(t, got, delta)); diff != "" {
			t.Errorf("case %d: the scanner's result differs from the typed walk's (-typed +scanner):\n%s", i, diff)
		}
		agreed++
	}
	if agreed < 50 || safer < 10 {
		t.Errorf("%d corrupted responses decoded whole, %d with an Any that does not: the test compares little", agreed, safer)
	}
}

// anyUndecoded reports whether a response holds an Any of a type the
// binary knows that does not decode as that type.
func anyUndecoded(b []byte, delta bool) bool {
	var msg proto.Message = &discovery.DiscoveryResponse{}
	if delta {
		msg = &discovery.DeltaDiscoveryResponse{}
	}
	if proto.Unmarshal(b, msg) != nil {
		return true
	}
	undecoded := false
	redact.EditNested(msg.ProtoReflect(), redact.NestedEdit{UnknownAny: func(a *anypb.Any) bool {
		if _, err := redact.Types.FindMessageByURL(a.GetTypeUrl()); err == nil {
			undecoded = true
		}
		return false
	}})
	return undecoded
}

// TestScannerDropsOverriddenKeys: a DataSource holding several specifiers
// means the last one; an inline key before a file name is dead for Envoy,
// and still a key: it is dropped, where re-encoding the typed message
// dropped it only when something else in the response was redacted.
func TestScannerDropsOverriddenKeys(t *testing.T) {
	leakcheck.Check(t)
	key := []byte("-----BEGIN PRIVATE KEY-----\nMIIEvQ-overridden\n-----END PRIVATE KEY-----\n")
	ds := protowire.AppendTag(nil, 2, protowire.BytesType) // inline_bytes
	ds = protowire.AppendBytes(ds, key)
	ds = protowire.AppendTag(ds, 1, protowire.BytesType) // filename, which wins
	ds = protowire.AppendString(ds, "/etc/certs/key.pem")
	cert := protowire.AppendTag(nil, 2, protowire.BytesType) // TlsCertificate.private_key
	cert = protowire.AppendBytes(cert, ds)
	secret := xdstest.MustMarshal(&tlsv3.Secret{Name: "default"})
	secret = protowire.AppendTag(secret, 2, protowire.BytesType) // Secret.tls_certificate
	secret = protowire.AppendBytes(secret, cert)
	in := xdstest.MustMarshal(&discovery.DiscoveryResponse{TypeUrl: codec.TypeSecret, Resources: []*anypb.Any{{TypeUrl: codec.TypeSecret, Value: secret}}})
	out, redacted, err := redact.Response(in, false)
	if err != nil || !redacted || bytes.Contains(out, []byte("MIIEvQ-overridden")) {
		t.Fatalf("redacted %v, err %v, dead key still there %v", redacted, err, bytes.Contains(out, []byte("MIIEvQ-overridden")))
	}
	var resp discovery.DiscoveryResponse
	var s tlsv3.Secret
	if err := proto.Unmarshal(out, &resp); err != nil {
		t.Fatal(err)
	}
	if err := resp.Resources[0].UnmarshalTo(&s); err != nil {
		t.Fatal(err)
	}
	if got := s.GetTlsCertificate().GetPrivateKey().GetFilename(); got != "/etc/certs/key.pem" {
		t.Errorf("the private key's file name is %q, want it kept", got)
	}
}

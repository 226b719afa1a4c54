package codec_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/testutil/xdstest"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
)

// own copies b into an array of its own, exactly as long, so that a decoder
// reading past the end of a segment finds nothing there rather than, by
// luck, the next segment's bytes.
func own(b []byte) []byte { return append(make([]byte, 0, len(b)), b...) }

// cut splits b at the offsets at, which must be ascending; an offset given
// twice makes an empty segment.
func cut(b []byte, at ...int) [][]byte {
	segs := make([][]byte, 0, len(at)+1)
	prev := 0
	for _, i := range at {
		segs = append(segs, own(b[prev:i]))
		prev = i
	}
	return append(segs, own(b[prev:]))
}

// describe names a split for failure messages.
func describe(segs [][]byte) string {
	lens := make([]string, 0, 8)
	for i, s := range segs {
		if i == 6 {
			lens = append(lens, fmt.Sprintf("... (%d segments)", len(segs)))
			break
		}
		lens = append(lens, fmt.Sprint(len(s)))
	}
	return "segments [" + strings.Join(lens, " ") + "]"
}

func errText(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// sameAsDecode checks that DecodeSegments, into a fresh Response and into
// reused (when not nil), gives exactly what Decode gives for in, the
// concatenation of segs: the same error, or the same Response down to the
// views' bytes and their being nil or empty.
func sameAsDecode(t *testing.T, in []byte, segs [][]byte, delta bool, reused *codec.Response) {
	t.Helper()
	var want, got codec.Response
	wantErr := want.Decode(in, delta)
	gotErr := got.DecodeSegments(segs, delta)
	if errText(gotErr) != errText(wantErr) {
		t.Fatalf("%s: DecodeSegments error:\n  %v\nDecode error:\n  %v", describe(segs), gotErr, wantErr)
	}
	if errors.Is(gotErr, io.ErrUnexpectedEOF) != errors.Is(wantErr, io.ErrUnexpectedEOF) {
		t.Fatalf("%s: DecodeSegments error %v and Decode error %v disagree on io.ErrUnexpectedEOF", describe(segs), gotErr, wantErr)
	}
	if wantErr == nil && !sameResponse(&want, &got, false) {
		t.Fatalf("%s: DecodeSegments mismatch (-Decode +DecodeSegments):\n%s", describe(segs), cmp.Diff(want, got, ignoreScratch))
	}
	if reused == nil {
		return
	}
	reusedErr := reused.DecodeSegments(segs, delta)
	if errText(reusedErr) != errText(wantErr) {
		t.Fatalf("%s: DecodeSegments into a reused Response: error %v, Decode error %v", describe(segs), reusedErr, wantErr)
	}
	// A reused Response keeps empty slices where a fresh one has nil.
	if wantErr == nil && !sameResponse(&want, reused, true) {
		t.Fatalf("%s: DecodeSegments into a reused Response mismatch (-Decode +DecodeSegments):\n%s",
			describe(segs), cmp.Diff(want, *reused, cmpopts.EquateEmpty(), ignoreScratch))
	}
}

// sameResponse is cmp.Equal(a, b, ignoreScratch), with cmpopts.EquateEmpty
// for the slices of Response when reused, at a hundredth of the cost: the
// tests compare hundreds of thousands of splits. TestSameResponseKnowsEveryField
// keeps it in step with the types.
func sameResponse(a, b *codec.Response, reused bool) bool {
	sameBytes := func(x, y []byte) bool { return (x == nil) == (y == nil) && bytes.Equal(x, y) }
	if a.Delta != b.Delta || a.TypeURL != b.TypeURL || a.VersionInfo != b.VersionInfo ||
		a.Nonce != b.Nonce || a.ControlPlane != b.ControlPlane ||
		len(a.Resources) != len(b.Resources) || !slices.Equal(a.RemovedResources, b.RemovedResources) ||
		!slices.Equal(a.ResourceErrors, b.ResourceErrors) {
		return false
	}
	if !reused && ((a.Resources == nil) != (b.Resources == nil) || (a.RemovedResources == nil) != (b.RemovedResources == nil)) {
		return false
	}
	for i := range a.Resources {
		x, y := &a.Resources[i], &b.Resources[i]
		if !sameBytes(x.Name, y.Name) || !sameBytes(x.Version, y.Version) || !sameBytes(x.TypeURL, y.TypeURL) ||
			!sameBytes(x.Body, y.Body) || x.Hash != y.Hash || x.Heartbeat != y.Heartbeat {
			return false
		}
	}
	return true
}

func TestSameResponseKnowsEveryField(t *testing.T) {
	leakcheck.Check(t)
	// Fields sameResponse compares; a new field must be added there too.
	for typ, want := range map[reflect.Type]int{
		reflect.TypeFor[codec.Response](): 8 + 1, // and the unexported scratch space
		reflect.TypeFor[codec.Resource](): 6,
	} {
		if got := typ.NumField(); got != want {
			t.Errorf("%v has %d fields, sameResponse knows %d", typ, got, want)
		}
	}
	r := cdsPush(t, 3)
	var a, b codec.Response
	if err := a.Decode(r, false); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		b.Decode(r, false)
		b.Resources[1].Body = append(bytes.Clone(b.Resources[1].Body[:i]), 'x')
		if sameResponse(&a, &b, false) {
			t.Errorf("sameResponse misses a Body that differs at byte %d", i)
		}
	}
	b.Decode(r, false)
	b.Resources[2].Name = b.Resources[2].Name[:0]
	if sameResponse(&a, &b, false) {
		t.Error("sameResponse misses a Name that differs")
	}
}

// group is a top-level field of the wire type no xDS message uses, with a
// field inside: the one thing DecodeSegments reads by copying the rest of
// the message.
func group(num protowire.Number, inner []byte) []byte {
	b := protowire.AppendTag(nil, num, protowire.StartGroupType)
	b = append(b, inner...)
	return protowire.AppendTag(b, num, protowire.EndGroupType)
}

// padded is a varint of v in 10 bytes, the most protowire reads: valid, but
// longer than needed, so that a header is as long as headers get.
func padded(v uint64) []byte {
	b := make([]byte, 10)
	for i := range 9 {
		b[i] = byte(v&0x7f) | 0x80
		v >>= 7
	}
	b[9] = byte(v)
	return b
}

// unknownFields are top-level fields of every wire type the envelope
// decoder does not read, appended to a response; protobuf keeps them as
// unknown fields.
func unknownFields() []byte {
	b := protowire.AppendVarint(protowire.AppendTag(nil, 3, protowire.VarintType), 1) // canary
	b = protowire.AppendFixed32(protowire.AppendTag(b, 10, protowire.Fixed32Type), 0xdeadbeef)
	b = protowire.AppendFixed64(protowire.AppendTag(b, 11, protowire.Fixed64Type), 0xfeedfacecafebeef)
	b = append(b, group(12, msg(1, "inside a group", 2, uint64(300)))...)
	b = append(b, group(13, group(14, msg(1, "nested")))...)
	// nonce, again, its tag and length padded to 10 bytes each.
	b = append(b, padded(uint64(protowire.EncodeTag(5, protowire.BytesType)))...)
	b = append(b, padded(uint64(len("padded-nonce")))...)
	return append(b, "padded-nonce"...)
}

func ttlWrapper(name, version string, m proto.Message) *anypb.Any {
	return mustAny(&discoveryv3.Resource{Name: name, Version: version, Resource: mustAny(m), Ttl: durationpb.New(30e9)})
}

func heartbeat(name, version string) *anypb.Any {
	return mustAny(&discoveryv3.Resource{Name: name, Version: version})
}

// smallResponses are responses of at most a few KB, split at every cut.
func smallResponses(tb testing.TB) []struct {
	name  string
	delta bool
	in    []byte
} {
	return []struct {
		name  string
		delta bool
		in    []byte
	}{
		{"SotW CDS", false, marshal(tb, &discoveryv3.DiscoveryResponse{
			VersionInfo: "2021-08-09T16:20:50Z/257", TypeUrl: codec.TypeCluster, Nonce: "n1",
			Resources:    []*anypb.Any{mustAny(istioCluster(1)), mustAny(istioCluster(2))},
			ControlPlane: &corev3.ControlPlane{Identifier: "istiod-7d4f9c8b6-x2x9z"},
		})},
		{"SotW TTL wrapper and heartbeat", false, marshal(tb, &discoveryv3.DiscoveryResponse{
			VersionInfo: "v2", TypeUrl: codec.TypeSecret, Nonce: "n4",
			Resources: []*anypb.Any{ttlWrapper("default", "v2", secret("default")), heartbeat("ROOTCA", "v1"), mustAny(secret("x"))},
		})},
		{"Delta EDS with removals", true, marshal(tb, &discoveryv3.DeltaDiscoveryResponse{
			SystemVersionInfo: "v3", TypeUrl: codec.TypeEndpoint, Nonce: "n5",
			Resources: []*discoveryv3.Resource{
				{Name: "outbound|8080||a", Version: "h1", Resource: mustAny(cla("outbound|8080||a", "10.0.0.1"))},
				{ResourceName: &discoveryv3.ResourceName{Name: "xdstp://b"}, Version: "h2", Resource: mustAny(cla("b", "10.0.0.2"))},
				{Version: "h3", Resource: mustAny(cla("named-by-the-body", "10.0.0.3"))},
				{Name: "heartbeat", Version: "h4"},
			},
			RemovedResources:     []string{"outbound|8080||gone"},
			RemovedResourceNames: []*discoveryv3.ResourceName{{Name: "xdstp://gone"}},
			ControlPlane:         &corev3.ControlPlane{Identifier: "istiod-1"},
		})},
		{"SotW unknown fields of every wire type", false, append(marshal(tb, &discoveryv3.DiscoveryResponse{
			VersionInfo: "v1", TypeUrl: codec.TypeListener, Nonce: "n6",
			Resources: []*anypb.Any{mustAny(listener("0.0.0.0_8080", 8080))},
		}), append(unknownFields(), msg(2, marshal(tb, mustAny(listener("virtualInbound", 15006))))...)...)},
		{"Delta unknown fields of every wire type", true, append(marshal(tb, &discoveryv3.DeltaDiscoveryResponse{
			TypeUrl: codec.TypeRoute, Nonce: "n7", RemovedResources: []string{"a"},
		}), unknownFields()...)},
		{"SotW empty values", false, msg(2, "", 1, "", 5, "", 4, "", 2, msg(1, "", 2, ""), 6, "")},
		{"Delta empty values", true, msg(2, "", 6, "", 8, "", 2, msg(2, ""), 7, msg(1, ""))},
		{"SotW repeated fields merge and replace", false, msg(
			4, codec.TypeCluster, 1, "v1", 5, "n1", 6, msg(1, "cp1"), 1, "v2", 5, "n2", 6, msg(1, "cp2"),
			2, msg(1, codec.TypeResource, 2, msg(3, "w", 2, msg(1, codec.TypeCluster), 2, msg(2, "body"))),
		)},
	}
}

func TestDecodeSegmentsEveryCut(t *testing.T) {
	leakcheck.Check(t)
	for _, tt := range smallResponses(t) {
		t.Run(tt.name, func(t *testing.T) {
			in := tt.in
			var reused codec.Response
			sameAsDecode(t, in, [][]byte{own(in)}, tt.delta, &reused)
			sameAsDecode(t, nil, cut(nil, 0, 0), tt.delta, &reused)
			for i := range len(in) + 1 {
				sameAsDecode(t, in, cut(in, i), tt.delta, &reused)
				sameAsDecode(t, in, cut(in, i, i, i), tt.delta, &reused) // empty segments at the cut
			}
			for size := 1; size <= 24; size++ {
				sameAsDecode(t, in, xdstest.Chunk(in, size), tt.delta, &reused)
			}
			// A short middle segment: a header or a value cut twice.
			for i := range len(in) + 1 {
				for j := i + 1; j <= min(i+24, len(in)); j++ {
					sameAsDecode(t, in, cut(in, i, j), tt.delta, nil)
				}
			}
		})
	}
}

// bigSecret is a Secret of about size bytes, which can be made larger than
// any segment.
func bigSecret(name string, size int) *tlsv3.Secret {
	s := secret(name)
	s.GetTlsCertificate().CertificateChain = &corev3.DataSource{Specifier: &corev3.DataSource_InlineBytes{
		InlineBytes: bytes.Repeat([]byte("MIIB"), size/4),
	}}
	return s
}

func TestDecodeSegmentsLarge(t *testing.T) {
	leakcheck.Check(t)
	big := &discoveryv3.DiscoveryResponse{
		// Fields other than resources can be large too, if unusually.
		VersionInfo: strings.Repeat("v", 40<<10), Nonce: strings.Repeat("n", 70<<10), TypeUrl: codec.TypeSecret,
		ControlPlane: &corev3.ControlPlane{Identifier: strings.Repeat("istiod-", 3<<10)},
	}
	for i := range 12 {
		name := fmt.Sprintf("secret-%d", i)
		switch i % 4 {
		case 0:
			big.Resources = append(big.Resources, mustAny(bigSecret(name, 100<<10)))
		case 1:
			big.Resources = append(big.Resources, ttlWrapper(name, "v9", bigSecret(name, 20<<10)))
		case 2:
			big.Resources = append(big.Resources, heartbeat(name, "v9"))
		case 3:
			big.Resources = append(big.Resources, mustAny(secret(name)))
		}
	}
	bigDelta := &discoveryv3.DeltaDiscoveryResponse{
		SystemVersionInfo: strings.Repeat("v", 20<<10), Nonce: "n", TypeUrl: codec.TypeSecret,
		RemovedResources:     []string{strings.Repeat("gone", 10<<10), "gone"},
		RemovedResourceNames: []*discoveryv3.ResourceName{{Name: strings.Repeat("xdstp://gone", 3<<10)}},
	}
	for i := range 6 {
		bigDelta.Resources = append(bigDelta.Resources, &discoveryv3.Resource{
			Name: fmt.Sprintf("secret-%d", i), Version: "v1", Resource: mustAny(bigSecret("", 30<<10*i)),
		})
	}
	ttlPush := &discoveryv3.DiscoveryResponse{TypeUrl: codec.TypeCluster, VersionInfo: "v", Nonce: "n"}
	for i := range 150 {
		c := istioCluster(i)
		if i%10 == 9 {
			ttlPush.Resources = append(ttlPush.Resources, heartbeat(c.Name, "v"))
		} else {
			ttlPush.Resources = append(ttlPush.Resources, ttlWrapper(c.Name, "v", c))
		}
	}
	pushes := []struct {
		name  string
		delta bool
		in    []byte
	}{
		{"SotW CDS", false, cdsPush(t, 200)},
		{"Delta CDS", true, deltaCDSPush(t, 200)},
		{"SotW TTL wrappers and heartbeats", false, marshal(t, ttlPush)},
		{"SotW fields larger than a segment", false, marshal(t, big)},
		{"Delta fields larger than a segment", true, marshal(t, bigDelta)},
	}
	splits := []struct {
		name  string
		split func([]byte) [][]byte
	}{
		{"1 byte", func(b []byte) [][]byte { return xdstest.Chunk(b, 1) }},
		{"16 KB", func(b []byte) [][]byte { return xdstest.Chunk(b, 16<<10) }},
		// gRPC's first buffer is shorter by the 5-byte message header.
		{"gRPC frames", func(b []byte) [][]byte { return xdstest.Chunk(b, 16<<10-5, 16<<10) }},
		{"uneven 1", func(b []byte) [][]byte { return xdstest.Chunk(b, xdstest.RandomSizes(1, 200)...) }},
		{"uneven 2", func(b []byte) [][]byte { return xdstest.Chunk(b, xdstest.RandomSizes(2, 200)...) }},
		{"uneven 3", func(b []byte) [][]byte { return xdstest.Chunk(b, xdstest.RandomSizes(3, 200)...) }},
		{"random cuts", func(b []byte) [][]byte {
			rng := rand.New(rand.NewPCG(4, 4))
			at := make([]int, 50)
			for i := range at {
				at[i] = rng.IntN(len(b) + 1)
			}
			slices.Sort(at)
			return cut(b, at...)
		}},
	}
	for _, p := range pushes {
		t.Run(p.name, func(t *testing.T) {
			// One Response across splits, so that its scratch space is
			// reused whatever the last split left in it.
			var reused codec.Response
			for _, s := range splits {
				t.Run(s.name, func(t *testing.T) {
					sameAsDecode(t, p.in, s.split(p.in), p.delta, &reused)
				})
			}
		})
	}
}

// A frame cut anywhere, whole or not, malformed or not, gives DecodeSegments
// the error Decode gives, byte offset included, and never a panic.
func TestDecodeSegmentsErrors(t *testing.T) {
	leakcheck.Check(t)
	goodAny := marshal(t, mustAny(secret("default")))
	overflow := []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}
	tag := func(num protowire.Number, typ protowire.Type) []byte { return protowire.AppendTag(nil, num, typ) }
	cat := func(parts ...[]byte) []byte { return slices.Concat(parts...) }
	tests := []struct {
		name  string
		delta bool
		in    []byte
	}{
		{"garbage", false, overflow},
		{"tag overflow after a field", false, cat(msg(5, "nonce"), overflow)},
		{"field number 0", false, cat(msg(5, "nonce"), []byte{0x00, 0x00})},
		{"field number above the protobuf maximum", true, cat(msg(5, "nonce"), protowire.AppendVarint(tag(protowire.MaxValidNumber+1, protowire.VarintType), 1))},
		{"end group without a start", true, cat(msg(5, "nonce"), tag(7, protowire.EndGroupType))},
		{"reserved wire type 6", false, cat(msg(5, "nonce"), []byte{5<<3 | 6, 0x00})},
		{"reserved wire type 7", false, cat(msg(5, "nonce"), []byte{5<<3 | 7, 0x00})},
		{"group closed by another number", false, cat(msg(5, "nonce"), tag(9, protowire.StartGroupType), msg(1, "x"), tag(10, protowire.EndGroupType), msg(1, "v"))},
		{"group never closed", false, cat(msg(5, "nonce"), tag(9, protowire.StartGroupType), msg(1, "x", 2, "y"))},
		{"group with a malformed field", true, cat(msg(5, "nonce"), tag(9, protowire.StartGroupType), msg(1, "x"), overflow)},
		{"group then a malformed field", false, cat(msg(5, "nonce"), group(9, msg(1, "x")), msg(1, "v"), overflow)},
		{"length overflow", false, cat(msg(5, "nonce"), tag(1, protowire.BytesType), overflow)},
		{"length truncated", false, cat(msg(5, "nonce"), tag(1, protowire.BytesType), []byte{0x80, 0x80})},
		{"length past the end", true, cat(msg(5, "nonce"), tag(1, protowire.BytesType), []byte{0x20}, []byte("short"))},
		{"varint overflow", false, cat(msg(5, "nonce"), tag(3, protowire.VarintType), overflow)},
		{"fixed64 truncated", false, cat(msg(5, "nonce"), tag(11, protowire.Fixed64Type), []byte{1, 2, 3, 4, 5})},
		{"fixed32 truncated", true, cat(msg(5, "nonce"), tag(11, protowire.Fixed32Type), []byte{1, 2, 3})},
		{"truncated nonce", false, msg(1, "v1", 5, "nonce")[:8]},
		{"malformed resources[1]", false, msg(2, goodAny, 2, truncatedAny, 5, "nonce")},
		{"malformed TTL wrapper", false, msg(2, goodAny, 2, msg(1, codec.TypeResource, 2, truncatedAny))},
		{"malformed Any in a TTL wrapper", false, msg(2, msg(1, codec.TypeResource, 2, msg(3, "name", 2, truncatedAny)))},
		{"malformed control_plane", false, msg(1, "v", 6, overflow)},
		{"malformed Delta resource", true, msg(2, msg(3, "a", 2, goodAny), 2, msg(3, "b", 2, truncatedAny))},
		{"malformed Delta resource_name", true, msg(2, msg(8, truncatedAny))},
		{"malformed removed_resource_names", true, msg(6, "gone", 8, truncatedAny)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r codec.Response
			if err := r.Decode(tt.in, tt.delta); err == nil {
				t.Fatalf("Decode reads %x without error: the case tests nothing", tt.in)
			}
			var reused codec.Response
			for i := range len(tt.in) + 1 {
				sameAsDecode(t, tt.in, cut(tt.in, i), tt.delta, &reused)
				sameAsDecode(t, tt.in, cut(tt.in, i, i), tt.delta, &reused)
			}
			sameAsDecode(t, tt.in, xdstest.Chunk(tt.in, 1), tt.delta, &reused)
			sameAsDecode(t, tt.in, xdstest.Chunk(tt.in, 3, 0, 2), tt.delta, &reused)
		})
	}
	// Every prefix of a valid frame is either a shorter valid frame or cut
	// in the middle of a field; both must read the same in segments.
	for _, tt := range smallResponses(t) {
		t.Run("prefixes of "+tt.name, func(t *testing.T) {
			var reused codec.Response
			for n := range len(tt.in) {
				in := tt.in[:n]
				for _, at := range []int{n / 2, max(n-1, 0), max(n-3, 0), min(7, n)} {
					sameAsDecode(t, in, cut(in, at), tt.delta, &reused)
				}
				sameAsDecode(t, in, xdstest.Chunk(in, 5), tt.delta, &reused)
			}
		})
	}
}

// Only the values that straddle segments are copied; the others are read
// where they lie, which shows as their views changing with the segments.
func TestDecodeSegmentsCopiesOnlyStraddlers(t *testing.T) {
	leakcheck.Check(t)
	const segment = 16 << 10
	in := cdsPush(t, 60)
	segs := xdstest.Chunk(in, segment)
	var r codec.Response
	if err := r.DecodeSegments(segs, false); err != nil {
		t.Fatal(err)
	}
	// Where each resource's Any lies in the message.
	var straddles []bool
	for off := 0; off < len(in); {
		num, typ, n := protowire.ConsumeTag(in[off:])
		l, m := protowire.ConsumeVarint(in[off+n:])
		if n < 0 || typ != protowire.BytesType || m < 0 {
			t.Fatalf("cdsPush has an unexpected field at byte %d", off)
		}
		start := off + n + m
		end := start + int(l)
		if num == 2 {
			straddles = append(straddles, start/segment != (end-1)/segment)
		}
		off = end
	}
	if len(straddles) != len(r.Resources) {
		t.Fatalf("decoded %d resources, the message has %d", len(r.Resources), len(straddles))
	}
	bodies := make([][]byte, len(r.Resources))
	for i, res := range r.Resources {
		bodies[i] = bytes.Clone(res.Body)
	}
	for _, s := range segs {
		for i := range s {
			s[i] = 0xa5
		}
	}
	copied := 0
	for i, res := range r.Resources {
		inPlace := !bytes.Equal(res.Body, bodies[i])
		if inPlace == straddles[i] {
			t.Errorf("resources[%d]: straddles segments: %v, read in place: %v", i, straddles[i], inPlace)
		}
		if !inPlace {
			copied++
		}
	}
	if copied == 0 || copied > len(segs)-1 {
		t.Errorf("%d of %d resources copied across %d segments", copied, len(r.Resources), len(segs))
	}
}

// The copies of straddling fields made in one decode must survive the
// arena growing later in the same decode: a fresh Response, then one that
// last decoded a much smaller push, decode a push whose copies outgrow what
// they have.
func TestDecodeSegmentsArenaGrowth(t *testing.T) {
	leakcheck.Check(t)
	small, large := cdsPush(t, 20), cdsPush(t, 1000)
	var r codec.Response
	sameAsDecode(t, large, xdstest.Chunk(large, 1000), false, &r)
	r = codec.Response{}
	sameAsDecode(t, small, xdstest.Chunk(small, 1000), false, &r)
	sameAsDecode(t, large, xdstest.Chunk(large, 100), false, &r)
	// 1-byte segments: every field is copied, the whole message through
	// the arena.
	sameAsDecode(t, large, xdstest.Chunk(large, 1), false, &r)
}

func TestDecodeBuffers(t *testing.T) {
	leakcheck.Check(t)
	for _, tt := range []struct {
		name  string
		delta bool
		in    []byte
	}{
		{"SotW", false, cdsPush(t, 100)},
		{"Delta", true, deltaCDSPush(t, 100)},
		{"malformed", false, cdsPush(t, 100)[:50_000]},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var data mem.BufferSlice
			for _, s := range xdstest.Chunk(tt.in, 16<<10-5, 16<<10) {
				data = append(data, mem.SliceBuffer(s))
			}
			var want, got codec.Response
			wantErr := want.Decode(tt.in, tt.delta)
			for range 2 { // the second time with the list of segments reused
				gotErr := got.DecodeBuffers(data, tt.delta)
				if errText(gotErr) != errText(wantErr) {
					t.Fatalf("DecodeBuffers error %v, Decode error %v", gotErr, wantErr)
				}
				if wantErr == nil && !sameResponse(&want, &got, true) {
					t.Fatalf("DecodeBuffers mismatch (-Decode +DecodeBuffers):\n%s", cmp.Diff(want, got, cmpopts.EquateEmpty(), ignoreScratch))
				}
			}
		})
	}
}

// segmentsOf cuts data into segments whose lengths are the bytes of sizes in
// turn; a 0 makes an empty segment, and sizes of nothing but 0 make 1-byte
// segments.
func segmentsOf(data, sizes []byte) [][]byte {
	if len(sizes) == 0 {
		return [][]byte{own(data)}
	}
	lens := make([]int, len(sizes))
	for i, s := range sizes {
		lens[i] = int(s)
	}
	if !slices.ContainsFunc(lens, func(n int) bool { return n > 0 }) {
		lens = []int{1}
	}
	return xdstest.Chunk(data, lens...)
}

// FuzzSegmentedDecode cuts every input into segments as sizes says: whatever
// the input, DecodeSegments must read the segments as Decode reads the whole.
func FuzzSegmentedDecode(f *testing.F) {
	var reused codec.Response
	f.Fuzz(func(t *testing.T, data, sizes []byte) {
		segs := segmentsOf(data, sizes)
		for _, delta := range []bool{false, true} {
			sameAsDecode(t, data, segs, delta, &reused)
		}
	})
}

// TestKeepViewsOutlivesTheNextDecode: after KeepViews, the views of a
// decode in pieces — those into the pieces and those into the copies of
// what straddled them — still read the message once the Response has
// decoded another; without it, the next decode writes over the copies.
func TestKeepViewsOutlivesTheNextDecode(t *testing.T) {
	leakcheck.Check(t)
	first := xdstest.ClusterPush(20, 300, "v1", "n1")
	second := xdstest.ClusterPush(20, 300, "v2", "n2")
	for i := range second {
		if second[i] == 'o' {
			second[i] = 'X' // other bytes where the first has its names
		}
	}
	var want codec.Response
	if err := want.Decode(first, false); err != nil {
		t.Fatal(err)
	}
	for _, keep := range []bool{true, false} {
		var r codec.Response
		if err := r.DecodeSegments(xdstest.Chunk(first, 100), false); err != nil {
			t.Fatal(err)
		}
		views := slices.Clone(r.Resources)
		copied, counted := 0, r.ViewCopies() // counting leaves the copies to the next decode
		if keep {
			copied = r.KeepViews()
			if copied != counted {
				t.Errorf("KeepViews left %d bytes of copies to the views, ViewCopies counted %d", copied, counted)
			}
		}
		if err := r.DecodeSegments(xdstest.Chunk(second, 100), false); err != nil {
			t.Fatal(err)
		}
		same := true
		for i := range views {
			same = same && bytes.Equal(views[i].Name, want.Resources[i].Name) && bytes.Equal(views[i].Body, want.Resources[i].Body)
		}
		switch {
		case keep && (!same || copied == 0):
			t.Errorf("after KeepViews (%d bytes of copies), the views no longer read the first message", copied)
		case !keep && same:
			t.Errorf("without KeepViews the views still read the first message: the test no longer straddles pieces")
		}
	}
}

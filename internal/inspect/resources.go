package inspect

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/redact"
)

// body is one resource of a push, as the capture holds it (redacted).
type body struct {
	name      string
	typeURL   string
	value     []byte
	heartbeat bool // a TTL refresh without a resource
	// redacted: the capture already replaced the response's secrets.
	redacted bool
}

// decodeBodies opens a response's resources. The names are the codec's, the
// ones the tracker uses, paired by position: both read the resources field
// in order, one entry per occurrence.
func decodeBodies(msg []byte, delta, redacted bool, resp *codec.Response) ([]body, error) {
	var out []body
	if delta {
		var m discovery.DeltaDiscoveryResponse
		if err := proto.Unmarshal(msg, &m); err != nil {
			return nil, fmt.Errorf("decoding DeltaDiscoveryResponse: %w", err)
		}
		for _, r := range m.GetResources() {
			out = append(out, wrapped(r))
		}
	} else {
		var m discovery.DiscoveryResponse
		if err := proto.Unmarshal(msg, &m); err != nil {
			return nil, fmt.Errorf("decoding DiscoveryResponse: %w", err)
		}
		for _, a := range m.GetResources() {
			if a.GetTypeUrl() == codec.TypeResource {
				var r discovery.Resource
				if err := proto.Unmarshal(a.GetValue(), &r); err != nil {
					return nil, fmt.Errorf("decoding a TTL-wrapped Resource: %w", err)
				}
				out = append(out, wrapped(&r))
				continue
			}
			out = append(out, body{typeURL: a.GetTypeUrl(), value: a.GetValue()})
		}
	}
	for i := range out {
		out[i].redacted = redacted
		if i < len(resp.Resources) {
			out[i].name = string(resp.Resources[i].Name)
		}
	}
	return out, nil
}

func wrapped(r *discovery.Resource) body {
	if r.GetResource() == nil {
		return body{name: r.GetName(), heartbeat: true}
	}
	return body{name: r.GetName(), typeURL: r.GetResource().GetTypeUrl(), value: r.GetResource().GetValue()}
}

// resourceJSON renders a resource as JSON: protojson with proto field names,
// through go-control-plane's registered types. A resource of an unknown
// type, or an unknown Any inside a known one, shows as its type URL and its
// bytes in base64, as the capture holds them.
//
// Secrets were replaced by their fingerprints when the capture was written
// (redacted), so they show as those; a response the capture did not mark
// redacted goes through the shared redaction once more, in case it holds
// what an older writer's quick check did not look for. (Running it on a
// redacted one would show the fingerprint's fingerprint.)
func resourceJSON(b body) (jsonValue, error) {
	typeURL, value := b.typeURL, b.value
	if !b.redacted {
		red, _, err := redact.Resource(typeURL, value)
		if err != nil {
			// Unreadable where a secret can be: shown by size alone.
			return jsonObject{{"@type", typeURL}, {"undecoded_bytes", json.Number(strconv.Itoa(len(value)))}}, nil
		}
		value = red
	}
	m, err := anypb.UnmarshalNew(&anypb.Any{TypeUrl: typeURL, Value: value}, proto.UnmarshalOptions{Resolver: redact.Types})
	if err != nil {
		return unknownJSON(typeURL, value), nil
	}
	redact.StandInUnknownAnys(m.ProtoReflect())
	out, err := protojson.MarshalOptions{UseProtoNames: true, Resolver: redact.Types}.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("rendering %s as JSON: %w", typeURL, err)
	}
	v, err := parseJSON(out)
	if err != nil {
		return nil, err
	}
	return restoreUnknown(v), nil
}

func unknownJSON(typeURL string, value []byte) jsonValue {
	return jsonObject{{"@type", typeURL}, {"value_base64", base64.StdEncoding.EncodeToString(value)}}
}

// restoreUnknown turns the stand-ins back into {"@type": URL, "value_base64": ...}.
func restoreUnknown(v jsonValue) jsonValue {
	switch v := v.(type) {
	case jsonObject:
		if url, ok := v.get("@type"); ok && url == "type.googleapis.com/google.protobuf.Struct" {
			if inner, ok := v.get("value"); ok {
				if o, ok := inner.(jsonObject); ok {
					if u, ok := o.get(redact.UnknownTypeKey); ok {
						b, _ := o.get("value_base64")
						return jsonObject{{"@type", u}, {"value_base64", b}}
					}
				}
			}
		}
		out := make(jsonObject, len(v))
		for i, f := range v {
			out[i] = jsonField{f.Key, restoreUnknown(f.Value)}
		}
		return out
	case []jsonValue:
		out := make([]jsonValue, len(v))
		for i, e := range v {
			out[i] = restoreUnknown(e)
		}
		return out
	}
	return v
}

// jsonValue is a JSON value that keeps the order of object keys (protojson
// writes fields in field-number order, name first): a jsonObject,
// []jsonValue, string, json.Number, bool or nil.
type jsonValue = any

type jsonObject []jsonField

type jsonField struct {
	Key   string
	Value jsonValue
}

func (o jsonObject) get(key string) (jsonValue, bool) {
	for _, f := range o {
		if f.Key == key {
			return f.Value, true
		}
	}
	return nil, false
}

func parseJSON(b []byte) (jsonValue, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	return parseValue(dec)
}

func parseValue(dec *json.Decoder) (jsonValue, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return tok, nil
	}
	switch d {
	case '{':
		obj := jsonObject{}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return nil, err
			}
			v, err := parseValue(dec)
			if err != nil {
				return nil, err
			}
			obj = append(obj, jsonField{k.(string), v})
		}
		_, err := dec.Token()
		return obj, err
	case '[':
		arr := []jsonValue{}
		for dec.More() {
			v, err := parseValue(dec)
			if err != nil {
				return nil, err
			}
			arr = append(arr, v)
		}
		_, err := dec.Token()
		return arr, err
	}
	return nil, fmt.Errorf("unexpected %v", d)
}

// writeJSON writes v indented, each line after the first starting with
// prefix; compact writes it on one line.
func writeJSON(b *strings.Builder, v jsonValue, prefix string, compact bool) {
	nl := func(p string) {
		if !compact {
			b.WriteString("\n" + p)
		}
	}
	switch v := v.(type) {
	case jsonObject:
		if len(v) == 0 {
			b.WriteString("{}")
			return
		}
		b.WriteByte('{')
		for i, f := range v {
			if i > 0 {
				b.WriteByte(',')
				if compact {
					b.WriteByte(' ')
				}
			}
			nl(prefix + "  ")
			b.WriteString(quote(f.Key))
			b.WriteString(": ")
			writeJSON(b, f.Value, prefix+"  ", compact)
		}
		nl(prefix)
		b.WriteByte('}')
	case []jsonValue:
		if len(v) == 0 {
			b.WriteString("[]")
			return
		}
		b.WriteByte('[')
		for i, e := range v {
			if i > 0 {
				b.WriteByte(',')
				if compact {
					b.WriteByte(' ')
				}
			}
			nl(prefix + "  ")
			writeJSON(b, e, prefix+"  ", compact)
		}
		nl(prefix)
		b.WriteByte(']')
	case string:
		b.WriteString(quote(v))
	case json.Number:
		b.WriteString(v.String())
	case bool:
		fmt.Fprint(b, v)
	case nil:
		b.WriteString("null")
	default:
		fmt.Fprintf(b, "%v", v)
	}
}

// quote is a JSON string without HTML escaping.
func quote(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.Encode(s)
	return strings.TrimSuffix(b.String(), "\n")
}

func compactJSON(v jsonValue) string {
	var b strings.Builder
	writeJSON(&b, v, "", true)
	return b.String()
}

// fieldChange is one difference between two versions of a resource.
type fieldChange struct {
	Path     string // e.g. load_assignment.endpoints[0].lb_endpoints[1].endpoint.address.socket_address.port_value
	Old, New string // compact JSON; Old is empty for an added field, New for a removed one
}

func (c fieldChange) String() string {
	switch {
	case c.Old == "":
		return "+ " + c.Path + ": " + shorten(c.New)
	case c.New == "":
		return "- " + c.Path + ": " + shorten(c.Old)
	}
	return "~ " + c.Path + ": " + shorten(c.Old) + " → " + shorten(c.New)
}

// shorten keeps a long value (a whole added sub-message) readable.
func shorten(s string) string {
	const limit = 300
	if len(s) <= limit {
		return s
	}
	return s[:limit] + fmt.Sprintf("… (%d more bytes)", len(s)-limit)
}

// diffJSON lists the field-level differences from a to b: paths in the
// proto field names, list elements by index, map entries by key.
func diffJSON(a, b jsonValue) []fieldChange {
	var out []fieldChange
	diffAt("", a, b, &out)
	return out
}

var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func childPath(path, key string) string {
	if !identifier.MatchString(key) {
		return path + "[" + quote(key) + "]"
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

func diffAt(path string, a, b jsonValue, out *[]fieldChange) {
	switch av := a.(type) {
	case jsonObject:
		bv, ok := b.(jsonObject)
		if !ok {
			break
		}
		for _, f := range av {
			p := childPath(path, f.Key)
			if nv, ok := bv.get(f.Key); ok {
				diffAt(p, f.Value, nv, out)
			} else {
				*out = append(*out, fieldChange{Path: p, Old: compactJSON(f.Value)})
			}
		}
		for _, f := range bv {
			if _, ok := av.get(f.Key); !ok {
				*out = append(*out, fieldChange{Path: childPath(path, f.Key), New: compactJSON(f.Value)})
			}
		}
		return
	case []jsonValue:
		bv, ok := b.([]jsonValue)
		if !ok {
			break
		}
		for i := range max(len(av), len(bv)) {
			p := fmt.Sprintf("%s[%d]", path, i)
			switch {
			case i >= len(bv):
				*out = append(*out, fieldChange{Path: p, Old: compactJSON(av[i])})
			case i >= len(av):
				*out = append(*out, fieldChange{Path: p, New: compactJSON(bv[i])})
			default:
				diffAt(p, av[i], bv[i], out)
			}
		}
		return
	}
	if o, n := compactJSON(a), compactJSON(b); o != n {
		if path == "" {
			path = "(the whole resource)"
		}
		*out = append(*out, fieldChange{Path: path, Old: o, New: n})
	}
}

package rollout

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protojson"
)

// Jaeger's api_v3 over HTTP answers with OTLP's JSON encoding of
// TracesData, wrapped in {"result": ...}, read here span by span as it
// arrives: a trace of tens of thousands of spans is never held whole, and
// past the most spans a read keeps, the rest is not read. OTLP's JSON
// writes trace and span ids in hex where protojson reads base64; they are
// read apart.

// get fetches path from Jaeger's HTTP API and hands the body to read;
// a 404 (nothing found) hands none.
func (j *Jaeger) get(ctx context.Context, path string, read func(io.Reader) error) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, j.base+path, nil)
	if err != nil {
		return fmt.Errorf("Jaeger at %s: %w", j.Target, err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := j.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("Jaeger at %s did not answer in time: %w", j.Target, ctx.Err())
		}
		return fmt.Errorf("Jaeger at %s cannot be reached (is it the HTTP query API, http://HOST:16686, or the gRPC one, HOST:16685?): %v", j.Target, err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound && strings.HasPrefix(path, "/api/v3/traces"):
		return nil
	case resp.StatusCode != http.StatusOK:
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
		var e struct {
			Error struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		msg := strings.TrimSpace(string(body))
		if json.Unmarshal(body, &e) == nil && e.Error.Message != "" {
			msg = e.Error.Message
		}
		if resp.StatusCode == http.StatusNotFound {
			msg = "no api_v3 here (is it Jaeger's query API, v1.50 or later?): " + msg
		}
		return fmt.Errorf("Jaeger at %s: GET %s: %s: %.300s", j.Target, path, resp.Status, msg)
	}
	if err := read(resp.Body); err != nil {
		return fmt.Errorf("Jaeger at %s: reading GET %s: %w", j.Target, path, err)
	}
	return nil
}

func (j *Jaeger) httpServices(ctx context.Context) ([]string, error) {
	var out struct {
		Services []string `json:"services"`
	}
	err := j.get(ctx, "/api/v3/services", func(r io.Reader) error {
		return json.NewDecoder(io.LimitReader(r, 16<<20)).Decode(&out)
	})
	return out.Services, err
}

// httpTraces reads the TracesData that path answers with into r.
func (j *Jaeger) httpTraces(ctx context.Context, path string, r *spanReader) error {
	return j.get(ctx, path, func(body io.Reader) error {
		err := readTracesJSON(body, r)
		if errors.Is(err, errFull) {
			j.truncated += r.left
			return nil
		}
		return err
	})
}

// errFull ends a read that reached the most spans it keeps.
var errFull = errors.New("read the most spans a read keeps")

var jsonRead = protojson.UnmarshalOptions{DiscardUnknown: true}

// readTracesJSON walks {"result": {"resourceSpans": [{"resource": …,
// "scopeSpans": [{"spans": [ … ]}]}]}} and hands each span to r.
func readTracesJSON(body io.Reader, r *spanReader) error {
	d := json.NewDecoder(body)
	return object(d, func(key string) error {
		if key != "result" {
			return skip(d)
		}
		return object(d, func(key string) error {
			if key != "resourceSpans" && key != "resource_spans" {
				return skip(d)
			}
			return array(d, func() error {
				var res map[string]string
				first := len(r.spans) // the spans of this ResourceSpans
				return object(d, func(key string) error {
					switch key {
					case "resource":
						var raw json.RawMessage
						if err := d.Decode(&raw); err != nil {
							return err
						}
						var rp resourcepb.Resource
						if err := jsonRead.Unmarshal(raw, &rp); err != nil {
							return fmt.Errorf("a resource: %w", err)
						}
						res = attrMap(rp.GetAttributes())
						// Written after its spans, it is theirs all the same.
						for i := first; i < len(r.spans); i++ {
							r.spans[i].Resource = res
						}
						return nil
					case "scopeSpans", "scope_spans":
						return array(d, func() error {
							return object(d, func(key string) error {
								if key != "spans" {
									return skip(d)
								}
								return array(d, func() error { return readSpan(d, r, res) })
							})
						})
					}
					return skip(d)
				})
			})
		})
	})
}

// readSpan reads one span of OTLP's JSON into r.
func readSpan(d *json.Decoder, r *spanReader, res map[string]string) error {
	var raw json.RawMessage
	if err := d.Decode(&raw); err != nil {
		return err
	}
	var ids struct {
		TraceID string `json:"traceId"`
		SpanID  string `json:"spanId"`
	}
	if err := json.Unmarshal(raw, &ids); err != nil {
		return fmt.Errorf("a span: %w", err)
	}
	var s tracepb.Span
	if err := jsonRead.Unmarshal(raw, &s); err != nil {
		return fmt.Errorf("a span: %w", err)
	}
	var err error
	if s.TraceId, err = hex.DecodeString(ids.TraceID); err != nil {
		return fmt.Errorf("a span's traceId %q: %w", ids.TraceID, err)
	}
	if s.SpanId, err = hex.DecodeString(ids.SpanID); err != nil {
		return fmt.Errorf("a span's spanId %q: %w", ids.SpanID, err)
	}
	if !r.add(&s, res) {
		return errFull
	}
	return nil
}

// object reads a JSON object, calling each with every key, before its value.
func object(d *json.Decoder, each func(key string) error) error {
	if err := expect(d, '{'); err != nil {
		return err
	}
	for d.More() {
		t, err := d.Token()
		if err != nil {
			return err
		}
		key, ok := t.(string)
		if !ok {
			return fmt.Errorf("a key, got %v", t)
		}
		if err := each(key); err != nil {
			return err
		}
	}
	_, err := d.Token() // }
	return err
}

// array reads a JSON array, calling each before every element; null is an
// empty one.
func array(d *json.Decoder, each func() error) error {
	t, err := d.Token()
	if err != nil {
		return err
	}
	if t == nil {
		return nil
	}
	if t != json.Delim('[') {
		return fmt.Errorf("an array, got %v", t)
	}
	for d.More() {
		if err := each(); err != nil {
			return err
		}
	}
	_, err = d.Token() // ]
	return err
}

func expect(d *json.Decoder, delim json.Delim) error {
	t, err := d.Token()
	if err != nil {
		return err
	}
	if t != delim {
		return fmt.Errorf("%v, got %v", delim, t)
	}
	return nil
}

// skip reads past one value.
func skip(d *json.Decoder) error {
	var raw json.RawMessage
	return d.Decode(&raw)
}

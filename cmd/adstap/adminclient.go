package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode"

	"github.com/adstap/adstap/internal/runconfig"
)

// adminClient reads a running tap's admin pages: `adstap status` and
// `adstap config` are its users, so they work where there is no curl (the
// distroless image: kubectl exec ... -- /adstap status).
type adminClient struct {
	base string // http://host:port
	http *http.Client
}

// adminFlag is --admin of the commands that read a running tap. Its default
// and its environment twin (ADSTAP_ADMIN) are those of adstap run's, so next
// to a tap started with either, the command finds it without being told.
func adminFlag(c *command, p *string) {
	c.String(p, "admin", runconfig.DefaultAdmin, "admin `host:port` of the running adstap (its --admin)")
}

func newAdminClient(addr string) (*adminClient, error) {
	if addr == "" || addr == "off" {
		return nil, usagef("--admin: want the admin address of a running adstap, host:port")
	}
	base := addr
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	u, err := url.Parse(base)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, usagef("--admin: address %q: want host:port or http://host:port", addr)
	}
	return &adminClient{base: strings.TrimSuffix(u.String(), "/"), http: &http.Client{Timeout: 10 * time.Second}}, nil
}

// adminError is an answer other than 200 from the admin server: its body
// says why, in words meant for people.
type adminError struct {
	status int
	text   string
}

func (e *adminError) Error() string { return e.text }

// get decodes the JSON of path into v.
func (c *adminClient) get(ctx context.Context, path string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("reading %s: %w (is adstap running with --admin at %s?)", c.base+path, unwrapURLError(err), strings.TrimPrefix(c.base, "http://"))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return fmt.Errorf("reading %s: %w", c.base+path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return &adminError{status: resp.StatusCode, text: fmt.Sprintf("%s: %s", c.base+path, strings.TrimSpace(string(body)))}
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("%s: not what adstap serves there (%v); is %s the admin address of adstap?", c.base+path, err, strings.TrimPrefix(c.base, "http://"))
	}
	return nil
}

// unwrapURLError drops net/http's "Get <url>:" prefix, which the message
// around it says already.
func unwrapURLError(err error) error {
	if ue, ok := err.(*url.Error); ok {
		return ue.Err
	}
	return err
}

// printable makes a string from the wire safe for a terminal: control
// characters (an escape sequence could rewrite the screen) become U+FFFD.
func printable(s string) string {
	if strings.IndexFunc(s, unicode.IsControl) < 0 {
		return s
	}
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return '\uFFFD'
		}
		return r
	}, s)
}

// age says how long ago t was, in one short word: 850ms, 12s, 4m10s, 3h20m, 2d5h.
func age(now, t time.Time) string {
	d := now.Sub(t)
	switch {
	case d < 0:
		d = 0
		fallthrough
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh%dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%dh", int(d.Hours())/24, int(d.Hours())%24)
}

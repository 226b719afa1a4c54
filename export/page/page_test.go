package page_test

import (
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/export/page"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/track"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestPageServesItsOwnFilesOnly: the page and what it loads come from the
// binary, with their types and a policy that allows nothing else.
func TestPageServesItsOwnFilesOnly(t *testing.T) {
	leakcheck.Check(t)
	mux := http.NewServeMux()
	for pattern, h := range page.Handlers() {
		mux.Handle(pattern, h)
	}
	get := func(path string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		return rec
	}
	index := get("/")
	if index.Code != 200 || !strings.HasPrefix(index.Header().Get("Content-Type"), "text/html") {
		t.Fatalf("GET /: %d %s", index.Code, index.Header().Get("Content-Type"))
	}
	refs := regexp.MustCompile(`(?:src|href)="([^"]*)"`).FindAllStringSubmatch(index.Body.String(), -1)
	if len(refs) < 3 {
		t.Fatalf("the page loads %d files, want its script, style and icon", len(refs))
	}
	types := map[string]string{".js": "text/javascript", ".css": "text/css", ".svg": "image/svg+xml"}
	for _, ref := range refs {
		path := ref[1]
		if !strings.HasPrefix(path, "/ui/") {
			t.Errorf("the page loads %s, not one of its own files", path)
			continue
		}
		rec := get(path)
		want := types[path[strings.LastIndex(path, "."):]]
		if rec.Code != 200 || !strings.HasPrefix(rec.Header().Get("Content-Type"), want) {
			t.Errorf("GET %s: %d %q, want 200 %s", path, rec.Code, rec.Header().Get("Content-Type"), want)
		}
		if rec.Header().Get("Content-Security-Policy") == "" || rec.Header().Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s without its security headers: %v", path, rec.Header())
		}
	}
	csp := index.Header().Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'none'", "script-src 'self'", "connect-src 'self'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("Content-Security-Policy %q lacks %q", csp, want)
		}
	}
	if strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "unsafe-eval") {
		t.Errorf("Content-Security-Policy %q allows inline script", csp)
	}
	js := get("/ui/page.js").Body.String()
	if strings.Contains(js, "innerHTML") || strings.Contains(js, "outerHTML") || strings.Contains(js, "insertAdjacentHTML") || strings.Contains(js, "document.write") {
		t.Error("page.js writes markup from strings; wire strings must go in as text")
	}
	if got := get("/nothing-here").Code; got != http.StatusNotFound {
		t.Errorf("GET /nothing-here: %d, want 404", got)
	}
}

// TestPageKnowsEveryState: the live page's script and style name the
// states of /debug/streams as track.State says them, and show each in
// the words State.Display gives it.
func TestPageKnowsEveryState(t *testing.T) {
	leakcheck.Check(t)
	read := func(name string) string {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	js, css := read("page.js"), read("page.css")
	isState := func(s string) bool { return slices.Contains(track.States[:], track.State(s)) }

	// Every state the script compares a type's state (ts.state) with, or keys a
	// map by, is a state.
	named := map[string]bool{}
	for _, re := range []*regexp.Regexp{
		regexp.MustCompile(`\bts\.state\s*[!=]==?\s*"([^"]*)"`),
		regexp.MustCompile(`\b([A-Z][A-Z_]+):\s*ts\.`),
	} {
		for _, m := range re.FindAllStringSubmatch(js, -1) {
			named[m[1]] = true
			if !isState(m[1]) {
				t.Errorf("page.js takes %q for a state; the states are %v", m[1], track.States)
			}
		}
	}
	// Each state shown in other words is shown in State.Display's.
	shown := map[string]string{}
	for _, m := range regexp.MustCompile(`\bts\.state\s*===\s*"([^"]*)"\s*\?\s*"([^"]*)"`).FindAllStringSubmatch(js, -1) {
		shown[m[1]] = m[2]
	}
	for _, s := range track.States {
		if want := s.Display(); want != string(s) && shown[string(s)] != want {
			t.Errorf("page.js shows %s as %q, want %q (track.State.Display)", s, shown[string(s)], want)
		}
	}
	// The style gives every state its colour, and styles no other.
	for _, m := range regexp.MustCompile(`td\.([A-Z][A-Z_]*)\b`).FindAllStringSubmatch(css, -1) {
		named["td."+m[1]] = true
		if !isState(m[1]) {
			t.Errorf("page.css styles td.%s, which is no state; the states are %v", m[1], track.States)
		}
	}
	for _, s := range track.States {
		if !named["td."+string(s)] {
			t.Errorf("page.css has no style for td.%s", s)
		}
	}
	// The order of the type columns names types that exist.
	order := regexp.MustCompile(`const TYPE_ORDER = \[([^\]]*)\]`).FindStringSubmatch(js)
	if order == nil {
		t.Fatal("page.js has no TYPE_ORDER")
	}
	for _, m := range regexp.MustCompile(`"([^"]*)"`).FindAllStringSubmatch(order[1], -1) {
		if !slices.Contains(codec.ShortTypes(), m[1]) {
			t.Errorf("page.js's TYPE_ORDER names %q, which is no short type (codec.ShortTypes: %v)", m[1], codec.ShortTypes())
		}
	}
	if !named[string(track.StateNACKed)] || !named[string(track.StateStale)] {
		t.Errorf("page.js orders nothing by %s and %s: the regular expressions of this test no longer read it", track.StateNACKed, track.StateStale)
	}
}

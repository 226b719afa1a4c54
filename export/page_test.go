package export_test

import (
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/adstap/adstap/export"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
)

// TestPageServesItsOwnFilesOnly: the page and what it loads come from the
// binary, with their types and a policy that allows nothing else.
func TestPageServesItsOwnFilesOnly(t *testing.T) {
	leakcheck.Check(t)
	mux := http.NewServeMux()
	for pattern, h := range export.Page() {
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

// Package page is what people read of a running tap in a browser or through adstap status: the live page at /, /debug/streams and /debug/pushes.
package page

import (
	"embed"
	"net/http"
)

//go:embed index.html page.js page.css icon.svg
var files embed.FS

// Handlers serve the live page: GET / and its script and style under /ui/.
// It needs nothing from outside the binary (air-gapped clusters,
// port-forwards) and reads only /debug/streams and /debug/pushes, so it
// shows nothing those do not, and nothing the redaction hides. Its
// Content-Security-Policy allows no inline script and no other origin, a
// second line behind the page's rule of putting wire strings in as text.
func Handlers() map[string]http.Handler {
	served := http.FileServerFS(files)
	secure := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
			w.Header().Set("X-Content-Type-Options", "nosniff")
			w.Header().Set("Referrer-Policy", "no-referrer")
			w.Header().Set("Cache-Control", "no-cache")
			h.ServeHTTP(w, r)
		})
	}
	return map[string]http.Handler{
		"GET /{$}":         secure(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.ServeFileFS(w, r, files, "index.html") })),
		"GET /ui/page.js":  secure(http.StripPrefix("/ui", served)),
		"GET /ui/page.css": secure(http.StripPrefix("/ui", served)),
		"GET /ui/icon.svg": secure(http.StripPrefix("/ui", served)),
		// Browsers ask for it whatever the page says.
		"GET /favicon.ico": http.RedirectHandler("/ui/icon.svg", http.StatusMovedPermanently),
	}
}

package recorder

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"

	"github.com/adstap/adstap/capture"
)

// File is one file of GET /debug/capture's list.
type File struct {
	Name  string `json:"name"`
	Bytes int64  `json:"bytes"`
	URL   string `json:"url"`
}

// Files serves the capture for download, for a tap in a container
// with no shell to copy files out of: GET /debug/capture lists the files,
// oldest first (the order adstap inspect reads them in), and
// GET /debug/capture/{file} sends one as it is on disk, redacted as it was
// written. Only the capture's own files are served.
func Files(w *capture.Writer) (list, file http.Handler) {
	list = http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {
		files := []File{}
		for _, path := range w.Files() {
			fi, err := os.Stat(path)
			if err != nil {
				continue // rotated away since it was listed
			}
			name := filepath.Base(path)
			files = append(files, File{Name: name, Bytes: fi.Size(), URL: "/debug/capture/" + name})
		}
		rw.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(rw)
		enc.SetIndent("", "  ")
		enc.Encode(struct {
			Files []File `json:"files"`
		}{files})
	})
	file = http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		want := r.PathValue("file")
		for _, path := range w.Files() {
			if filepath.Base(path) != want {
				continue
			}
			f, err := os.Open(path)
			if err != nil {
				http.Error(rw, "rotated away while asked for: list /debug/capture again", http.StatusNotFound)
				return
			}
			defer f.Close()
			fi, err := f.Stat()
			if err != nil {
				http.Error(rw, err.Error(), http.StatusInternalServerError)
				return
			}
			rw.Header().Set("Content-Type", "application/jsonl")
			rw.Header().Set("Content-Disposition", `attachment; filename="`+want+`"`)
			// Up to the size when opened: the tap keeps appending, and a
			// record cut short at the end is one adstap inspect skips.
			io.CopyN(rw, f, fi.Size())
			return
		}
		http.Error(rw, "no capture file "+want+": GET /debug/capture lists them", http.StatusNotFound)
	})
	return list, file
}

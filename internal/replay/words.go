package replay

import (
	"fmt"
	"strings"

	"github.com/adstap/adstap/export"
	"github.com/adstap/adstap/internal/inspect"
)

// The words of the replay's lines, as adstap inspect says them.

var (
	plural    = export.Plural
	typeLabel = export.TypeLabel
	listSome  = export.ListSome
)

// inputErrorf is a problem with what the replay was given or asked: the
// command exits 2 for it, as for adstap inspect's.
func inputErrorf(format string, a ...any) error {
	return &inspect.InputError{Err: fmt.Errorf(format, a...)}
}

// fileNames lists the files s was read from.
func fileNames(s *inspect.Sent) string {
	var names []string
	for _, f := range s.Files {
		names = append(names, f.Name)
	}
	return strings.Join(names, ", ")
}

// redactedNames lists the resources of s whose secrets the capture
// replaced, as "type name".
func redactedNames(s *inspect.Sent) []string {
	var out []string
	for _, t := range s.Types {
		for _, r := range t.Resources {
			if r.Redacted {
				out = append(out, typeLabel(t.TypeURL)+" "+r.Name)
			}
		}
	}
	return out
}

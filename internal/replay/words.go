package replay

import (
	"fmt"
	"strings"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/internal/inspect"
)

// The words of the replay's lines, as adstap inspect says them.

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// typeLabel is the short name operators use (CDS, EDS...), or the message
// name for types without one.
func typeLabel(typeURL string) string {
	if s := codec.ShortType(typeURL); s != codec.ShortTypeOther {
		return strings.ToUpper(s)
	}
	return codec.TypeName(typeURL)
}

// listSome names up to 20 items, and how many more there are.
func listSome(items []string) string {
	const most = 20
	if len(items) <= most {
		return strings.Join(items, ", ")
	}
	return strings.Join(items[:most], ", ") + fmt.Sprintf(" and %d more", len(items)-most)
}

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

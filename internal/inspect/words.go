package inspect

import (
	"cmp"
	"fmt"
	"strings"
	"time"

	"github.com/adstap/adstap/codec"
)

func indent(s, prefix string) string {
	return strings.ReplaceAll(s, "\n", "\n"+prefix)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// typeLabel is the short name operators use (CDS, EDS...), or the message
// name for types without one.
func typeLabel(typeURL string) string {
	if s := codec.ShortType(typeURL); s != codec.ShortTypeOther {
		return strings.ToUpper(s)
	}
	return codec.TypeName(typeURL)
}

// stamp formats a recorded time with its date.
func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Format("2006-01-02 15:04:05.000")
}

// clockTime formats a recorded time of day.
func clockTime(t time.Time) string { return t.Format("15:04:05.000") }

func cmpTime(a, b time.Time) int { return cmp.Compare(a.UnixNano(), b.UnixNano()) }

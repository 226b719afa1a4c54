package inspect

import (
	"cmp"
	"strings"
	"time"

	"github.com/adstap/adstap/export"
)

func indent(s, prefix string) string {
	return strings.ReplaceAll(s, "\n", "\n"+prefix)
}

// The words adstap replay shares too, from export.
var (
	plural    = export.Plural
	typeLabel = export.TypeLabel
	listSome  = export.ListSome
)

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
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

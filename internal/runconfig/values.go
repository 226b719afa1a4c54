package runconfig

import (
	"errors"
	"flag"
	"strconv"
	"strings"
	"time"
)

// Duration is a duration flag that must be positive.
func Duration(p *time.Duration) flag.Value { return durationValue{p} }

type durationValue struct{ p *time.Duration }

func (d durationValue) String() string {
	if d.p == nil {
		return ""
	}
	return d.p.String()
}

func (d durationValue) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil || v <= 0 {
		return errors.New("want a positive duration such as 30s or 2m")
	}
	*d.p = v
	return nil
}

// Count is a count flag: a whole number, 1 or more. Every count adstap
// takes is a size or a threshold, for which 0 means nothing sensible.
func Count(p *int) flag.Value { return countValue{p} }

type countValue struct{ p *int }

func (v countValue) String() string {
	if v.p == nil {
		return ""
	}
	return strconv.Itoa(*v.p)
}

func (v countValue) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return errNotCount
	}
	*v.p = n
	return nil
}

var errNotCount = errors.New("want a whole number, 1 or more")

// CountOrZero is a Count that also takes 0, for a count whose 0 means
// something (a default the package that takes it picks).
func CountOrZero(p *int) flag.Value { return countOrZeroValue{countValue{p}} }

type countOrZeroValue struct{ countValue }

func (v countOrZeroValue) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return errors.New("want a whole number, 0 or more")
	}
	*v.p = n
	return nil
}

// ByteSize is a flag holding a size in bytes, written plainly or with a
// binary suffix: 512MiB, 64Ki, 1GiB. It must be positive; a size for which
// 0 means something (none) is a ByteSizeOrZero.
type ByteSize int64

// ByteSizeOrZero is a ByteSize that also takes 0.
type ByteSizeOrZero struct{ ByteSize }

var units = []struct {
	suffix string
	size   int64
}{{"GiB", 1 << 30}, {"Gi", 1 << 30}, {"MiB", 1 << 20}, {"Mi", 1 << 20}, {"KiB", 1 << 10}, {"Ki", 1 << 10}, {"B", 1}}

func (b *ByteSize) String() string {
	n := int64(*b)
	for _, u := range units {
		if len(u.suffix) == 3 && n >= u.size && n%u.size == 0 {
			return strconv.FormatInt(n/u.size, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}

func (b *ByteSize) Set(s string) error {
	n, err := parseSize(s)
	if err != nil || n <= 0 {
		return errors.New("want a positive size such as 536870912 or 512MiB")
	}
	*b = ByteSize(n)
	return nil
}

func (b *ByteSizeOrZero) Set(s string) error {
	n, err := parseSize(s)
	if err != nil || n < 0 {
		return errors.New("want a size such as 536870912 or 512MiB, or 0")
	}
	b.ByteSize = ByteSize(n)
	return nil
}

func parseSize(s string) (int64, error) {
	num, mult := s, int64(1)
	for _, u := range units {
		if cut, ok := strings.CutSuffix(s, u.suffix); ok {
			num, mult = cut, u.size
			break
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(num), 10, 64)
	if err != nil {
		return 0, err
	}
	if n > 0 && n > (1<<63-1)/mult {
		return 0, errors.New("too large")
	}
	return n * mult, nil
}

package config

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// ParseDuration parses a Go duration ("90s", "5m", "1h30m") or a whole
// number of days ("30d"). Negative durations are rejected.
func ParseDuration(s string) (Duration, error) {
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "-") {
		return 0, fmt.Errorf("duration %q must not be negative", s)
	}
	if days, ok := strings.CutSuffix(s, "d"); ok && days != "" && strings.Trim(days, "0123456789") == "" {
		n, err := strconv.ParseInt(days, 10, 64)
		if err != nil || n > math.MaxInt64/int64(24*time.Hour) {
			return 0, fmt.Errorf("duration %q is too long", s)
		}
		return Duration(time.Duration(n) * 24 * time.Hour), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration (use a number with a unit: 30s, 5m, 2h or 30d)", s)
	}
	if d < 0 {
		return 0, fmt.Errorf("duration %q must not be negative", s)
	}
	return Duration(d), nil
}

// UnmarshalYAML reads a duration scalar.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return &yaml.TypeError{Errors: []string{"must be a duration such as 30s, 5m or 30d"}}
	}
	v, err := ParseDuration(n.Value)
	if err != nil {
		return &yaml.TypeError{Errors: []string{err.Error()}}
	}
	*d = v
	return nil
}

// Std returns d as a time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

// String prints whole days as "30d" and anything else as time.Duration does.
func (d Duration) String() string {
	const day = Duration(24 * time.Hour)
	if d > 0 && d%day == 0 {
		return strconv.FormatInt(int64(d/day), 10) + "d"
	}
	return time.Duration(d).String()
}

var byteUnits = []struct {
	suffix string
	size   int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30},
	{"KB", 1000}, {"MB", 1000 * 1000}, {"GB", 1000 * 1000 * 1000},
	{"B", 1},
}

// ParseByteSize parses a whole number of bytes, optionally followed by a
// unit: B, KiB, MiB, GiB (powers of 1024) or KB, MB, GB (powers of 1000).
func ParseByteSize(s string) (ByteSize, error) {
	s = strings.TrimSpace(s)
	num, mult := s, int64(1)
	for _, u := range byteUnits {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			num, mult = strings.TrimSpace(n), u.size
			break
		}
	}
	if strings.HasPrefix(num, "-") {
		return 0, fmt.Errorf("size %q must not be negative", s)
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || num == "" || strings.Trim(num, "0123456789") != "" {
		return 0, fmt.Errorf("%q is not a size (use a whole number of bytes, or KiB, MiB, KB, MB)", s)
	}
	if n > math.MaxInt64/mult {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return ByteSize(n * mult), nil
}

// UnmarshalYAML reads a size scalar.
func (b *ByteSize) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return &yaml.TypeError{Errors: []string{"must be a size such as 1048576 or 1MiB"}}
	}
	v, err := ParseByteSize(n.Value)
	if err != nil {
		return &yaml.TypeError{Errors: []string{err.Error()}}
	}
	*b = v
	return nil
}

// String prints the size in the largest binary unit that divides it.
func (b ByteSize) String() string {
	switch {
	case b > 0 && b%(1<<30) == 0:
		return strconv.FormatInt(int64(b>>30), 10) + "GiB"
	case b > 0 && b%(1<<20) == 0:
		return strconv.FormatInt(int64(b>>20), 10) + "MiB"
	case b > 0 && b%(1<<10) == 0:
		return strconv.FormatInt(int64(b>>10), 10) + "KiB"
	}
	return strconv.FormatInt(int64(b), 10) + "B"
}

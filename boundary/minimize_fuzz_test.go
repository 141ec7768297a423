package boundary

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stetlabs/stet"
)

// fuzzMinimizer builds a minimizer for the classes whose bit is set in mask
// (bit i is stet.IdentifierClasses[i]) plus must, with the test dictionary.
func fuzzMinimizer(t *testing.T, mask uint16, must ...stet.IdentifierClass) *Minimizer {
	t.Helper()
	classes := append([]stet.IdentifierClass(nil), must...)
	for i, c := range stet.IdentifierClasses {
		if mask&(1<<i) != 0 {
			classes = append(classes, c)
		}
	}
	m, err := NewMinimizer(classes, testNames)
	if err != nil {
		t.Fatalf("NewMinimizer(%v) = %v", classes, err)
	}
	return m
}

// FuzzMinimize: Minimize never panics, keeps valid UTF-8 valid, counts what
// it replaced, and minimizing its output again changes nothing.
func FuzzMinimize(f *testing.F) {
	for _, cases := range classCases {
		for _, c := range cases {
			f.Add(c.in, uint16(0x1ff))
		}
	}
	f.Add("Maria Lopez, MRN: 00123456, seen 2024-03-05 at 10.0.0.1, call +1 (555) 123-4567 or jane@x.org", uint16(0x1ff))
	f.Add("SSN 123-45-6789 / acct# 000123 / https://portal.example.org/p?id=7", uint16(0x0f))
	f.Add("[EMAIL]@x.org [PHONE] 555-123-4567 [DATE]", uint16(0x1ff))
	f.Fuzz(func(t *testing.T, text string, mask uint16) {
		m := fuzzMinimizer(t, mask)
		once, counts := m.Minimize(stet.NewText(text))
		out := once.Reveal()
		if utf8.ValidString(text) && !utf8.ValidString(out) {
			t.Fatalf("Minimize(%q) = %q: not valid UTF-8", text, out)
		}
		n := 0
		for c, k := range counts {
			if k <= 0 {
				t.Fatalf("Minimize(%q) counts[%s] = %d, want > 0", text, c, k)
			}
			n += k
		}
		if (n == 0) != (out == text) {
			t.Fatalf("Minimize(%q) = %q with counts %v", text, out, counts)
		}
		twice, again := m.Minimize(once)
		if twice.Reveal() != out || len(again) != 0 {
			t.Fatalf("Minimize(Minimize(%q)) = %q %v, want %q and no counts", text, twice.Reveal(), again, out)
		}
	})
}

// FuzzMinimizeSurvivors places one real-shaped identifier, built from the
// fuzzer's numbers, between arbitrary text, and checks it does not survive
// in the output of a minimizer configured for its class: neither whole nor
// its longest run of digits.
func FuzzMinimizeSurvivors(f *testing.F) {
	for k := range uint8(len(shapes)) {
		for _, n := range []uint64{0, 1, 42, 1234567890123, 0xdeadbeefcafef00d, ^uint64(0)} {
			f.Add("seen on", k, n, "jane.doe", "today", uint16(0))
			f.Add("note:", k, n, "ann_b+x", ".", uint16(0x1ff))
		}
	}
	f.Add("MRN:", uint8(0), uint64(5551234567), "x", "", uint16(0x1ff))
	f.Fuzz(func(t *testing.T, before string, kind uint8, n uint64, word, after string, mask uint16) {
		sh := shapes[int(kind)%len(shapes)]
		ident, core := sh.make(n, word)
		if ident == "" || strings.Contains(before, core) || strings.Contains(after, core) {
			return
		}
		text := before + " " + ident + " " + after
		m := fuzzMinimizer(t, mask, sh.class)
		out, _ := m.Minimize(stet.NewText(text))
		if s := out.Reveal(); strings.Contains(s, ident) || strings.Contains(s, core) {
			t.Fatalf("%s %q survives: Minimize(%q) = %q", sh.class, core, text, s)
		}
	})
}

// shape makes one identifier of class from a number and a word. core is
// the part that must not survive: the identifier itself, or its longest run
// of digits for numbers whose separators may be claimed apart.
type shape struct {
	class stet.IdentifierClass
	make  func(n uint64, word string) (ident, core string)
}

func whole(s string) (string, string) { return s, s }

// digitsCore returns s and its longest run of at least four digits (s when
// it has none).
func digitsCore(s string) (string, string) {
	best, run := "", 0
	for i := 0; i <= len(s); i++ {
		if i < len(s) && isDigit(rune(s[i])) {
			run++
			continue
		}
		if run > len(best) {
			best = s[i-run : i]
		}
		run = 0
	}
	if len(best) < 4 {
		return s, s
	}
	return s, best
}

// digits returns the k lowest decimal digits of n.
func digits(n uint64, k int) string {
	b := make([]byte, k)
	for i := range b {
		b[k-1-i] = byte('0' + n%10)
		n /= 10
	}
	return string(b)
}

// localPart keeps the letters, digits and ._+- of word, starting and ending
// on a letter or digit; "x" if nothing is left.
func localPart(word string) string {
	var b strings.Builder
	for _, r := range word {
		if r < 0x80 && (isDigit(r) || 'a' <= r|0x20 && r|0x20 <= 'z' || strings.ContainsRune("._+-", r)) {
			b.WriteRune(r)
		}
	}
	s := strings.Trim(b.String(), "._+-")
	if len(s) > 32 {
		s = strings.Trim(s[:32], "._+-")
	}
	if s == "" {
		return "x"
	}
	return s
}

var tlds = []string{"org", "com", "co.uk", "io", "health", "de"}

var months = []string{"January", "Feb", "March", "Apr", "May", "June", "Jul", "August", "Sept", "October", "Nov", "December"}

var shapes = []shape{
	{stet.IdentEmail, func(n uint64, w string) (string, string) {
		return whole(localPart(w) + "@mail" + digits(n, 2) + ".example." + tlds[n%uint64(len(tlds))])
	}},
	{stet.IdentPhone, func(n uint64, _ string) (string, string) {
		a, x, l := "2"+digits(n, 2), "3"+digits(n/100, 2), digits(n/10000, 4)
		f := []string{"(%s) %s-%s", "%s-%s-%s", "%s.%s.%s", "+1 %s %s %s", "1-%s-%s-%s", "+1 (%s) %s-%s", "(%s)%s-%s", "+1-%s-%s-%s"}
		return digitsCore(fmt.Sprintf(f[(n/100000000)%uint64(len(f))], a, x, l))
	}},
	{stet.IdentPhone, func(n uint64, _ string) (string, string) {
		f := []string{"+44 20 %s %s", "+33 1 %s %s", "+49 30 %s%s", "+91 9%s %s", "+81 3-%s-%s", "+61 2 %s %s", "+44%s%s", "020 %s %s"}
		return digitsCore(fmt.Sprintf(f[n%uint64(len(f))], digits(n/8, 4), digits(n/80000, 4)))
	}},
	{stet.IdentSSN, func(n uint64, _ string) (string, string) {
		return whole(digits(n, 3) + "-" + digits(n/1000, 2) + "-" + digits(n/100000, 4))
	}},
	{stet.IdentMRN, func(n uint64, _ string) (string, string) {
		labels := []string{"MRN: ", "MRN ", "mr# ", "Medical record number ", "MR #: ", "medical record #"}
		v := digits(n/8, 8)
		if n%3 == 0 {
			v = "A" + v[1:]
		}
		return labels[n%uint64(len(labels))] + v, v
	}},
	{stet.IdentAccount, func(n uint64, _ string) (string, string) {
		labels := []string{"account ", "Account number: ", "acct# ", "Acct. no. ", "member ID: ", "Policy #: ", "subscriber id "}
		v := digits(n/8, 9)
		return labels[n%uint64(len(labels))] + v, v
	}},
	{stet.IdentURL, func(n uint64, w string) (string, string) {
		f := []string{"https://portal%s.example.org/%s", "http://example.com/%s?id=%s", "www.clinic%s.example.com/%s"}
		return whole(fmt.Sprintf(f[n%3], digits(n/3, 2), localPart(w)))
	}},
	{stet.IdentIP, func(n uint64, _ string) (string, string) {
		return whole(fmt.Sprintf("%d.%d.%d.%d", byte(n>>24), byte(n>>16), byte(n>>8), byte(n)))
	}},
	{stet.IdentIP, func(n uint64, _ string) (string, string) {
		var b [16]byte
		for i := range 8 {
			b[i] = 0x20 + byte(i)
			b[8+i] = byte(n >> (8 * i))
		}
		switch n % 4 {
		case 0:
			b = [16]byte{0xfe, 0x80, 14: byte(n >> 8), 15: byte(n) | 1}
		case 1:
			b[0], b[1], b[2], b[3] = 0x20, 0x01, 0x0d, 0xb8
		}
		return whole(netip.AddrFrom16(b).String())
	}},
	{stet.IdentDate, func(n uint64, _ string) (string, string) {
		y, mo, d := 1900+int(n%200), 1+int(n/200%12), 1+int(n/2400%28)
		f := []string{
			fmt.Sprintf("%04d-%02d-%02d", y, mo, d),
			fmt.Sprintf("%02d/%02d/%04d", mo, d, y),
			fmt.Sprintf("%d.%d.%04d", d, mo, y),
			fmt.Sprintf("%02d-%02d-%04d", d, mo, y),
			fmt.Sprintf("%d/%d/%02d", mo, d, y%100),
			fmt.Sprintf("%s %d, %04d", months[mo-1], d, y),
			fmt.Sprintf("%d %s %04d", d, months[mo-1], y),
			fmt.Sprintf("%s %d", months[mo-1], d),
			fmt.Sprintf("%04d-%02d-%02dT%02d:%02d:00Z", y, mo, d, n%24, n%60),
			fmt.Sprintf("%02d/%04d", mo, y),
		}
		return whole(f[n/67200%uint64(len(f))])
	}},
	{stet.IdentName, func(n uint64, _ string) (string, string) {
		name := testNames[n%uint64(len(testNames))]
		switch n / 8 % 3 {
		case 1:
			name = strings.ToUpper(name)
		case 2:
			name = strings.ToLower(name)
		}
		return whole(name)
	}},
}

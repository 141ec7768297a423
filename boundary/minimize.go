package boundary

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/stetlabs/stet"
)

// precedence is the order in which identifier classes claim text. A span of
// text is replaced at most once, by the first class that claims it, so:
//
//   - URLs come first: an address or an email inside a URL is part of the URL
//     ("https://10.0.0.1/?to=a@b.org" is one [URL]).
//   - Emails come before IPs, phones and dates that may hide in their parts
//     ("jo.1990@x.org" is one [EMAIL]).
//   - IPs come before dates and phones, whose patterns must not take a part
//     of an address.
//   - SSNs come before phones and labelled numbers: 123-45-6789 is an SSN
//     wherever it stands.
//   - MRNs and account numbers come before phones and dates: after their
//     label the value is the identifier, whatever its shape.
//   - Phones come before dates; names come last, so a dictionary word never
//     splits an identifier found by shape.
//
// Within a class, the stronger pattern claims first (international phones
// before US ones; dates with a year before dates without).
var precedence = []stet.IdentifierClass{
	stet.IdentURL,
	stet.IdentEmail,
	stet.IdentIP,
	stet.IdentSSN,
	stet.IdentMRN,
	stet.IdentAccount,
	stet.IdentPhone,
	stet.IdentDate,
	stet.IdentName,
}

var placeholders = map[stet.IdentifierClass]string{
	stet.IdentEmail:   "[EMAIL]",
	stet.IdentPhone:   "[PHONE]",
	stet.IdentSSN:     "[SSN]",
	stet.IdentMRN:     "[MRN]",
	stet.IdentAccount: "[ACCOUNT]",
	stet.IdentURL:     "[URL]",
	stet.IdentIP:      "[IP]",
	stet.IdentDate:    "[DATE]",
	stet.IdentName:    "[NAME]",
}

// Placeholder returns the typed placeholder that replaces identifiers of
// class c ("[EMAIL]"), or "" for an unknown class.
func Placeholder(c stet.IdentifierClass) string { return placeholders[c] }

// rePlaceholder finds placeholders already in the text. They are never
// matched again, whatever the classes or the dictionary, which is what makes
// minimizing twice the same as minimizing once.
var rePlaceholder = regexp.MustCompile(`\[(?:EMAIL|PHONE|SSN|MRN|ACCOUNT|URL|IP|DATE|NAME)\]`)

// maxPasses bounds the passes of Minimize. Each pass that replaces anything
// consumes at least one byte not already inside a placeholder, so the loop
// ends on its own; the bound only guards against a bug turning into a hang.
const maxPasses = 32

// Minimizer replaces identifiers of a fixed set of classes with typed
// placeholders. Build one per policy with NewMinimizer; it is safe for
// concurrent use.
type Minimizer struct {
	detectors []detector
}

type span struct{ start, end int }

type detector struct {
	class stet.IdentifierClass
	finder
}

// finder finds candidate spans in s. When keys is not empty, the text is
// searched only if it holds one of them (lowercase ASCII), which spares the
// slower patterns on most documents.
type finder struct {
	keys []string
	find func(s string) []span
}

// NewMinimizer compiles a minimizer for classes. names is the dictionary for
// stet.IdentName (matched case-insensitively, on word boundaries); it is
// required when that class is selected and ignored otherwise. It returns an
// error for an unknown class. Error messages never contain a name.
func NewMinimizer(classes []stet.IdentifierClass, names []string) (*Minimizer, error) {
	selected := make(map[stet.IdentifierClass]bool, len(classes))
	for _, c := range classes {
		if !slices.Contains(stet.IdentifierClasses, c) {
			return nil, fmt.Errorf("minimize: unknown identifier class %q", string(c))
		}
		selected[c] = true
	}
	m := &Minimizer{}
	for _, c := range precedence {
		if !selected[c] {
			continue
		}
		if c == stet.IdentName {
			find, err := nameFinder(names)
			if err != nil {
				return nil, err
			}
			m.detectors = append(m.detectors, detector{class: c, finder: finder{find: find}})
			continue
		}
		for _, f := range shapeFinders[c] {
			m.detectors = append(m.detectors, detector{class: c, finder: f})
		}
	}
	return m, nil
}

// Minimize replaces each identifier of the minimizer's classes with its typed
// placeholder ([EMAIL], [PHONE], [SSN], [MRN], [ACCOUNT], [URL], [IP], [DATE],
// [NAME]). For labelled identifiers (SSN, MRN, account and phone numbers after
// their label) only the value is replaced: "MRN: [MRN]". It returns the
// minimized text and the number of replacements per class; the map holds only
// classes with at least one replacement. The counts are safe to log; the text
// is not. Minimize is deterministic, and minimizing its output again changes
// nothing.
func (m *Minimizer) Minimize(text stet.Text) (stet.Text, map[stet.IdentifierClass]int) {
	counts := make(map[stet.IdentifierClass]int)
	if len(m.detectors) == 0 {
		return text, counts
	}
	s := text.Reveal()
	for range maxPasses {
		out, n := m.pass(s, counts)
		if n == 0 {
			break
		}
		s = out
	}
	return stet.NewText(s), counts
}

type claim struct {
	span
	class stet.IdentifierClass
}

// pass runs every detector once over s and replaces what they claim. Later
// detectors see the same s but cannot claim bytes an earlier one claimed.
func (m *Minimizer) pass(s string, counts map[stet.IdentifierClass]int) (string, int) {
	taken := make([]bool, len(s))
	mark := func(sp span) {
		for i := sp.start; i < sp.end; i++ {
			taken[i] = true
		}
	}
	for _, loc := range rePlaceholder.FindAllStringIndex(s, -1) {
		mark(span{loc[0], loc[1]})
	}
	lower := asciiLower(s)
	var claims []claim
	for _, d := range m.detectors {
		if len(d.keys) > 0 && !slices.ContainsFunc(d.keys, func(k string) bool { return strings.Contains(lower, k) }) {
			continue
		}
		for _, sp := range d.find(s) {
			if sp.start >= sp.end || slices.Contains(taken[sp.start:sp.end], true) {
				continue
			}
			mark(sp)
			claims = append(claims, claim{sp, d.class})
		}
	}
	if len(claims) == 0 {
		return s, 0
	}
	slices.SortFunc(claims, func(a, b claim) int { return cmp.Compare(a.start, b.start) })
	var b strings.Builder
	b.Grow(len(s))
	last := 0
	for _, c := range claims {
		b.WriteString(s[last:c.start])
		b.WriteString(placeholders[c.class])
		counts[c.class]++
		last = c.end
	}
	b.WriteString(s[last:])
	return b.String(), len(claims)
}

// shapeFinders are the finders of every class found by its shape or label,
// in claiming order within the class.
var shapeFinders = map[stet.IdentifierClass][]finder{
	stet.IdentURL:   {{[]string{"http", "www."}, findURLs}},
	stet.IdentEmail: {{[]string{"@"}, findEmails}},
	stet.IdentIP:    {{[]string{":"}, findIPv6}, {[]string{"."}, findIPv4}},
	stet.IdentSSN: {
		{[]string{"-"}, findSSNs},
		{[]string{"ssn", "social"}, labelled(reSSNLabel, 9)},
	},
	stet.IdentMRN:     {{[]string{"mr", "medical"}, labelled(reMRN, 4)}},
	stet.IdentAccount: {{[]string{"acc", "member", "policy", "subscriber"}, labelled(reAccount, 4)}},
	stet.IdentPhone: {
		{[]string{"+"}, findIntlPhones},
		{nil, findUSPhones},
		{nil, findDomesticPhones},
		{[]string{"ph", "tel", "cell", "mobile", "fax"}, labelled(rePhoneLabel, 7)},
	},
	stet.IdentDate: {
		{[]string{"-", "/", "."}, findNumericDates},
		{monthPrefixes, findNamedDates},
	},
}

// asciiLower lowers ASCII letters only, so byte offsets stay those of s.
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// --- boundaries ---

func isWord(r rune) bool {
	return r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r)
}

func isDigit(r rune) bool { return '0' <= r && r <= '9' }

// runeBefore returns the rune ending at byte i, or -1 at the start.
func runeBefore(s string, i int) rune {
	if i <= 0 {
		return -1
	}
	r, _ := utf8.DecodeLastRuneInString(s[:i])
	return r
}

// runeAfter returns the rune starting at byte j, or -1 at the end.
func runeAfter(s string, j int) rune {
	if j >= len(s) {
		return -1
	}
	r, _ := utf8.DecodeRuneInString(s[j:])
	return r
}

// standsAlone reports whether the number-like span [i, j) is a whole token:
// no word character touches it, and no '-', '.' or '/' joins it to another
// digit (so "1.2.3.4.5" holds no IP and "2024-03-05-1" no date).
func standsAlone(s string, i, j int) bool { return alone(s, i, j, "-./", "-./") }

// alone is standsAlone with the joining characters before and after given.
func alone(s string, i, j int, before, after string) bool {
	if r := runeBefore(s, i); isWord(r) || strings.ContainsRune(before, r) && isDigit(runeBefore(s, i-1)) {
		return false
	}
	if r := runeAfter(s, j); isWord(r) || strings.ContainsRune(after, r) && isDigit(runeAfter(s, j+1)) {
		return false
	}
	return true
}

func countDigits(s string) int {
	n := 0
	for i := range len(s) {
		if isDigit(rune(s[i])) {
			n++
		}
	}
	return n
}

// --- URLs ---

var reURL = regexp.MustCompile(`(?i)\b(?:https?://[^\s<>"'\x60]+|www\.[\pL\pN-]+(?:\.[\pL\pN-]+)+(?:[/?#:][^\s<>"'\x60]*)?)`)

func findURLs(s string) []span {
	var out []span
	for _, loc := range reURL.FindAllStringIndex(s, -1) {
		start, end := loc[0], trimURL(s, loc[0], loc[1])
		prev := runeBefore(s, start)
		if isWord(prev) {
			continue
		}
		// A bare www. inside an email or a longer host is not a URL start.
		if (s[start] == 'w' || s[start] == 'W') && strings.ContainsRune("@./-", prev) {
			continue
		}
		if strings.HasSuffix(strings.ToLower(s[start:end]), "://") {
			continue
		}
		out = append(out, span{start, end})
	}
	return out
}

// trimURL drops trailing sentence punctuation and closing brackets that have
// no opening partner inside the URL.
func trimURL(s string, start, end int) int {
	for end > start {
		u := s[start:end]
		c := u[len(u)-1]
		switch {
		case strings.IndexByte(".,;:!?'\"*", c) >= 0:
			end--
		case c == ')' && strings.Count(u, "(") < strings.Count(u, ")"),
			c == ']' && strings.Count(u, "[") < strings.Count(u, "]"),
			c == '}' && strings.Count(u, "{") < strings.Count(u, "}"):
			end--
		default:
			return end
		}
	}
	return end
}

// --- emails ---

var reEmail = regexp.MustCompile(`(?i)[\pL\pN_](?:[\pL\pN_.%+-]*[\pL\pN_])?@(?:[\pL\pN](?:[\pL\pN-]*[\pL\pN])?\.)+\pL{2,63}`)

func findEmails(s string) []span {
	var out []span
	for _, loc := range reEmail.FindAllStringIndex(s, -1) {
		if isWord(runeBefore(s, loc[0])) || isWord(runeAfter(s, loc[1])) {
			continue
		}
		out = append(out, span{loc[0], loc[1]})
	}
	return out
}

// --- IP addresses ---

var (
	reIPv4 = regexp.MustCompile(`\d{1,3}(?:\.\d{1,3}){3}`)
	// reIPv6 finds runs of hex digits, colons and dots holding a colon; the
	// run is then parsed for real.
	reIPv6 = regexp.MustCompile(`[0-9A-Fa-f.]*:[0-9A-Fa-f:.]*`)
)

func findIPv4(s string) []span {
	var out []span
	for _, loc := range reIPv4.FindAllStringIndex(s, -1) {
		// A slash may follow: "10.0.0.0/8" is an address and its prefix.
		if !alone(s, loc[0], loc[1], "-./", "-.") || !validIPv4(s[loc[0]:loc[1]]) {
			continue
		}
		out = append(out, span{loc[0], loc[1]})
	}
	return out
}

func validIPv4(a string) bool {
	for part := range strings.SplitSeq(a, ".") {
		n := 0
		for i := range len(part) {
			n = n*10 + int(part[i]-'0')
		}
		if n > 255 {
			return false
		}
	}
	return true
}

// findIPv6 accepts a run that parses as an IPv6 address and holds a decimal
// digit or at least four colons, so words such as "add::" or "dead::beef" in
// prose stay, while "::1", "fe80::1" and full addresses go.
func findIPv6(s string) []span {
	var out []span
	for _, loc := range reIPv6.FindAllStringIndex(s, -1) {
		start, end := loc[0], loc[1]
		for start < end && s[start] == '.' {
			start++
		}
		for end > start && s[end-1] == '.' {
			end--
		}
		a := s[start:end]
		if strings.Count(a, ":") < 2 || countDigits(a) == 0 && strings.Count(a, ":") < 4 {
			continue
		}
		if isWord(runeBefore(s, start)) || isWord(runeAfter(s, end)) {
			continue
		}
		if !validIPv6(a) {
			continue
		}
		out = append(out, span{start, end})
	}
	return out
}

// validIPv6 reports whether a is an IPv6 address (an IPv4-mapped tail
// included).
func validIPv6(a string) bool {
	addr, err := netip.ParseAddr(a)
	return err == nil && addr.Is6()
}

// --- SSNs, MRNs, account numbers (shape or label) ---

var reSSN = regexp.MustCompile(`\d{3}-\d{2}-\d{4}`)

func findSSNs(s string) []span {
	var out []span
	for _, loc := range reSSN.FindAllStringIndex(s, -1) {
		if standsAlone(s, loc[0], loc[1]) {
			out = append(out, span{loc[0], loc[1]})
		}
	}
	return out
}

// labelValue is what may follow a label: separators, an optional "is"/"was",
// and the value in group 1.
const labelValue = `(?:[ \t]*[:#=]){0,2}[ \t]*(?:(?:is|was)[ \t]+)?([\pL\pN][\pL\pN_-]*)`

var (
	reSSNLabel = regexp.MustCompile(`(?i)\b(?:ssn|social[ \t]+security(?:[ \t]+(?:number|num|no))?)\b\.?(?:[ \t]*[:#=]){0,2}[ \t]*(?:(?:is|was)[ \t]+)?(\d{3}[ -]?\d{2}[ -]?\d{4})`)
	reMRN      = regexp.MustCompile(`(?i)\b(?:mrn|mr[ \t]?#|medical[ \t]+record(?:[ \t]+(?:number|num|no)\b\.?)?)` + labelValue)
	reAccount  = regexp.MustCompile(`(?i)\b(?:(?:account|acct)\b\.?(?:[ \t]+(?:number|num|no|id)\b\.?)?|member[ \t]+(?:id|number|num|no)\b\.?|member[ \t]*#|policy[ \t]+(?:number|num|no|id)\b\.?|policy[ \t]*#|subscriber[ \t]+id\b)` + labelValue)
	// rePhoneLabel finds unformatted numbers after a phone label; formatted
	// ones are found by shape.
	rePhoneLabel = regexp.MustCompile(`(?i)\b(?:telephone|phone|tel|cell|mobile|fax|ph)\b\.?(?:[ \t]*(?:[:#=]|no\b\.?|number\b))*[ \t]*(\+?\d{7,15})`)
)

// labelled returns a finder for the value in group 1 of re: it must hold a
// digit and at least minLen characters. Values written in groups of four
// digits ("1234 5678 9012") are taken whole.
func labelled(re *regexp.Regexp, minLen int) func(string) []span {
	return func(s string) []span {
		var out []span
		for _, m := range re.FindAllStringSubmatchIndex(s, -1) {
			start, end := m[2], m[3]
			for end > start && (s[end-1] == '-' || s[end-1] == '_') {
				end--
			}
			v := s[start:end]
			if len(v) < minLen || countDigits(v) == 0 || !standsAlone(s, start, end) {
				continue
			}
			out = append(out, span{start, extendGroups(s, end)})
		}
		return out
	}
}

func extendGroups(s string, end int) int {
	for end+5 <= len(s) && s[end] == ' ' && countDigits(s[end+1:end+5]) == 4 && standsAlone(s, end+1, end+5) {
		end += 5
	}
	return end
}

// --- phone numbers ---

var (
	// rePhoneIntl: "+", a country code, then up to six groups, each a run
	// of digits or a bracketed trunk or area code.
	rePhoneIntl = regexp.MustCompile(`\+\d{1,3}(?:[ .-]?(?:\(\d{1,4}\)|\d{1,8})){1,6}`)
	// rePhoneUS: an optional leading 1, then 3-3-4 digits with separators
	// or a bracketed area code. Group 1 is the number without the 1.
	rePhoneUS = regexp.MustCompile(`(?:1[ .-]?)?((?:\(\d{3}\)[ ]?|\d{3}[ .-])\d{3}[ .-]\d{4})`)
	// rePhoneDomestic: a trunk 0 and an area code, then two groups.
	rePhoneDomestic = regexp.MustCompile(`(?:\(0\d{1,4}\)[ ]?|0\d{1,4}[ -])\d{3,4}[ -]?\d{3,4}`)
)

// findIntlPhones accepts 8 to 15 digits (E.164). A final one-digit group
// after a space is left out: it is almost always the next number in the
// sentence, not part of the phone.
func findIntlPhones(s string) []span {
	var out []span
	for _, loc := range rePhoneIntl.FindAllStringIndex(s, -1) {
		start, end := loc[0], loc[1]
		if end-start >= 2 && s[end-2] == ' ' && isDigit(rune(s[end-1])) {
			end -= 2
		}
		// NANP numbers (+1) have exactly ten digits after the country code:
		// a group beyond them is the next number in the sentence.
		if strings.HasPrefix(s[start:], "+1") && !isDigit(runeAfter(s, start+2)) {
			for countDigits(s[start:end]) > 11 {
				i := strings.LastIndexAny(s[start:end], " .-")
				if i <= 2 {
					break
				}
				end = start + i
			}
		}
		if isWord(runeBefore(s, start)) {
			continue
		}
		// Past E.164's 15 digits, or glued to a word ("10am"), the group
		// after the last space is the next token of the sentence, not part
		// of the phone: "+44 20 7946 0958 2024 visits".
		for {
			n := countDigits(s[start:end])
			if n >= 8 && n <= 15 && standsAlone(s, start+1, end) {
				out = append(out, span{start, end})
				break
			}
			i := strings.LastIndexByte(s[start:end], ' ')
			if n < 8 || i <= 1 {
				break
			}
			end = start + i
		}
	}
	return out
}

// findDomesticPhones finds national numbers written with a trunk 0 (UK
// style): "020 7946 0958", "(0161) 496 0000", "0800 123 4567". They need 10
// or 11 digits and separators, so bare digit runs stay.
func findDomesticPhones(s string) []span {
	var out []span
	for _, loc := range rePhoneDomestic.FindAllStringIndex(s, -1) {
		if n := countDigits(s[loc[0]:loc[1]]); n < 10 || n > 11 || !standsAlone(s, loc[0], loc[1]) {
			continue
		}
		out = append(out, span{loc[0], loc[1]})
	}
	return out
}

func findUSPhones(s string) []span {
	var out []span
	for _, m := range rePhoneUS.FindAllStringSubmatchIndex(s, -1) {
		switch {
		case standsAlone(s, m[0], m[1]) && runeBefore(s, m[0]) != '+':
			out = append(out, span{m[0], m[1]})
		case m[2] != m[0] && standsAlone(s, m[2], m[3]):
			out = append(out, span{m[2], m[3]})
		}
	}
	return out
}

// --- dates ---

const (
	monthsAny   = `jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?`
	monthsTitle = `Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?|Sep(?:t(?:ember)?)?|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?`
	ordinal     = `(?:st|nd|rd|th)?`
)

var (
	// reISODate: year first, with an optional ISO 8601 time.
	reISODate = regexp.MustCompile(`(\d{4})([-/.])(\d{1,2})([-/.])(\d{1,2})(?:T\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?`)
	// reNumericDate: 03/05/2024, 5.3.2024, 03-05-2024, 3/5/24 (two-digit
	// years only with slashes: "1.2.10" is a version, not a date).
	reNumericDate = regexp.MustCompile(`(\d{1,2})([-/.])(\d{1,2})([-/.])(\d{4}|\d{2})`)
	// reMonthYear: 03/2024, 3/1998 (a month, a slash, a year 1900..2099).
	reMonthYear = regexp.MustCompile(`(?:0?[1-9]|1[0-2])/(?:19|20)\d{2}`)
	// Dates with a month name. With a year, any case; without one, the month
	// must be capitalized, so "may 5" in a sentence stays.
	reNamedDates = []*regexp.Regexp{
		regexp.MustCompile(`(?i)\b(\d{1,2})` + ordinal + `[ \t]+(?:of[ \t]+)?(?:` + monthsAny + `)\b\.?,?[ \t]+\d{4}\b`),
		regexp.MustCompile(`(?i)\b(?:` + monthsAny + `)\b\.?[ \t]+(\d{1,2})` + ordinal + `\b,?[ \t]+\d{4}\b`),
		regexp.MustCompile(`\b(?:` + monthsTitle + `)\b\.?[ \t]+(\d{1,2})` + ordinal + `\b`),
		regexp.MustCompile(`\b(\d{1,2})` + ordinal + `[ \t]+(?:of[ \t]+)?(?:` + monthsTitle + `)\b`),
		regexp.MustCompile(`\b(?:` + monthsTitle + `)\b\.?,?[ \t]+()\d{4}\b`),
	}
)

func atoi(s string) int {
	n := 0
	for i := range len(s) {
		n = n*10 + int(s[i]-'0')
	}
	return n
}

func findNumericDates(s string) []span {
	var out []span
	for _, m := range reISODate.FindAllStringSubmatchIndex(s, -1) {
		month, day := atoi(s[m[6]:m[7]]), atoi(s[m[10]:m[11]])
		if s[m[4]:m[5]] != s[m[8]:m[9]] || month < 1 || month > 12 || day < 1 || day > 31 {
			continue
		}
		if standsAlone(s, m[0], m[1]) {
			out = append(out, span{m[0], m[1]})
		}
	}
	for _, m := range reNumericDate.FindAllStringSubmatchIndex(s, -1) {
		a, b := atoi(s[m[2]:m[3]]), atoi(s[m[6]:m[7]])
		sep := s[m[4]:m[5]]
		if sep != s[m[8]:m[9]] || m[11]-m[10] == 2 && sep != "/" {
			continue
		}
		// Month first or day first: both parts are 1..31, one is 1..12.
		if a < 1 || b < 1 || a > 31 || b > 31 || a > 12 && b > 12 {
			continue
		}
		if standsAlone(s, m[0], m[1]) {
			out = append(out, span{m[0], m[1]})
		}
	}
	for _, loc := range reMonthYear.FindAllStringIndex(s, -1) {
		if standsAlone(s, loc[0], loc[1]) {
			out = append(out, span{loc[0], loc[1]})
		}
	}
	return out
}

var monthPrefixes = []string{"jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"}

// findNamedDates runs the month-name patterns only on a window around each
// word that starts like a month: over a whole document they are the slowest
// patterns here, and a date is never far from its month.
func findNamedDates(s string) []span {
	lower := asciiLower(s)
	var anchors []int
	for _, k := range monthPrefixes {
		for i := 0; ; {
			j := strings.Index(lower[i:], k)
			if j < 0 {
				break
			}
			if p := i + j; !isWord(runeBefore(s, p)) {
				anchors = append(anchors, p)
			}
			i += j + len(k)
		}
	}
	if len(anchors) == 0 {
		return nil
	}
	slices.Sort(anchors)
	var out []span
	seen := map[span]bool{}
	for _, re := range reNamedDates {
		for _, p := range anchors {
			lo, hi := max(0, p-namedDateBefore), min(len(s), p+namedDateAfter)
			for _, m := range re.FindAllStringSubmatchIndex(s[lo:hi], -1) {
				if m[3] > m[2] {
					if d := atoi(s[lo+m[2] : lo+m[3]]); d < 1 || d > 31 {
						continue
					}
				}
				sp := span{lo + m[0], lo + m[1]}
				if seen[sp] || !standsAlone(s, sp.start, sp.end) {
					continue
				}
				seen[sp] = true
				out = append(out, sp)
			}
		}
	}
	return out
}

// The window around a month name: room for "31st of " before it and for
// "September 30th, 2024" after it, with some spacing to spare.
const (
	namedDateBefore = 24
	namedDateAfter  = 40
)

// --- names ---

// nameFinder compiles the dictionary into one alternation, longest name
// first, followed by a non-word character or the end. The regexp's
// leftmost-first semantics then pick the longest name that ends on a word
// boundary; the boundary before the name is checked by hand so that adjacent
// names ("Ann Lee") are both found.
func nameFinder(names []string) (func(string) []span, error) {
	var alts []string
	seen := map[string]bool{}
	for _, n := range names {
		words := strings.Fields(n)
		if len(words) == 0 {
			continue
		}
		for i, w := range words {
			words[i] = regexp.QuoteMeta(w)
		}
		alt := strings.Join(words, `\s+`)
		if key := strings.ToLower(alt); !seen[key] {
			seen[key] = true
			alts = append(alts, alt)
		}
	}
	if len(alts) == 0 {
		return nil, errors.New("minimize: class name is selected but the names dictionary is empty")
	}
	slices.SortStableFunc(alts, func(a, b string) int { return cmp.Compare(len(b), len(a)) })
	re, err := regexp.Compile(`(?i)(` + strings.Join(alts, "|") + `)(?:[^\pL\pN\pM_]|$)`)
	if err != nil {
		// QuoteMeta makes this unreachable; the cause could quote a name.
		return nil, errors.New("minimize: names dictionary does not compile")
	}
	return func(s string) []span {
		var out []span
		for pos := 0; pos < len(s); {
			m := re.FindStringSubmatchIndex(s[pos:])
			if m == nil {
				break
			}
			start, end := pos+m[2], pos+m[3]
			if isWord(runeBefore(s, start)) || start == end {
				_, size := utf8.DecodeRuneInString(s[start:])
				pos = start + max(size, 1)
				continue
			}
			out = append(out, span{start, end})
			pos = end
		}
		return out
	}, nil
}

package rules

import (
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"regexp/syntax"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/stetlabs/stet/processor"
)

// ruleSet is a compiled rules file.
type ruleSet struct {
	profile        string
	fields         []field // output properties in the order they are written
	labelsField    string
	rationaleField string
	// baseLabels are the labels field's default, before matched labels.
	baseLabels []string
	// noMatchRationale is the rationale when no rule matched.
	noMatchRationale string
	negation         *negation
	rules            []*rule // by priority, highest first; file order on ties
}

// field is one output property and its default, as JSON. The labels and
// rationale fields may have no default (nil value): they are always filled.
type field struct {
	name  string
	value json.RawMessage
}

type rule struct {
	id         string
	line       int
	priority   int
	patterns   []*pattern // any, then regex
	unless     []*pattern // unless, then unless_regex
	negatable  bool
	minMatches int
	set        map[string]json.RawMessage
	setKeys    []string
	label      string
}

// pattern is one compiled phrase or regex, matched against folded text (see
// fold). Phrases check word boundaries themselves, with Unicode letters and
// digits as word characters, because RE2's \b knows only ASCII.
type pattern struct {
	re        *regexp.Regexp
	wordStart bool // the character before a match must not be a word character
	wordEnd   bool // the character after a match must not be a word character
	// need are literals of which every match contains at least one; when
	// none occurs in the text the regex is not run. Go's regexp has no DFA,
	// so this skips most of the work on long texts.
	need []string
}

// negation says when a match is negated: a cue among the last window words
// before it, in the same clause.
type negation struct {
	window int
	cues   []*pattern
}

// clauseEnd ends the stretch of text a negation cue reaches across.
const clauseEnd = ".!?;\n"

// wordRune matches a phrase word that ends in the wildcard "*".
const wordRune = `[\p{L}\p{N}_]`

// compilePhrase compiles a phrase: words separated by spaces or hyphens,
// matched case-insensitively, with any run of whitespace and hyphens between
// words, at word boundaries. A "*" ending a word (of two characters or more)
// matches the rest of that word: "suicid*" matches "suicidal".
func compilePhrase(s string) (*pattern, error) {
	words := strings.FieldsFunc(s, func(r rune) bool { return unicode.IsSpace(r) || r == '-' })
	if len(words) == 0 {
		return nil, errors.New("empty phrase")
	}
	parts := make([]string, len(words))
	for i, w := range words {
		w = fold(w)
		if strings.HasSuffix(w, "*") && utf8.RuneCountInString(w) > 2 {
			parts[i] = regexp.QuoteMeta(strings.TrimSuffix(w, "*")) + wordRune + "*"
			continue
		}
		parts[i] = regexp.QuoteMeta(w)
	}
	// The text is folded, so a phrase needs no (?i); without it, regexp
	// can skip ahead to its literal first word.
	expr := strings.Join(parts, `[\s\-]+`)
	re, err := regexp.Compile(expr)
	if err != nil {
		return nil, err
	}
	first, _ := utf8.DecodeRuneInString(words[0])
	last, _ := utf8.DecodeLastRuneInString(words[len(words)-1])
	return &pattern{re: re, wordStart: isWord(first), wordEnd: isWord(last) || last == '*', need: needs(expr)}, nil
}

// compileRegex compiles a regex entry. It runs on folded, lower-cased text
// and is compiled case-insensitive, so case never matters.
func compileRegex(s string) (*pattern, error) {
	if s == "" {
		return nil, errors.New("empty regex")
	}
	re, err := regexp.Compile(`(?i)` + s)
	if err != nil {
		return nil, err
	}
	if re.MatchString("") {
		return nil, errors.New("regex matches empty text")
	}
	return &pattern{re: re, need: needs(`(?i)` + s)}, nil
}

// needs returns literals, folded, at least one of which every match of expr
// contains; nil when it cannot name any.
func needs(expr string) []string {
	re, err := syntax.Parse(expr, syntax.Perl)
	if err != nil {
		return nil
	}
	return required(re)
}

func required(re *syntax.Regexp) []string {
	switch re.Op {
	case syntax.OpLiteral:
		lit := string(re.Rune)
		if re.Flags&syntax.FoldCase != 0 && !isASCII(lit) {
			// Case folding may match text that lower-casing leaves
			// different (final sigma): name nothing rather than skip a match.
			return nil
		}
		return []string{fold(lit)}
	case syntax.OpCapture, syntax.OpPlus:
		return required(re.Sub[0])
	case syntax.OpRepeat:
		if re.Min >= 1 {
			return required(re.Sub[0])
		}
	case syntax.OpConcat:
		var best []string
		for _, sub := range re.Sub {
			if r := required(sub); stronger(r, best) {
				best = r
			}
		}
		return best
	case syntax.OpAlternate:
		var all []string
		for _, sub := range re.Sub {
			r := required(sub)
			if r == nil {
				return nil
			}
			all = append(all, r...)
		}
		return all
	}
	return nil
}

// stronger reports whether literal set a filters better than b: a longer
// shortest literal, then fewer literals.
func stronger(a, b []string) bool {
	if a == nil {
		return false
	}
	if b == nil {
		return true
	}
	shortest := func(s []string) int {
		n := len(s[0])
		for _, x := range s {
			n = min(n, len(x))
		}
		return n
	}
	if sa, sb := shortest(a), shortest(b); sa != sb {
		return sa > sb
	}
	return len(a) < len(b)
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

func isWord(r rune) bool { return r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) }

// doc is folded text cut into sentences. A match never spans a sentence
// end, which keeps rules local and lets a pattern skip every sentence that
// lacks the literals it needs.
type doc struct {
	text  string
	sents []span
}

// span is a sentence: text[start:end], without leading whitespace, with its
// closing punctuation, without a closing newline.
type span struct{ start, end int }

// newDoc cuts text at newlines, and after runs of '.', '!' or '?' that are
// followed by whitespace or the end ("2.5 mg" and "example.com" stay whole).
func newDoc(text string) *doc {
	d := &doc{text: text}
	start := 0
	cut := func(end int) {
		for start < end && isSpace(text[start]) {
			start++
		}
		if start < end {
			d.sents = append(d.sents, span{start, end})
		}
	}
	for i := 0; i < len(text); i++ {
		switch text[i] {
		case '\n':
			cut(i)
			start = i + 1
		case '.', '!', '?':
			j := i + 1
			for j < len(text) && (text[j] == '.' || text[j] == '!' || text[j] == '?') {
				j++
			}
			if j == len(text) || isSpace(text[j]) {
				cut(j)
				start = j
			}
			i = j - 1
		}
	}
	cut(len(text))
	return d
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v' || c == '\n'
}

// candidates returns the sentences that contain one of p's needed literals,
// or all sentences if p names none.
func (p *pattern) candidates(d *doc) []span {
	if p.need == nil {
		return d.sents
	}
	var out []span
	last := -1
	for _, lit := range p.need {
		for off := 0; off < len(d.text); {
			i := strings.Index(d.text[off:], lit)
			if i < 0 {
				break
			}
			pos := off + i
			// The last sentence starting at or before pos.
			k, found := slices.BinarySearchFunc(d.sents, pos, func(s span, pos int) int { return s.start - pos })
			if !found {
				k--
			}
			if k < 0 || pos+len(lit) > d.sents[k].end {
				off = pos + 1 // in the space between sentences, or across an end
				continue
			}
			if k != last {
				out = append(out, d.sents[k])
				last = k
			}
			off = d.sents[k].end
		}
	}
	if len(p.need) > 1 {
		slices.SortFunc(out, func(a, b span) int { return a.start - b.start })
		out = slices.Compact(out)
	}
	return out
}

// find reports whether p matches in a sentence of d at a position accept
// agrees with (any position if accept is nil). accept gets offsets in d.text.
func (p *pattern) find(d *doc, accept func(start int) bool) bool {
	for _, s := range p.candidates(d) {
		if p.findIn(d.text[s.start:s.end], s.start, accept) {
			return true
		}
	}
	return false
}

// findIn is find over one string whose first byte is at offset base.
func (p *pattern) findIn(text string, base int, accept func(start int) bool) bool {
	for _, loc := range p.re.FindAllStringIndex(text, -1) {
		if p.wordStart && loc[0] > 0 {
			if r, _ := utf8.DecodeLastRuneInString(text[:loc[0]]); isWord(r) {
				continue
			}
		}
		if p.wordEnd && loc[1] < len(text) {
			if r, _ := utf8.DecodeRuneInString(text[loc[1]:]); isWord(r) {
				continue
			}
		}
		if accept == nil || accept(base+loc[0]) {
			return true
		}
	}
	return false
}

// negated reports whether the match at start is negated.
func (n *negation) negated(text string, start int) bool {
	clause := text[:start]
	if i := strings.LastIndexAny(clause, clauseEnd); i >= 0 {
		clause = clause[i+1:]
	}
	words := strings.Fields(clause)
	if len(words) == 0 {
		return false
	}
	if len(words) > n.window {
		words = words[len(words)-n.window:]
	}
	before := strings.Join(words, " ")
	for _, c := range n.cues {
		if c.findIn(before, 0, nil) {
			return true
		}
	}
	return false
}

// fires reports whether r matches d.
func (r *rule) fires(d *doc, neg *negation) bool {
	for _, u := range r.unless {
		if u.find(d, nil) {
			return false
		}
	}
	var accept func(int) bool
	if r.negatable {
		accept = func(start int) bool { return !neg.negated(d.text, start) }
	}
	hits := 0
	for _, p := range r.patterns {
		if p.find(d, accept) {
			hits++
			if hits >= r.minMatches {
				return true
			}
		}
	}
	return false
}

// evaluate returns the rules text fires, highest priority first.
func (s *ruleSet) evaluate(ctx context.Context, text string) ([]*rule, error) {
	var fired []*rule
	d := newDoc(text)
	for _, r := range s.rules {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if r.fires(d, s.negation) {
			fired = append(fired, r)
		}
	}
	return fired, nil
}

// render writes the output object: the defaults, overwritten property by
// property by the fired rules' sets (for each property, the highest-priority
// fired rule that sets it wins), the labels of every fired rule, and a
// rationale naming the fired rule IDs. Nothing in it comes from the text.
func (s *ruleSet) render(fired []*rule) json.RawMessage {
	values := make(map[string]json.RawMessage, len(s.fields))
	for _, f := range s.fields {
		values[f.name] = f.value
	}
	// Lowest priority first, so higher ones overwrite.
	for _, r := range slices.Backward(fired) {
		for _, k := range r.setKeys {
			values[k] = r.set[k]
		}
	}
	if s.labelsField != "" {
		labels := slices.Clone(s.baseLabels)
		for _, r := range fired {
			if !slices.Contains(labels, r.label) {
				labels = append(labels, r.label)
			}
		}
		values[s.labelsField] = processor.MustJSON(labels)
	}
	if s.rationaleField != "" {
		rationale := s.noMatchRationale
		if len(fired) > 0 {
			ids := make([]string, len(fired))
			for i, r := range fired {
				ids[i] = r.id
			}
			rationale = "matched: " + strings.Join(ids, ", ")
		}
		values[s.rationaleField] = processor.MustJSON(rationale)
	}
	return processor.ObjectJSON(len(s.fields), func(i int) (string, []byte) {
		return s.fields[i].name, values[s.fields[i].name]
	})
}

// normalizer folds typographic variants to the ASCII forms rules are written
// in and drops invisible characters that would split a word.
var normalizer = strings.NewReplacer(
	"\u017f", "s", // long s: (?i) treats it as s, ToLower does not
	"\u2018", "'", "\u2019", "'", "\u02bc", "'", "\u2032", "'",
	"\u201c", `"`, "\u201d", `"`,
	"\u2010", "-", "\u2011", "-", "\u2012", "-", "\u2013", "-", "\u2014", " - ", "\u2212", "-",
	"\u00a0", " ", "\u2007", " ", "\u202f", " ",
	"\u200b", "", "\u200c", "", "\u200d", "", "\u2060", "", "\ufeff", "", "\u00ad", "",
)

// fold prepares text for matching: typographic variants folded, invisible
// characters dropped, lower-cased. Every match and offset is in folded text.
func fold(s string) string { return strings.ToLower(normalizer.Replace(s)) }

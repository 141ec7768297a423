package rules

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
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

// pattern is one compiled phrase or regex. Phrases check word boundaries
// themselves, with Unicode letters and digits as word characters, because
// RE2's \b knows only ASCII.
type pattern struct {
	re        *regexp.Regexp
	wordStart bool // the character before a match must not be a word character
	wordEnd   bool // the character after a match must not be a word character
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
		w = normalize(w)
		if strings.HasSuffix(w, "*") && utf8.RuneCountInString(w) > 2 {
			parts[i] = regexp.QuoteMeta(strings.TrimSuffix(w, "*")) + wordRune + "*"
			continue
		}
		parts[i] = regexp.QuoteMeta(w)
	}
	re, err := regexp.Compile(`(?i)` + strings.Join(parts, `[\s\-]+`))
	if err != nil {
		return nil, err
	}
	first, _ := utf8.DecodeRuneInString(words[0])
	last, _ := utf8.DecodeLastRuneInString(words[len(words)-1])
	return &pattern{re: re, wordStart: isWord(first), wordEnd: isWord(last) || last == '*'}, nil
}

// compileRegex compiles a regex entry, case-insensitive unless it says (?-i).
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
	return &pattern{re: re}, nil
}

func isWord(r rune) bool { return r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) }

// find reports whether p matches text at a position accept agrees with
// (any position if accept is nil).
func (p *pattern) find(text string, accept func(start int) bool) bool {
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
		if accept == nil || accept(loc[0]) {
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
		if c.find(before, nil) {
			return true
		}
	}
	return false
}

// fires reports whether r matches text.
func (r *rule) fires(text string, neg *negation) bool {
	for _, u := range r.unless {
		if u.find(text, nil) {
			return false
		}
	}
	var accept func(int) bool
	if r.negatable {
		accept = func(start int) bool { return !neg.negated(text, start) }
	}
	hits := 0
	for _, p := range r.patterns {
		if p.find(text, accept) {
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
	for _, r := range s.rules {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if r.fires(text, s.negation) {
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
		values[s.labelsField] = mustJSON(labels)
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
		values[s.rationaleField] = mustJSON(rationale)
	}
	var b bytes.Buffer
	b.WriteByte('{')
	for i, f := range s.fields {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(mustJSON(f.name))
		b.WriteByte(':')
		b.Write(values[f.name])
	}
	b.WriteByte('}')
	return b.Bytes()
}

// mustJSON encodes strings and string slices, which cannot fail.
func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic("rules: encode: " + err.Error())
	}
	return b
}

// normalizer folds typographic variants to the ASCII forms rules are written
// in and drops invisible characters that would split a word.
var normalizer = strings.NewReplacer(
	"\u2018", "'", "\u2019", "'", "\u02bc", "'", "\u2032", "'",
	"\u201c", `"`, "\u201d", `"`,
	"\u2010", "-", "\u2011", "-", "\u2012", "-", "\u2013", "-", "\u2014", " - ", "\u2212", "-",
	"\u00a0", " ", "\u2007", " ", "\u202f", " ",
	"\u200b", "", "\u200c", "", "\u200d", "", "\u2060", "", "\ufeff", "", "\u00ad", "",
)

func normalize(s string) string { return normalizer.Replace(s) }

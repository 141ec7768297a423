package rules

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/stetlabs/stet/processor/yamlcheck"
)

// Version is the rules file format version this package reads.
const Version = 1

var (
	idPattern    = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)
	labelPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$`)
)

var topKeys = []string{"version", "profile", "description", "defaults", "labels_field", "rationale_field", "negation", "terms", "rules"}

var (
	termName = regexp.MustCompile(`^[a-z][a-z0-9_]{0,31}$`)
	termRef  = regexp.MustCompile(`\$\{([^}]*)\}`)
)

var ruleKeys = []string{"id", "description", "priority", "any", "regex", "unless", "unless_regex", "negatable", "min_matches", "set", "label"}

// parse reads and compiles a rules file. Errors name the line, the rule ID
// and the key; they hold only rules-file content, which is configuration.
func parse(data []byte) (*ruleSet, error) {
	_, top, err := yamlcheck.Top(data, topKeys)
	if err != nil {
		return nil, err
	}
	if k := top.Missing("version", "defaults", "rules"); k != "" {
		return nil, fmt.Errorf("missing key %q", k)
	}

	s := &ruleSet{}
	v, err := yamlcheck.Int(top.Get("version"), "version")
	if err != nil {
		return nil, err
	}
	if v != Version {
		return nil, fmt.Errorf("line %d: version: %d is not supported (want %d)", top.Get("version").Line, v, Version)
	}
	if n := top.Get("profile"); n != nil {
		if s.profile, err = yamlcheck.String(n, "profile"); err != nil {
			return nil, err
		}
	}
	if n := top.Get("description"); n != nil {
		if _, err := yamlcheck.String(n, "description"); err != nil {
			return nil, err
		}
	}
	if n := top.Get("labels_field"); n != nil {
		if s.labelsField, err = yamlcheck.String(n, "labels_field"); err != nil {
			return nil, err
		}
	}
	if n := top.Get("rationale_field"); n != nil {
		if s.rationaleField, err = yamlcheck.String(n, "rationale_field"); err != nil {
			return nil, err
		}
	}
	if s.labelsField != "" && s.labelsField == s.rationaleField {
		return nil, errors.New("labels_field and rationale_field name the same property")
	}
	if err := s.parseDefaults(top.Get("defaults")); err != nil {
		return nil, err
	}
	if n := top.Get("negation"); n != nil {
		if s.negation, err = parseNegation(n); err != nil {
			return nil, err
		}
	}
	terms := map[string]string{}
	if n := top.Get("terms"); n != nil {
		if terms, err = parseTerms(n); err != nil {
			return nil, err
		}
	}
	if err := s.parseRules(top.Get("rules"), terms); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *ruleSet) parseDefaults(n *yaml.Node) error {
	m, err := yamlcheck.ReadMap(n, "defaults", nil)
	if err != nil {
		return err
	}
	s.noMatchRationale = "no rule matched"
	s.baseLabels = []string{}
	for _, kv := range m.Pairs {
		raw, err := yamlcheck.JSON(kv.Value, "defaults."+kv.Key)
		if err != nil {
			return err
		}
		switch {
		case kv.Key == "":
			return fmt.Errorf("line %d: defaults: empty key", kv.Line)
		case kv.Key == s.labelsField:
			if s.baseLabels, err = yamlcheck.Scalars(kv.Value, "defaults."+kv.Key); err != nil {
				return err
			}
		case kv.Key == s.rationaleField:
			if s.noMatchRationale, err = yamlcheck.String(kv.Value, "defaults."+kv.Key); err != nil {
				return err
			}
		}
		s.fields = append(s.fields, field{name: kv.Key, value: raw})
	}
	for _, f := range []string{s.labelsField, s.rationaleField} {
		if f != "" && !slices.ContainsFunc(s.fields, func(x field) bool { return x.name == f }) {
			s.fields = append(s.fields, field{name: f})
		}
	}
	return nil
}

func parseNegation(n *yaml.Node) (*negation, error) {
	m, err := yamlcheck.ReadMap(n, "negation", []string{"window", "cues"})
	if err != nil {
		return nil, err
	}
	neg := &negation{window: 3}
	if w := m.Get("window"); w != nil {
		if neg.window, err = yamlcheck.Int(w, "negation.window"); err != nil {
			return nil, err
		}
		if neg.window < 1 || neg.window > 20 {
			return nil, fmt.Errorf("line %d: negation.window: must be between 1 and 20", w.Line)
		}
	}
	c := m.Get("cues")
	if c == nil {
		return nil, fmt.Errorf("line %d: negation: missing key \"cues\"", n.Line)
	}
	cues, err := yamlcheck.Scalars(c, "negation.cues")
	if err != nil {
		return nil, err
	}
	if len(cues) == 0 {
		return nil, fmt.Errorf("line %d: negation.cues: empty list", c.Line)
	}
	for i, cue := range cues {
		p, err := compilePhrase(cue)
		if err != nil {
			return nil, fmt.Errorf("line %d: negation.cues[%d]: %w", c.Content[i].Line, i, err)
		}
		neg.cues = append(neg.cues, p)
	}
	return neg, nil
}

// parseTerms reads named regex fragments: each name maps to a list of
// alternatives, and "${name}" in a regex stands for (?:alt1|alt2|…).
func parseTerms(n *yaml.Node) (map[string]string, error) {
	m, err := yamlcheck.ReadMap(n, "terms", nil)
	if err != nil {
		return nil, err
	}
	terms := map[string]string{}
	for _, kv := range m.Pairs {
		if !termName.MatchString(kv.Key) {
			return nil, fmt.Errorf("line %d: terms.%s: names are lowercase letters, digits and '_'", kv.Line, kv.Key)
		}
		alts, err := yamlcheck.Scalars(kv.Value, "terms."+kv.Key)
		if err != nil {
			return nil, err
		}
		if len(alts) == 0 {
			return nil, fmt.Errorf("line %d: terms.%s: empty list", kv.Line, kv.Key)
		}
		for i, a := range alts {
			if _, err := regexp.Compile(a); err != nil || a == "" {
				return nil, fmt.Errorf("line %d: terms.%s[%d]: not a regex fragment", kv.Value.Content[i].Line, kv.Key, i)
			}
		}
		terms[kv.Key] = "(?:" + strings.Join(alts, "|") + ")"
	}
	return terms, nil
}

// expand replaces every ${name} in a regex with its term.
func expand(re string, terms map[string]string) (string, error) {
	var missing string
	out := termRef.ReplaceAllStringFunc(re, func(ref string) string {
		name := termRef.FindStringSubmatch(ref)[1]
		t, ok := terms[name]
		if !ok && missing == "" {
			missing = name
		}
		return t
	})
	if missing != "" {
		return "", fmt.Errorf("unknown term %q", missing)
	}
	return out, nil
}

func (s *ruleSet) parseRules(n *yaml.Node, terms map[string]string) error {
	items, err := yamlcheck.Items(n, "rules")
	if err != nil {
		return err
	}
	firstLine := map[string]int{}
	for i, rn := range items {
		r, err := s.parseRule(rn, i, terms)
		if err != nil {
			return err
		}
		if l, dup := firstLine[r.id]; dup {
			return fmt.Errorf("rule %q (line %d): id: duplicate, first defined at line %d", r.id, r.line, l)
		}
		firstLine[r.id] = r.line
		s.rules = append(s.rules, r)
	}
	// Most important first; on equal priority, the earlier rule in the file.
	slices.SortStableFunc(s.rules, func(a, b *rule) int { return cmp.Compare(b.priority, a.priority) })
	return nil
}

func (s *ruleSet) parseRule(n *yaml.Node, index int, terms map[string]string) (*rule, error) {
	r := &rule{line: n.Line, minMatches: 1}
	if n.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("rules[%d] (line %d): must be a mapping", index, n.Line)
	}
	// Find the id first so every later error can name the rule.
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == "id" {
			id, err := yamlcheck.String(n.Content[i+1], "id")
			if err != nil {
				return nil, fmt.Errorf("rules[%d]: %w", index, err)
			}
			if !idPattern.MatchString(id) {
				return nil, fmt.Errorf("rules[%d] (line %d): id: %q must be lowercase letters, digits, '.', '_' or '-' (at most 64)", index, n.Content[i+1].Line, id)
			}
			r.id = id
		}
	}
	if r.id == "" {
		return nil, fmt.Errorf("rules[%d] (line %d): missing key \"id\"", index, n.Line)
	}
	fail := func(err error) (*rule, error) {
		return nil, fmt.Errorf("rule %q (line %d): %w", r.id, r.line, err)
	}
	m, err := yamlcheck.ReadMap(n, "", ruleKeys)
	if err != nil {
		return fail(err)
	}
	if x := m.Get("description"); x != nil {
		if _, err := yamlcheck.String(x, "description"); err != nil {
			return fail(err)
		}
	}
	if x := m.Get("priority"); x != nil {
		if r.priority, err = yamlcheck.Int(x, "priority"); err != nil {
			return fail(err)
		}
	}
	if r.patterns, err = patterns(m, "any", "regex", terms); err != nil {
		return fail(err)
	}
	if len(r.patterns) == 0 {
		return fail(fmt.Errorf("line %d: needs at least one entry in \"any\" or \"regex\"", n.Line))
	}
	if r.unless, err = patterns(m, "unless", "unless_regex", terms); err != nil {
		return fail(err)
	}
	if x := m.Get("negatable"); x != nil {
		if r.negatable, err = yamlcheck.Bool(x, "negatable"); err != nil {
			return fail(err)
		}
		if r.negatable && s.negation == nil {
			return fail(fmt.Errorf("line %d: negatable: the file has no negation section", x.Line))
		}
	}
	if x := m.Get("min_matches"); x != nil {
		if r.minMatches, err = yamlcheck.Int(x, "min_matches"); err != nil {
			return fail(err)
		}
		if r.minMatches < 1 || r.minMatches > len(r.patterns) {
			return fail(fmt.Errorf("line %d: min_matches: must be between 1 and %d, the number of any and regex entries", x.Line, len(r.patterns)))
		}
	}
	r.label = r.id
	if x := m.Get("label"); x != nil {
		if r.label, err = yamlcheck.String(x, "label"); err != nil {
			return fail(err)
		}
		if !labelPattern.MatchString(r.label) {
			return fail(fmt.Errorf("line %d: label: %q must be letters, digits, '.', '_', ':' or '-' (at most 64)", x.Line, r.label))
		}
	}
	x := m.Get("set")
	if x == nil {
		return fail(errors.New("missing key \"set\""))
	}
	sm, err := yamlcheck.ReadMap(x, "set", nil)
	if err != nil {
		return fail(err)
	}
	if len(sm.Pairs) == 0 {
		return fail(fmt.Errorf("line %d: set: empty", x.Line))
	}
	r.set = map[string]json.RawMessage{}
	for _, kv := range sm.Pairs {
		switch {
		case kv.Key == s.labelsField || kv.Key == s.rationaleField:
			return fail(fmt.Errorf("line %d: set.%s: filled from the matched rules, cannot be set", kv.Line, kv.Key))
		case !slices.ContainsFunc(s.fields, func(f field) bool { return f.name == kv.Key }):
			return fail(fmt.Errorf("line %d: set.%s: not in defaults (every property a rule sets needs a default)", kv.Line, kv.Key))
		}
		raw, err := yamlcheck.JSON(kv.Value, "set."+kv.Key)
		if err != nil {
			return fail(err)
		}
		r.set[kv.Key] = raw
		r.setKeys = append(r.setKeys, kv.Key)
	}
	return r, nil
}

// patterns compiles a rule's phrase list (key phrases) and regex list (key
// regexes), phrases first, expanding terms in regexes.
func patterns(m *yamlcheck.Map, phrases, regexes string, terms map[string]string) ([]*pattern, error) {
	var out []*pattern
	if n := m.Get(phrases); n != nil {
		list, err := yamlcheck.Scalars(n, phrases)
		if err != nil {
			return nil, err
		}
		for i, s := range list {
			p, err := compilePhrase(s)
			if err != nil {
				return nil, fmt.Errorf("line %d: %s[%d]: %w", n.Content[i].Line, phrases, i, err)
			}
			out = append(out, p)
		}
	}
	if n := m.Get(regexes); n != nil {
		list, err := yamlcheck.Scalars(n, regexes)
		if err != nil {
			return nil, err
		}
		for i, s := range list {
			x, err := expand(s, terms)
			if err != nil {
				return nil, fmt.Errorf("line %d: %s[%d]: %w", n.Content[i].Line, regexes, i, err)
			}
			p, err := compileRegex(x)
			if err != nil {
				return nil, fmt.Errorf("line %d: %s[%d]: %w", n.Content[i].Line, regexes, i, err)
			}
			out = append(out, p)
		}
	}
	return out, nil
}

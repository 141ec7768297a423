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
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		return nil, errors.New("empty file")
	}
	top, err := mapping(doc.Content[0], "top level", topKeys)
	if err != nil {
		return nil, err
	}
	for _, k := range []string{"version", "defaults", "rules"} {
		if top.get(k) == nil {
			return nil, fmt.Errorf("missing key %q", k)
		}
	}

	s := &ruleSet{}
	v, err := intValue(top.get("version"), "version")
	if err != nil {
		return nil, err
	}
	if v != Version {
		return nil, fmt.Errorf("line %d: version: %d is not supported (want %d)", top.get("version").Line, v, Version)
	}
	if n := top.get("profile"); n != nil {
		if s.profile, err = stringValue(n, "profile"); err != nil {
			return nil, err
		}
	}
	if n := top.get("description"); n != nil {
		if _, err := stringValue(n, "description"); err != nil {
			return nil, err
		}
	}
	if n := top.get("labels_field"); n != nil {
		if s.labelsField, err = stringValue(n, "labels_field"); err != nil {
			return nil, err
		}
	}
	if n := top.get("rationale_field"); n != nil {
		if s.rationaleField, err = stringValue(n, "rationale_field"); err != nil {
			return nil, err
		}
	}
	if s.labelsField != "" && s.labelsField == s.rationaleField {
		return nil, errors.New("labels_field and rationale_field name the same property")
	}
	if err := s.parseDefaults(top.get("defaults")); err != nil {
		return nil, err
	}
	if n := top.get("negation"); n != nil {
		if s.negation, err = parseNegation(n); err != nil {
			return nil, err
		}
	}
	terms := map[string]string{}
	if n := top.get("terms"); n != nil {
		if terms, err = parseTerms(n); err != nil {
			return nil, err
		}
	}
	if err := s.parseRules(top.get("rules"), terms); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *ruleSet) parseDefaults(n *yaml.Node) error {
	m, err := mapping(n, "defaults", nil)
	if err != nil {
		return err
	}
	s.noMatchRationale = "no rule matched"
	s.baseLabels = []string{}
	for _, kv := range m.pairs {
		raw, err := jsonValue(kv.value, "defaults."+kv.key)
		if err != nil {
			return err
		}
		switch {
		case kv.key == "":
			return fmt.Errorf("line %d: defaults: empty key", kv.line)
		case kv.key == s.labelsField:
			if s.baseLabels, err = stringList(kv.value, "defaults."+kv.key); err != nil {
				return err
			}
		case kv.key == s.rationaleField:
			if s.noMatchRationale, err = stringValue(kv.value, "defaults."+kv.key); err != nil {
				return err
			}
		}
		s.fields = append(s.fields, field{name: kv.key, value: raw})
	}
	for _, f := range []string{s.labelsField, s.rationaleField} {
		if f != "" && !slices.ContainsFunc(s.fields, func(x field) bool { return x.name == f }) {
			s.fields = append(s.fields, field{name: f})
		}
	}
	return nil
}

func parseNegation(n *yaml.Node) (*negation, error) {
	m, err := mapping(n, "negation", []string{"window", "cues"})
	if err != nil {
		return nil, err
	}
	neg := &negation{window: 3}
	if w := m.get("window"); w != nil {
		if neg.window, err = intValue(w, "negation.window"); err != nil {
			return nil, err
		}
		if neg.window < 1 || neg.window > 20 {
			return nil, fmt.Errorf("line %d: negation.window: must be between 1 and 20", w.Line)
		}
	}
	c := m.get("cues")
	if c == nil {
		return nil, fmt.Errorf("line %d: negation: missing key \"cues\"", n.Line)
	}
	cues, err := stringList(c, "negation.cues")
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
	m, err := mapping(n, "terms", nil)
	if err != nil {
		return nil, err
	}
	terms := map[string]string{}
	for _, kv := range m.pairs {
		if !termName.MatchString(kv.key) {
			return nil, fmt.Errorf("line %d: terms.%s: names are lowercase letters, digits and '_'", kv.line, kv.key)
		}
		alts, err := stringList(kv.value, "terms."+kv.key)
		if err != nil {
			return nil, err
		}
		if len(alts) == 0 {
			return nil, fmt.Errorf("line %d: terms.%s: empty list", kv.line, kv.key)
		}
		for i, a := range alts {
			if _, err := regexp.Compile(a); err != nil || a == "" {
				return nil, fmt.Errorf("line %d: terms.%s[%d]: not a regex fragment", kv.value.Content[i].Line, kv.key, i)
			}
		}
		terms[kv.key] = "(?:" + strings.Join(alts, "|") + ")"
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
	if n.Kind != yaml.SequenceNode {
		return fmt.Errorf("line %d: rules: must be a list", n.Line)
	}
	if len(n.Content) == 0 {
		return fmt.Errorf("line %d: rules: empty list", n.Line)
	}
	firstLine := map[string]int{}
	for i, rn := range n.Content {
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
			id, err := stringValue(n.Content[i+1], "id")
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
	m, err := mapping(n, "", ruleKeys)
	if err != nil {
		return fail(err)
	}
	if x := m.get("description"); x != nil {
		if _, err := stringValue(x, "description"); err != nil {
			return fail(err)
		}
	}
	if x := m.get("priority"); x != nil {
		if r.priority, err = intValue(x, "priority"); err != nil {
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
	if x := m.get("negatable"); x != nil {
		if r.negatable, err = boolValue(x, "negatable"); err != nil {
			return fail(err)
		}
		if r.negatable && s.negation == nil {
			return fail(fmt.Errorf("line %d: negatable: the file has no negation section", x.Line))
		}
	}
	if x := m.get("min_matches"); x != nil {
		if r.minMatches, err = intValue(x, "min_matches"); err != nil {
			return fail(err)
		}
		if r.minMatches < 1 || r.minMatches > len(r.patterns) {
			return fail(fmt.Errorf("line %d: min_matches: must be between 1 and %d, the number of any and regex entries", x.Line, len(r.patterns)))
		}
	}
	r.label = r.id
	if x := m.get("label"); x != nil {
		if r.label, err = stringValue(x, "label"); err != nil {
			return fail(err)
		}
		if !labelPattern.MatchString(r.label) {
			return fail(fmt.Errorf("line %d: label: %q must be letters, digits, '.', '_', ':' or '-' (at most 64)", x.Line, r.label))
		}
	}
	x := m.get("set")
	if x == nil {
		return fail(errors.New("missing key \"set\""))
	}
	sm, err := mapping(x, "set", nil)
	if err != nil {
		return fail(err)
	}
	if len(sm.pairs) == 0 {
		return fail(fmt.Errorf("line %d: set: empty", x.Line))
	}
	r.set = map[string]json.RawMessage{}
	for _, kv := range sm.pairs {
		switch {
		case kv.key == s.labelsField || kv.key == s.rationaleField:
			return fail(fmt.Errorf("line %d: set.%s: filled from the matched rules, cannot be set", kv.line, kv.key))
		case !slices.ContainsFunc(s.fields, func(f field) bool { return f.name == kv.key }):
			return fail(fmt.Errorf("line %d: set.%s: not in defaults (every property a rule sets needs a default)", kv.line, kv.key))
		}
		raw, err := jsonValue(kv.value, "set."+kv.key)
		if err != nil {
			return fail(err)
		}
		r.set[kv.key] = raw
		r.setKeys = append(r.setKeys, kv.key)
	}
	return r, nil
}

// patterns compiles a rule's phrase list (key phrases) and regex list (key
// regexes), phrases first, expanding terms in regexes.
func patterns(m *yamlMap, phrases, regexes string, terms map[string]string) ([]*pattern, error) {
	var out []*pattern
	if n := m.get(phrases); n != nil {
		list, err := stringList(n, phrases)
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
	if n := m.get(regexes); n != nil {
		list, err := stringList(n, regexes)
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

// yamlMap is a YAML mapping with its keys in file order.
type yamlMap struct {
	pairs []pair
}

type pair struct {
	key   string
	line  int
	value *yaml.Node
}

func (m *yamlMap) get(key string) *yaml.Node {
	for _, p := range m.pairs {
		if p.key == key {
			return p.value
		}
	}
	return nil
}

// mapping reads n as a mapping with string keys. If known is not nil, any
// other key is an error. what names the mapping in errors; "" for a rule,
// whose errors already name it.
func mapping(n *yaml.Node, what string, known []string) (*yamlMap, error) {
	at := func(line int) string {
		if what == "" {
			return fmt.Sprintf("line %d: ", line)
		}
		return fmt.Sprintf("line %d: %s: ", line, what)
	}
	if n.Kind != yaml.MappingNode {
		return nil, errors.New(at(n.Line) + "must be a mapping")
	}
	m := &yamlMap{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		if k.Kind != yaml.ScalarNode || k.ShortTag() != "!!str" {
			return nil, errors.New(at(k.Line) + "keys must be strings")
		}
		if known != nil && !slices.Contains(known, k.Value) {
			return nil, fmt.Errorf("%sunknown key %q (known: %s)", at(k.Line), k.Value, strings.Join(known, ", "))
		}
		if m.get(k.Value) != nil {
			return nil, fmt.Errorf("%skey %q given twice", at(k.Line), k.Value)
		}
		m.pairs = append(m.pairs, pair{key: k.Value, line: k.Line, value: n.Content[i+1]})
	}
	return m, nil
}

func stringValue(n *yaml.Node, key string) (string, error) {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		return "", fmt.Errorf("line %d: %s: must be a string", n.Line, key)
	}
	return n.Value, nil
}

func intValue(n *yaml.Node, key string) (int, error) {
	var v int
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" || n.Decode(&v) != nil {
		return 0, fmt.Errorf("line %d: %s: must be an integer", n.Line, key)
	}
	return v, nil
}

func boolValue(n *yaml.Node, key string) (bool, error) {
	var v bool
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" || n.Decode(&v) != nil {
		return false, fmt.Errorf("line %d: %s: must be true or false", n.Line, key)
	}
	return v, nil
}

// stringList reads a list of scalars. Numbers are taken as written, so a
// phrase list may hold 911.
func stringList(n *yaml.Node, key string) ([]string, error) {
	if n.Kind != yaml.SequenceNode {
		return nil, fmt.Errorf("line %d: %s: must be a list", n.Line, key)
	}
	out := make([]string, 0, len(n.Content))
	for i, c := range n.Content {
		if c.Kind != yaml.ScalarNode || c.ShortTag() == "!!null" {
			return nil, fmt.Errorf("line %d: %s[%d]: must be a string", c.Line, key, i)
		}
		out = append(out, c.Value)
	}
	return out, nil
}

// jsonValue decodes a YAML value and encodes it as the JSON it will be
// written as.
func jsonValue(n *yaml.Node, key string) (json.RawMessage, error) {
	var v any
	if err := n.Decode(&v); err != nil {
		return nil, fmt.Errorf("line %d: %s: %w", n.Line, key, err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("line %d: %s: not representable as JSON", n.Line, key)
	}
	return b, nil
}

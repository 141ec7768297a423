package azurecs

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/processor"
	"github.com/stetlabs/stet/processor/yamlcheck"
)

// MappingVersion is the mapping file format version this package reads.
const MappingVersion = 1

// The harm categories of text:analyze, in the order stet requests and
// reports them.
const (
	Hate     = "Hate"
	SelfHarm = "SelfHarm"
	Sexual   = "Sexual"
	Violence = "Violence"
)

// Categories lists every category, in request order.
var Categories = []string{Hate, SelfHarm, Sexual, Violence}

// Output types of text:analyze: how many severity levels it reports.
const (
	FourSeverityLevels  = "FourSeverityLevels"  // severities 0, 2, 4, 6
	EightSeverityLevels = "EightSeverityLevels" // severities 0 to 7
)

// anyCategory is the when-key that holds if any category satisfies it.
const anyCategory = "any"

// rationalePrefix starts every rationale the mapping writes.
const rationalePrefix = "azure content safety: "

// Severities holds one severity per category name.
type Severities map[string]int

// Mapping turns the category severities of one text:analyze answer into a
// record for a profile's schema. Its file format is described in
// docs/azure-content-safety.md. It is immutable after parsing and safe for
// concurrent use.
type Mapping struct {
	profile        string
	outputType     string
	fields         []field // the defaults, in file order
	labelsField    string
	rationaleField string
	baseLabels     []string
	noFinding      string // the rationale when every severity is 0
	labels         []categoryLabel
	rules          []mapRule
	hash           string // SHA-256 of the file
}

type field struct {
	name  string
	value json.RawMessage
}

type categoryLabel struct {
	category string
	label    string
	min      int
}

type mapRule struct {
	index int
	id    string
	when  []condition // all must hold
	set   []field
}

type condition struct {
	category string // a category name or anyCategory
	cmp      comparison
}

type comparison struct {
	op string // >=, >, <=, <, ==
	n  int
}

func (c comparison) holds(v int) bool {
	switch c.op {
	case ">=":
		return v >= c.n
	case ">":
		return v > c.n
	case "<=":
		return v <= c.n
	case "<":
		return v < c.n
	default:
		return v == c.n
	}
}

func (c comparison) String() string { return c.op + strconv.Itoa(c.n) }

var (
	comparisonPattern = regexp.MustCompile(`^\s*(>=|<=|==|>|<)\s*([0-9]+)\s*$`)
	ruleIDPattern     = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)
	labelPattern      = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$`)
)

var (
	topKeys   = []string{"version", "profile", "description", "output_type", "defaults", "labels_field", "rationale_field", "category_labels", "rules"}
	ruleKeys  = []string{"id", "description", "when", "set"}
	labelKeys = []string{"label", "min"}
)

// LoadMapping reads and validates a mapping file. Errors name the line and
// the key; they hold only mapping-file content, which is configuration.
func LoadMapping(path string) (*Mapping, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read mapping: %w", err)
	}
	m, err := ParseMapping(data)
	if err != nil {
		return nil, fmt.Errorf("mapping %s: %w", path, err)
	}
	return m, nil
}

// ParseMapping reads and validates a mapping file's content. An unknown key,
// an unknown category, a comparison that is malformed or can never hold, or
// a rule setting a property without a default is an error naming the line
// and the key.
func ParseMapping(data []byte) (*Mapping, error) {
	root, top, err := yamlcheck.Top(data, topKeys)
	if err != nil {
		return nil, err
	}
	if k := top.Missing("version", "defaults", "rules"); k != "" {
		return nil, fmt.Errorf("line %d: missing key %q", root.Line, k)
	}
	m := &Mapping{outputType: FourSeverityLevels, hash: stet.SHA256Hex(data)}

	vn := top.Get("version")
	v, err := yamlcheck.Int(vn, "version")
	if err != nil {
		return nil, err
	}
	if v != MappingVersion {
		return nil, fmt.Errorf("line %d: version: %d is not supported (want %d)", vn.Line, v, MappingVersion)
	}
	for _, k := range []string{"profile", "description", "output_type", "labels_field", "rationale_field"} {
		n := top.Get(k)
		if n == nil {
			continue
		}
		s, err := yamlcheck.String(n, k)
		if err != nil {
			return nil, err
		}
		switch k {
		case "profile":
			m.profile = s
		case "output_type":
			if s != FourSeverityLevels && s != EightSeverityLevels {
				return nil, fmt.Errorf("line %d: output_type: %q is not %s or %s", n.Line, s, FourSeverityLevels, EightSeverityLevels)
			}
			m.outputType = s
		case "labels_field":
			m.labelsField = s
		case "rationale_field":
			m.rationaleField = s
		}
	}
	if m.labelsField != "" && m.labelsField == m.rationaleField {
		return nil, fmt.Errorf("line %d: labels_field and rationale_field name the same property %q", top.Line("rationale_field"), m.labelsField)
	}
	if err := m.parseDefaults(top.Get("defaults")); err != nil {
		return nil, err
	}
	if n := top.Get("category_labels"); n != nil {
		if err := m.parseLabels(n); err != nil {
			return nil, err
		}
	}
	if err := m.parseRules(top.Get("rules")); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *Mapping) parseDefaults(n *yaml.Node) error {
	dm, err := yamlcheck.ReadMap(n, "defaults", nil)
	if err != nil {
		return err
	}
	if len(dm.Pairs) == 0 {
		return fmt.Errorf("line %d: defaults: empty", n.Line)
	}
	for _, kv := range dm.Pairs {
		path := "defaults." + kv.Key
		raw, err := yamlcheck.JSON(kv.Value, path)
		if err != nil {
			return err
		}
		switch kv.Key {
		case "":
			return fmt.Errorf("line %d: defaults: empty key", kv.Line)
		case m.labelsField:
			if m.baseLabels, err = yamlcheck.Strings(kv.Value, path); err != nil {
				return err
			}
		case m.rationaleField:
			if m.noFinding, err = yamlcheck.String(kv.Value, path); err != nil {
				return err
			}
		}
		m.fields = append(m.fields, field{name: kv.Key, value: raw})
	}
	for _, f := range []struct{ key, name string }{{"labels_field", m.labelsField}, {"rationale_field", m.rationaleField}} {
		if f.name != "" && dm.Get(f.name) == nil {
			return fmt.Errorf("line %d: %s %q: not in defaults (give it a default value)", n.Line, f.key, f.name)
		}
	}
	return nil
}

func (m *Mapping) parseLabels(n *yaml.Node) error {
	lm, err := yamlcheck.ReadMap(n, "category_labels", nil)
	if err != nil {
		return err
	}
	if m.labelsField == "" {
		return fmt.Errorf("line %d: category_labels: needs labels_field", n.Line)
	}
	for _, kv := range lm.Pairs {
		path := "category_labels." + kv.Key
		if !slices.Contains(Categories, kv.Key) {
			return fmt.Errorf("line %d: %s: unknown category (want one of %s)", kv.Line, path, strings.Join(Categories, ", "))
		}
		em, err := yamlcheck.ReadMap(kv.Value, path, labelKeys)
		if err != nil {
			return err
		}
		cl := categoryLabel{category: kv.Key}
		ln, mn := em.Get("label"), em.Get("min")
		if ln == nil || mn == nil {
			return fmt.Errorf("line %d: %s: needs both label and min", kv.Line, path)
		}
		if cl.label, err = yamlcheck.String(ln, path+".label"); err != nil {
			return err
		}
		if !labelPattern.MatchString(cl.label) {
			return fmt.Errorf("line %d: %s.label: %q must be letters, digits, '.', '_', ':' or '-' (at most 64)", ln.Line, path, cl.label)
		}
		if mn.Kind != yaml.ScalarNode || mn.ShortTag() != "!!int" || mn.Decode(&cl.min) != nil {
			return fmt.Errorf("line %d: %s.min: must be an integer", mn.Line, path)
		}
		if cl.min < 1 || cl.min > m.maxSeverity() {
			return fmt.Errorf("line %d: %s.min: must be between 1 and %d for %s", mn.Line, path, m.maxSeverity(), m.outputType)
		}
		m.labels = append(m.labels, cl)
	}
	return nil
}

func (m *Mapping) parseRules(n *yaml.Node) error {
	items, err := yamlcheck.Items(n, "rules")
	if err != nil {
		return err
	}
	ids := map[string]int{}
	for i, rn := range items {
		r, err := m.parseRule(rn, i)
		if err != nil {
			return err
		}
		if r.id != "" {
			if line, dup := ids[r.id]; dup {
				return fmt.Errorf("line %d: rules[%d].id: %q already used at line %d", rn.Line, i, r.id, line)
			}
			ids[r.id] = rn.Line
		}
		m.rules = append(m.rules, r)
	}
	return nil
}

func (m *Mapping) parseRule(n *yaml.Node, index int) (mapRule, error) {
	r := mapRule{index: index}
	name := fmt.Sprintf("rules[%d]", index)
	rm, err := yamlcheck.ReadMap(n, name, ruleKeys)
	if err != nil {
		return r, err
	}
	if x := rm.Get("id"); x != nil {
		if r.id, err = yamlcheck.String(x, name+".id"); err != nil {
			return r, err
		}
		if !ruleIDPattern.MatchString(r.id) {
			return r, fmt.Errorf("line %d: %s.id: %q must be lowercase letters, digits, '.', '_' or '-' (at most 64)", x.Line, name, r.id)
		}
		name = fmt.Sprintf("rules[%d] (%s)", index, r.id)
	}
	if x := rm.Get("description"); x != nil {
		if _, err := yamlcheck.String(x, name+".description"); err != nil {
			return r, err
		}
	}
	wn, sn := rm.Get("when"), rm.Get("set")
	if wn == nil {
		return r, fmt.Errorf("line %d: %s: missing key \"when\"", n.Line, name)
	}
	if sn == nil {
		return r, fmt.Errorf("line %d: %s: missing key \"set\"", n.Line, name)
	}

	wm, err := yamlcheck.ReadMap(wn, name+".when", nil)
	if err != nil {
		return r, err
	}
	if len(wm.Pairs) == 0 {
		return r, fmt.Errorf("line %d: %s.when: empty (the defaults are the output when no rule matches)", wn.Line, name)
	}
	for _, kv := range wm.Pairs {
		path := name + ".when." + kv.Key
		if kv.Key != anyCategory && !slices.Contains(Categories, kv.Key) {
			return r, fmt.Errorf("line %d: %s: unknown category (want one of %s or %s)", kv.Line, path, strings.Join(Categories, ", "), anyCategory)
		}
		cmp, err := m.parseComparison(kv.Value, path)
		if err != nil {
			return r, err
		}
		r.when = append(r.when, condition{category: kv.Key, cmp: cmp})
	}

	sm, err := yamlcheck.ReadMap(sn, name+".set", nil)
	if err != nil {
		return r, err
	}
	if len(sm.Pairs) == 0 {
		return r, fmt.Errorf("line %d: %s.set: empty", sn.Line, name)
	}
	for _, kv := range sm.Pairs {
		path := name + ".set." + kv.Key
		switch {
		case kv.Key == m.labelsField || kv.Key == m.rationaleField:
			return r, fmt.Errorf("line %d: %s: filled from the severities, cannot be set", kv.Line, path)
		case !slices.ContainsFunc(m.fields, func(f field) bool { return f.name == kv.Key }):
			return r, fmt.Errorf("line %d: %s: not in defaults (every property a rule sets needs a default)", kv.Line, path)
		}
		raw, err := yamlcheck.JSON(kv.Value, path)
		if err != nil {
			return r, err
		}
		r.set = append(r.set, field{name: kv.Key, value: raw})
	}
	return r, nil
}

// parseComparison reads ">=4", "<2", "==0" and checks that some severity the
// output type can report satisfies it.
func (m *Mapping) parseComparison(n *yaml.Node, path string) (comparison, error) {
	bad := func() (comparison, error) {
		return comparison{}, fmt.Errorf("line %d: %s: must be a comparison such as \">=4\" (operators >=, >, <=, <, ==), quoted", n.Line, path)
	}
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		return bad()
	}
	sub := comparisonPattern.FindStringSubmatch(n.Value)
	if sub == nil {
		return bad()
	}
	num, err := strconv.Atoi(sub[2])
	if err != nil || num > m.maxSeverity() {
		return comparison{}, fmt.Errorf("line %d: %s: %s is beyond the highest severity, %d, of %s", n.Line, path, sub[2], m.maxSeverity(), m.outputType)
	}
	c := comparison{op: sub[1], n: num}
	if !slices.ContainsFunc(m.levels(), c.holds) {
		return comparison{}, fmt.Errorf("line %d: %s: %q never holds with %s (severities %s)", n.Line, path, n.Value, m.outputType, levelList(m.levels()))
	}
	return c, nil
}

// levels returns the severities the output type can report.
func (m *Mapping) levels() []int {
	if m.outputType == EightSeverityLevels {
		return []int{0, 1, 2, 3, 4, 5, 6, 7}
	}
	return []int{0, 2, 4, 6}
}

func (m *Mapping) maxSeverity() int {
	l := m.levels()
	return l[len(l)-1]
}

func levelList(levels []int) string {
	s := make([]string, len(levels))
	for i, v := range levels {
		s[i] = strconv.Itoa(v)
	}
	return strings.Join(s, ", ")
}

// Profile returns the profile the mapping file says it was written for, or "".
func (m *Mapping) Profile() string { return m.profile }

// OutputType returns the severity scale the mapping is written for, which
// is also the outputType stet requests.
func (m *Mapping) OutputType() string { return m.outputType }

// Hash returns the SHA-256 of the mapping file.
func (m *Mapping) Hash() string { return m.hash }

// Apply builds the record for one set of severities: the defaults, then the
// set of the first rule whose conditions all hold, then the labels of every
// category at or above its label threshold (in category_labels order) and a
// rationale naming categories and numbers only. A category missing from s
// counts as 0. The output's keys are in the order of the defaults.
func (m *Mapping) Apply(s Severities) json.RawMessage {
	values := make([]json.RawMessage, len(m.fields))
	for i, f := range m.fields {
		values[i] = f.value
	}
	var matched *mapRule
	for i := range m.rules {
		if m.rules[i].matches(s) {
			matched = &m.rules[i]
			break
		}
	}
	if matched != nil {
		for _, set := range matched.set {
			for i, f := range m.fields {
				if f.name == set.name {
					values[i] = set.value
				}
			}
		}
	}
	found := findings(s)

	return processor.ObjectJSON(len(m.fields), func(i int) (string, []byte) {
		switch name := m.fields[i].name; name {
		case m.labelsField:
			return name, processor.MustJSON(m.labelsFor(s))
		case m.rationaleField:
			return name, processor.MustJSON(m.rationale(found, matched))
		default:
			return name, values[i]
		}
	})
}

func (r *mapRule) matches(s Severities) bool {
	for _, c := range r.when {
		if c.category == anyCategory {
			if !slices.ContainsFunc(Categories, func(cat string) bool { return c.cmp.holds(s[cat]) }) {
				return false
			}
			continue
		}
		if !c.cmp.holds(s[c.category]) {
			return false
		}
	}
	return true
}

// finding is one category with a non-zero severity.
type finding struct {
	category string
	severity int
}

// findings lists the categories above 0, most severe first, ties in
// category order.
func findings(s Severities) []finding {
	var out []finding
	for _, c := range Categories {
		if v := s[c]; v > 0 {
			out = append(out, finding{c, v})
		}
	}
	slices.SortStableFunc(out, func(a, b finding) int { return b.severity - a.severity })
	return out
}

// labelsFor returns the default labels, then the label of every category at
// or above its threshold, in category_labels order, without repeats.
func (m *Mapping) labelsFor(s Severities) []string {
	labels := append([]string{}, m.baseLabels...)
	for _, cl := range m.labels {
		if s[cl.category] >= cl.min && !slices.Contains(labels, cl.label) {
			labels = append(labels, cl.label)
		}
	}
	return labels
}

// rationale names categories, severities and the matched rule's ID: never
// anything from the document.
func (m *Mapping) rationale(found []finding, matched *mapRule) string {
	if len(found) == 0 && matched == nil {
		return m.noFinding
	}
	parts := make([]string, len(found))
	for i, f := range found {
		parts[i] = f.category + "=" + strconv.Itoa(f.severity)
	}
	s := rationalePrefix + strings.Join(parts, ", ")
	if len(found) == 0 {
		s = rationalePrefix + "every category 0"
	}
	switch {
	case matched == nil:
		s += "; no rule matched"
	case matched.id != "":
		s += "; rule " + matched.id
	default:
		s += fmt.Sprintf("; rules[%d]", matched.index)
	}
	return s
}

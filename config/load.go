package config

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/template"
	"time"
	"unicode"

	"go.yaml.in/yaml/v3"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/schema"
)

// Defaults applied by Load to settings the file leaves out.
const (
	DefaultListen            = "127.0.0.1:8080"
	DefaultBodyLimit         = ByteSize(1 << 20)
	DefaultTimeout           = Duration(60 * time.Second)
	DefaultTextRetention     = Duration(30 * 24 * time.Hour)
	DefaultArtifactRetention = Duration(365 * 24 * time.Hour)
	DefaultReplayHorizon     = Duration(90 * 24 * time.Hour)
	DefaultConcurrency       = 8
	DefaultJobTimeout        = Duration(2 * time.Minute)
	DefaultRescueAfter       = Duration(5 * time.Minute)
	DefaultMaxAttempts       = 5
	DefaultPollInterval      = Duration(200 * time.Millisecond)
	DefaultAssembleEvery     = Duration(5 * time.Second)
)

// Processor kinds.
const (
	KindRules              = "rules"
	KindOpenAI             = "openai"
	KindAnthropic          = "anthropic"
	KindGemini             = "gemini"
	KindInfrai             = "infrai"
	KindAzureContentSafety = "azure-content-safety"
)

// ProcessorKinds lists every processor kind.
var ProcessorKinds = []string{KindRules, KindOpenAI, KindAnthropic, KindGemini, KindInfrai, KindAzureContentSafety}

// Error is every problem Load found in a config file. Its message lists one
// "path: reason" line per problem and never holds a secret's value.
type Error struct {
	File     string // the config file, as given to Load or made absolute
	Problems []Problem
}

// Error lists every problem, one per line, with its line in the file where
// known: "sources[0].identiy: unknown key (line 12)".
func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "config %s: %d %s", e.File, len(e.Problems), plural(len(e.Problems), "problem", "problems"))
	for _, p := range e.Problems {
		b.WriteString("\n  ")
		b.WriteString(p.String())
		if p.Line > 0 {
			fmt.Fprintf(&b, " (line %d)", p.Line)
		}
	}
	return b.String()
}

// Problem is one thing wrong with a config file.
type Problem struct {
	// Path is the key path, such as "sources[0].identity"; empty when the
	// problem concerns the file as a whole.
	Path   string
	Reason string
	// Line is the 1-based line the problem was found at, 0 when unknown.
	Line int
}

// String returns "path: reason".
func (p Problem) String() string {
	if p.Path == "" {
		return p.Reason
	}
	return p.Path + ": " + p.Reason
}

// Load reads, validates and completes the config file at path. getenv reads
// the environment variables the file names (nil means os.Getenv); tests pass
// a map lookup. Relative paths in the file resolve against its folder.
//
// Any problem makes Load return a nil *Config and an *Error listing every
// problem found.
func Load(path string, getenv func(string) string) (*Config, error) {
	return load(path, getenv, false)
}

// LoadWithoutSecrets is Load for commands that never serve, verify a
// signature or call a processor (inspect, check, migrate, resume): an unset
// secret variable is not a problem, and its value stays empty. Everything
// else is validated as by Load.
func LoadWithoutSecrets(path string, getenv func(string) string) (*Config, error) {
	return load(path, getenv, true)
}

func load(path string, getenv func(string) string, secretsOptional bool) (*Config, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, &Error{File: path, Problems: []Problem{{Reason: "cannot resolve the file's path: " + err.Error()}}}
	}
	data, err := os.ReadFile(abs)
	if err != nil {
		return nil, &Error{File: abs, Problems: []Problem{{Reason: "cannot read the file: " + pathErrReason(err)}}}
	}
	l := &loader{
		dir:             filepath.Dir(abs),
		getenv:          getenv,
		secretsOptional: secretsOptional,
		lines:           map[string]int{},
		null:            map[string]bool{},
	}
	cfg := l.decode(data)
	if cfg != nil {
		cfg.Path = abs
		l.validate(cfg)
	}
	if probs := l.result(); len(probs) > 0 {
		return nil, &Error{File: abs, Problems: probs}
	}
	return cfg, nil
}

// loader collects problems while decoding and validating one file.
type loader struct {
	dir    string
	getenv func(string) string
	// secretsOptional: an unset secret variable is not a problem.
	secretsOptional bool
	// lines maps the path of every key and list item present in the file to
	// its line, so problems found after decoding can still name a line.
	lines map[string]int
	// null holds the paths whose key is present with no value; they count
	// as absent, so defaults apply.
	null map[string]bool
	// shape holds problems found while matching the YAML tree to the
	// config's shape: unknown keys, wrong types.
	shape []Problem
	// typeBad holds the paths whose value had the wrong type; later checks
	// on them would only repeat the problem.
	typeBad []string
	checks  []Problem
}

// present reports whether the file sets path to a value.
func (l *loader) present(path string) bool {
	_, ok := l.lines[path]
	return ok && !l.null[path]
}

// problem records a validation problem at path, with the line of path or of
// its nearest present parent.
func (l *loader) problem(path, format string, args ...any) {
	line := 0
	for p := path; p != ""; p = parent(p) {
		if n, ok := l.lines[p]; ok {
			line = n
			break
		}
	}
	l.checks = append(l.checks, Problem{Path: path, Reason: fmt.Sprintf(format, args...), Line: line})
}

func (l *loader) shapeProblem(path string, line int, reason string) {
	l.shape = append(l.shape, Problem{Path: path, Reason: reason, Line: line})
}

// result returns every problem in file order. Validation problems on a value
// whose type was already wrong are dropped.
func (l *loader) result() []Problem {
	probs := slices.Clone(l.shape)
	for _, p := range l.checks {
		if !slices.ContainsFunc(l.typeBad, func(bad string) bool { return under(p.Path, bad) }) {
			probs = append(probs, p)
		}
	}
	sort.SliceStable(probs, func(i, j int) bool { return probs[i].Line < probs[j].Line })
	return probs
}

func parent(path string) string {
	i := strings.LastIndexAny(path, ".[")
	if i < 0 {
		return ""
	}
	return path[:i]
}

// under reports whether path is at or below base.
func under(path, base string) bool {
	return path == base || strings.HasPrefix(path, base+".") || strings.HasPrefix(path, base+"[")
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func index(path string, i int) string { return fmt.Sprintf("%s[%d]", path, i) }

// decode parses data and matches it to the Config shape. It returns nil only
// when the file is not YAML at all.
func (l *loader) decode(data []byte) *Config {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	err := dec.Decode(&doc)
	if err != nil && !errors.Is(err, io.EOF) {
		l.shapeProblem("", 0, "not valid YAML: "+strings.TrimPrefix(err.Error(), "yaml: "))
		return nil
	}
	if err == nil {
		var extra yaml.Node
		if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
			l.shapeProblem("", 0, "holds more than one YAML document")
		}
	}
	cfg := &Config{}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if root.Kind == 0 {
		return cfg // an empty file: every required key will be reported missing
	}
	l.check("", root, reflect.TypeFor[Config]())
	if err := root.Decode(cfg); err != nil && len(l.shape) == 0 {
		// check should have caught every decoding problem; if it missed one,
		// report it rather than run on a half-decoded config.
		l.shapeProblem("", 0, "cannot decode: "+err.Error())
	}
	return cfg
}

var unmarshalerType = reflect.TypeFor[yaml.Unmarshaler]()

// check matches node n against type t, recording unknown keys, duplicate
// keys and values of the wrong type with their key path. It removes unknown
// and duplicate keys from n so that decoding afterwards sees a clean tree.
func (l *loader) check(path string, n *yaml.Node, t reflect.Type) {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) || isScalar(t.Kind()) {
		if n.Kind != yaml.ScalarNode {
			l.typeProblem(path, n.Line, "must be a single value, not a list or mapping")
			return
		}
		if reason := scalarProblem(n, t); reason != "" {
			l.typeProblem(path, n.Line, reason)
		}
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			l.typeProblem(path, n.Line, "must be a mapping")
			return
		}
		l.checkMapping(path, n, fieldTypes(t), map[string]bool{})
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			l.typeProblem(path, n.Line, "must be a list")
			return
		}
		for i, item := range n.Content {
			p := index(path, i)
			l.lines[p] = item.Line
			l.check(p, item, t.Elem())
		}
	default:
		l.typeProblem(path, n.Line, "has an unsupported type")
	}
}

func (l *loader) checkMapping(path string, n *yaml.Node, fields map[string]reflect.Type, seen map[string]bool) {
	kept := n.Content[:0:0]
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Tag == "!!merge" {
			// "<<: *anchor" merges another mapping's keys into this one.
			for v.Kind == yaml.AliasNode && v.Alias != nil {
				v = v.Alias
			}
			if v.Kind == yaml.MappingNode {
				l.checkMapping(path, v, fields, seen)
			}
			kept = append(kept, k, n.Content[i+1])
			continue
		}
		p := join(path, k.Value)
		ft, known := fields[k.Value]
		switch {
		case k.Kind != yaml.ScalarNode:
			l.shapeProblem(path, k.Line, "keys must be plain names")
		case !known:
			l.shapeProblem(p, k.Line, "unknown key")
		case seen[k.Value]:
			l.shapeProblem(p, k.Line, fmt.Sprintf("duplicate key (first at line %d)", l.lines[p]))
		default:
			seen[k.Value] = true
			l.lines[p] = k.Line
			l.null[p] = v.Kind == yaml.ScalarNode && v.Tag == "!!null"
			l.check(p, v, ft)
			kept = append(kept, k, n.Content[i+1])
		}
	}
	n.Content = kept
}

func (l *loader) typeProblem(path string, line int, reason string) {
	l.shapeProblem(path, line, reason)
	l.typeBad = append(l.typeBad, path)
}

func isScalar(k reflect.Kind) bool {
	switch k {
	case reflect.String, reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		return true
	}
	return false
}

// scalarProblem decodes scalar n into a new value of type t and says what
// is wrong, or returns "".
func scalarProblem(n *yaml.Node, t reflect.Type) string {
	if !reflect.PointerTo(t).Implements(unmarshalerType) {
		switch t.Kind() {
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			// yaml.v3 would silently truncate 1.5 to 1.
			if n.Tag != "!!int" {
				return "must be a whole number"
			}
		case reflect.Bool:
			if n.Tag != "!!bool" {
				return "must be true or false"
			}
		}
	}
	err := n.Decode(reflect.New(t).Interface())
	if err == nil {
		return ""
	}
	var te *yaml.TypeError
	if errors.As(err, &te) && len(te.Errors) > 0 && reflect.PointerTo(t).Implements(unmarshalerType) {
		return te.Errors[0]
	}
	switch t.Kind() {
	case reflect.String:
		return "must be text"
	case reflect.Bool:
		return "must be true or false"
	case reflect.Float32, reflect.Float64:
		return "must be a number"
	default:
		return "must be a whole number in range"
	}
}

// fieldTypes maps the yaml key of every decoded field of struct type t to
// the field's type.
func fieldTypes(t reflect.Type) map[string]reflect.Type {
	m := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		m[name] = f.Type
	}
	return m
}

// ---- validation ----

var idPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*$`)

func (l *loader) validate(c *Config) {
	l.validateDatabase(c)
	l.validateListen(c)
	if !l.present("body_limit") {
		c.BodyLimit = DefaultBodyLimit
	} else if c.BodyLimit <= 0 {
		l.problem("body_limit", "must be greater than 0")
	}

	tenants := checkIDs(l, "tenants", c.Tenants, func(t *Tenant) string { return t.ID })
	profiles := checkIDs(l, "profiles", c.Profiles, func(p *Profile) string { return p.ID })
	processors := checkIDs(l, "processors", c.Processors, func(p *Processor) string { return p.ID })
	policies := checkIDs(l, "policies", c.Policies, func(p *Policy) string { return p.ID })
	checkIDs(l, "sources", c.Sources, func(s *Source) string { return s.ID })

	l.validateTenants(c)
	for i := range c.Sources {
		l.validateSource(index("sources", i), &c.Sources[i], tenants, profiles, policies)
	}
	for i := range c.Profiles {
		l.validateProfile(index("profiles", i), &c.Profiles[i])
	}
	for i := range c.Processors {
		l.validateProcessor(index("processors", i), &c.Processors[i])
	}
	for i := range c.Policies {
		l.validatePolicy(index("policies", i), &c.Policies[i], processors, c)
	}
	l.validateWorkers(&c.Workers)
}

// checkIDs checks that every item of a list has a well-formed id unique in
// the list, and returns the set of ids.
func checkIDs[T any](l *loader, list string, items []T, id func(*T) string) map[string]bool {
	first := map[string]string{}
	for i := range items {
		p := join(index(list, i), "id")
		v := id(&items[i])
		switch {
		case v == "":
			l.problem(p, "required")
		case !idPattern.MatchString(v):
			l.problem(p, "must be lowercase letters, digits, '.', '_' or '-', starting with a letter or digit")
		case first[v] != "":
			l.problem(p, "duplicate id %q (also at %s)", v, first[v])
		default:
			first[v] = index(list, i)
		}
	}
	ids := make(map[string]bool, len(first))
	for v := range first {
		ids[v] = true
	}
	return ids
}

func (l *loader) validateDatabase(c *Config) {
	const p = "database"
	db := c.Database
	switch {
	case db == "":
		l.problem(p, "required (sqlite://PATH or postgres://…)")
	case strings.HasPrefix(db, "sqlite://"):
		rest, query, hasQuery := strings.Cut(strings.TrimPrefix(db, "sqlite://"), "?")
		if rest == "" {
			l.problem(p, "sqlite:// needs a file path")
			return
		}
		if !filepath.IsAbs(rest) {
			rest = filepath.Join(l.dir, rest)
		}
		c.Database = "sqlite://" + filepath.ToSlash(rest)
		if hasQuery {
			c.Database += "?" + query
		}
	case strings.HasPrefix(db, "postgres://"), strings.HasPrefix(db, "postgresql://"):
		// The URL may hold a password: say what is wrong without quoting it.
		u, err := url.Parse(db)
		if err != nil || u.Host == "" {
			l.problem(p, "not a valid postgres:// URL")
		}
	default:
		l.problem(p, "must start with sqlite://, postgres:// or postgresql://")
	}
}

func (l *loader) validateListen(c *Config) {
	if c.Listen == "" {
		c.Listen = DefaultListen
		return
	}
	_, port, err := net.SplitHostPort(c.Listen)
	if err != nil {
		l.problem("listen", "must be host:port, such as 127.0.0.1:8080")
		return
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		l.problem("listen", "port must be a number from 0 to 65535")
	}
}

// env reads the variable named at path. It reports a missing or empty
// variable by name, never by value.
func (l *loader) env(path, name string) string {
	if name == "" {
		l.problem(path, "required: the name of an environment variable")
		return ""
	}
	v := strings.TrimSpace(l.getenv(name))
	if v == "" && !l.secretsOptional {
		l.problem(path, "environment variable %s is not set or is empty", name)
	}
	return v
}

func (l *loader) validateTenants(c *Config) {
	firstToken := map[string]string{} // token value → path of its first use
	for i := range c.Tenants {
		t := &c.Tenants[i]
		tp := index("tenants", i)
		names := map[string]bool{}
		for j := range t.Tokens {
			tok := &t.Tokens[j]
			p := index(join(tp, "tokens"), j)
			switch {
			case tok.Name == "":
				l.problem(join(p, "name"), "required")
			case names[tok.Name]:
				l.problem(join(p, "name"), "duplicate token name %q in this tenant", tok.Name)
			}
			names[tok.Name] = true
			if tok.Role == "" {
				l.problem(join(p, "role"), "required (%s)", joinStrings(stet.Roles, " | "))
			} else if !slices.Contains(stet.Roles, tok.Role) {
				l.problem(join(p, "role"), "must be one of %s", joinStrings(stet.Roles, " | "))
			}
			tok.Value = l.env(join(p, "token_env"), tok.TokenEnv)
			if tok.Value == "" {
				continue
			}
			if prev, dup := firstToken[tok.Value]; dup {
				l.problem(join(p, "token_env"), "environment variable %s holds the same token as %s: every token must be unique", tok.TokenEnv, prev)
				continue
			}
			firstToken[tok.Value] = p
		}
	}
}

func (l *loader) validateSource(p string, s *Source, tenants, profiles, policies map[string]bool) {
	ref := func(key, v, list string, ids map[string]bool) {
		switch {
		case v == "":
			l.problem(join(p, key), "required")
		case !ids[v]:
			l.problem(join(p, key), "%s %q is not defined under %s", key, v, list)
		}
	}
	ref("tenant", s.Tenant, "tenants", tenants)
	ref("profile", s.Profile, "profiles", profiles)
	ref("policy", s.Policy, "policies", policies)

	if s.Identity == "" {
		s.Identity = stet.IdentityExternalID
	} else if !slices.Contains(stet.IdentityModes, s.Identity) {
		l.problem(join(p, "identity"), "must be one of %s", joinStrings(stet.IdentityModes, " | "))
	}
	if s.Revisions == "" {
		s.Revisions = stet.RevisionsExplicit
	} else if !slices.Contains(stet.RevisionModes, s.Revisions) {
		l.problem(join(p, "revisions"), "must be one of %s", joinStrings(stet.RevisionModes, " | "))
	}
	if s.Mode == "" {
		s.Mode = stet.ModeSync
	} else if !slices.Contains(stet.DispatchModes, s.Mode) {
		l.problem(join(p, "mode"), "must be one of %s", joinStrings(stet.DispatchModes, " | "))
	}

	sp := join(p, "secret_env")
	v := l.env(sp, s.SecretEnv)
	if v == "" {
		return
	}
	parts := strings.FieldsFunc(v, func(r rune) bool { return r == ',' || unicode.IsSpace(r) })
	for i, secret := range parts {
		key, ok := strings.CutPrefix(secret, "whsec_")
		if !ok {
			l.problem(sp, "secret %d of %d in %s does not start with whsec_", i+1, len(parts), s.SecretEnv)
			continue
		}
		if b, err := base64.StdEncoding.DecodeString(key); err != nil || len(b) == 0 {
			l.problem(sp, "secret %d of %d in %s is not whsec_ followed by base64", i+1, len(parts), s.SecretEnv)
			continue
		}
		s.Secrets = append(s.Secrets, secret)
	}
}

func (l *loader) validateProfile(p string, pr *Profile) {
	if pr.Version < 1 {
		l.problem(join(p, "version"), "must be 1 or more")
	}
	if doc, ok := l.readFile(join(p, "schema"), &pr.Schema); ok {
		s, err := schema.Compile(pr.ID, doc)
		if err != nil {
			l.problem(join(p, "schema"), "%s: %v", pr.Schema, err)
		} else {
			pr.SchemaJSON = s.JSON()
			pr.Validator = s
		}
	}
	if text, ok := l.readFile(join(p, "prompt"), &pr.Prompt); ok {
		if _, err := template.New(pr.ID).Parse(string(text)); err != nil {
			l.problem(join(p, "prompt"), "%s: not a valid Go text/template: %v", pr.Prompt, err)
		} else {
			pr.PromptText = string(text)
		}
	}
}

// readFile resolves *rel against the config's folder, stores the absolute
// path back, and reads the file.
func (l *loader) readFile(path string, rel *string) ([]byte, bool) {
	if *rel == "" {
		l.problem(path, "required: a file path")
		return nil, false
	}
	*rel = l.resolve(*rel)
	b, err := os.ReadFile(*rel)
	if err != nil {
		l.problem(path, "cannot read %s: %s", *rel, pathErrReason(err))
		return nil, false
	}
	return b, true
}

func (l *loader) resolve(p string) string {
	if filepath.IsAbs(p) {
		return filepath.Clean(p)
	}
	return filepath.Join(l.dir, p)
}

func pathErrReason(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

func (l *loader) validateProcessor(p string, pr *Processor) {
	kp := join(p, "kind")
	switch {
	case pr.Kind == "":
		l.problem(kp, "required (%s)", strings.Join(ProcessorKinds, " | "))
	case !slices.Contains(ProcessorKinds, pr.Kind):
		l.problem(kp, "must be one of %s", strings.Join(ProcessorKinds, " | "))
	case pr.Kind == KindRules:
		l.readFile(join(p, "rules"), &pr.Rules)
		for _, kv := range [][2]string{{"base_url", pr.BaseURL}, {"api_key_env", pr.APIKeyEnv}, {"model", pr.Model}} {
			if kv[1] != "" {
				l.problem(join(p, kv[0]), "not used by kind rules")
			}
		}
	default:
		if pr.Rules != "" {
			l.problem(join(p, "rules"), "used only by kind rules")
		}
		if pr.Kind == KindAzureContentSafety {
			l.readFile(join(p, "mapping"), &pr.Mapping)
		} else if pr.Mapping != "" {
			l.problem(join(p, "mapping"), "used only by kind %s", KindAzureContentSafety)
		}
		if pr.APIVersion != "" && pr.Kind != KindAzureContentSafety && pr.Kind != KindOpenAI {
			l.problem(join(p, "api_version"), "used only by kinds %s (Azure OpenAI) and %s", KindOpenAI, KindAzureContentSafety)
		}
		if pr.Kind != KindAnthropic && (pr.ToolUse || pr.MaxTokens != 0) {
			key := "tool_use"
			if pr.MaxTokens != 0 {
				key = "max_tokens"
			}
			l.problem(join(p, key), "used only by kind %s", KindAnthropic)
		}
		if pr.MaxTokens < 0 {
			l.problem(join(p, "max_tokens"), "must not be negative")
		}
		pr.APIKey = l.env(join(p, "api_key_env"), pr.APIKeyEnv)
		switch pr.Kind {
		case KindOpenAI, KindAnthropic, KindGemini:
			if pr.Model == "" {
				l.problem(join(p, "model"), "required for kind %s", pr.Kind)
			}
		case KindAzureContentSafety:
			if pr.BaseURL == "" {
				l.problem(join(p, "base_url"), "required for kind %s: the resource's endpoint", pr.Kind)
			}
		}
		if pr.BaseURL != "" {
			u, err := url.Parse(pr.BaseURL)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				l.problem(join(p, "base_url"), "must be an http:// or https:// URL")
			}
		}
	}

	if pr.Region == "" {
		l.problem(join(p, "region"), "required: where this processor handles text (\"local\" for on-host)")
	}
	rp := join(p, "retention")
	switch r, err := parseRetention(pr.Retention); {
	case pr.Retention == "":
		l.problem(rp, "required: \"none\" or a duration such as 30d")
	case err != nil:
		l.problem(rp, "must be \"none\" or a duration such as 30d")
	case pr.ZeroRetention && r > 0:
		l.problem(join(p, "zero_data_retention"), "contradicts retention %s", pr.Retention)
	}
	for _, lim := range []struct {
		key string
		v   int
	}{{"rpm", pr.Limits.RPM}, {"tpm", pr.Limits.TPM}, {"concurrency", pr.Limits.Concurrency}} {
		if lim.v < 0 {
			l.problem(join(join(p, "limits"), lim.key), "must not be negative")
		}
	}
	bp := join(p, "batch")
	if l.present(bp) {
		switch pr.Kind {
		case KindOpenAI, KindAnthropic, KindGemini, KindInfrai:
		default:
			l.problem(bp, "used only by kinds %s, %s, %s and %s (processors with a batch API)", KindOpenAI, KindAnthropic, KindGemini, KindInfrai)
		}
		b := pr.Batch
		if b.MaxItems < 0 {
			l.problem(join(bp, "max_items"), "must not be negative")
		}
		for _, d := range []struct {
			key string
			v   Duration
		}{{"max_wait", b.MaxWait}, {"poll_first", b.PollFirst}, {"poll_max", b.PollMax}} {
			if d.v < 0 {
				l.problem(join(bp, d.key), "must not be negative")
			}
		}
		if b.OnExpired != "" && !slices.Contains(stet.DispatchModes, b.OnExpired) {
			l.problem(join(bp, "on_expired"), "must be one of sync | batch")
		}
	}
	tp := join(p, "timeout")
	if !l.present(tp) {
		pr.Timeout = DefaultTimeout
	} else if pr.Timeout <= 0 {
		l.problem(tp, "must be greater than 0")
	}
}

// parseRetention reads a processor's retention: "none" (or "0") is zero.
func parseRetention(s string) (time.Duration, error) {
	if s == "none" {
		return 0, nil
	}
	d, err := ParseDuration(s)
	return time.Duration(d), err
}

func (l *loader) validatePolicy(p string, po *Policy, processors map[string]bool, c *Config) {
	pp := join(p, "processors")
	if len(po.Processors) == 0 {
		l.problem(pp, "required: at least one processor")
	}
	for i, id := range po.Processors {
		ip := index(pp, i)
		switch {
		case !processors[id]:
			l.problem(ip, "processor %q is not defined under processors", id)
		case slices.Index(po.Processors, id) < i:
			l.problem(ip, "processor %q is listed twice", id)
		case len(po.Regions) > 0 && !slices.Contains(po.Regions, c.Processor(id).Region):
			l.problem(ip, "processor %q handles text in region %q, which this policy's regions do not allow", id, c.Processor(id).Region)
		}
	}
	for i, class := range po.Minimize {
		ip := index(join(p, "minimize"), i)
		switch {
		case !slices.Contains(stet.IdentifierClasses, class):
			l.problem(ip, "must be one of %s", joinStrings(stet.IdentifierClasses, ", "))
		case class == stet.IdentName && len(po.Names) == 0:
			l.problem(ip, "name needs a names list to minimize against")
		}
	}
	if !l.present(join(join(p, "retention"), "text")) {
		po.Retention.Text = DefaultTextRetention
	}
	if !l.present(join(join(p, "retention"), "artifacts")) {
		po.Retention.Artifacts = DefaultArtifactRetention
	}
	if !l.present(join(p, "replay_horizon")) {
		po.ReplayHorizon = DefaultReplayHorizon
	}
}

func (l *loader) validateWorkers(w *Workers) {
	positive := func(key string, v *int, def int) {
		p := join("workers", key)
		if !l.present(p) {
			*v = def
		} else if *v < 1 {
			l.problem(p, "must be 1 or more")
		}
	}
	positive("concurrency", &w.Concurrency, DefaultConcurrency)
	positive("max_attempts", &w.MaxAttempts, DefaultMaxAttempts)
	duration := func(key string, v *Duration, def Duration) {
		p := join("workers", key)
		if !l.present(p) {
			*v = def
		} else if *v <= 0 {
			l.problem(p, "must be greater than 0")
		}
	}
	duration("job_timeout", &w.JobTimeout, DefaultJobTimeout)
	duration("rescue_after", &w.RescueAfter, DefaultRescueAfter)
	duration("poll_interval", &w.PollInterval, DefaultPollInterval)
	duration("assemble_every", &w.AssembleEvery, DefaultAssembleEvery)
	if w.RescueAfter > 0 && w.RescueAfter <= w.JobTimeout {
		l.problem("workers.rescue_after", "must be greater than job_timeout (%s): a live worker's job would be rescued while it still runs", w.JobTimeout)
	}
}

func joinStrings[T ~string](vals []T, sep string) string {
	s := make([]string, len(vals))
	for i, v := range vals {
		s[i] = string(v)
	}
	return strings.Join(s, sep)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// ---- Duration and ByteSize ----

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

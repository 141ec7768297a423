package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"
)

// Defaults applied by Load to settings the file leaves out.
const (
	DefaultListen            = "127.0.0.1:8080"
	DefaultBodyLimit         = ByteSize(1 << 20)
	DefaultAudioBodyLimit    = ByteSize(25 << 20)
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
	DefaultSweepInterval     = Duration(time.Minute)
	DefaultHeartbeat         = Duration(2 * time.Second)
)

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

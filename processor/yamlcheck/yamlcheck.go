// Package yamlcheck reads the hand-written YAML files of stet's local
// processors (a rules file, an Azure Content Safety mapping) strictly:
// one document, mappings with string keys given once and only the known
// ones, scalars of the type asked for, and every error naming the line
// and the key. The files are configuration, so their content may appear
// in errors; it must never be used to read document text or model output.
package yamlcheck

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Document parses data as a single YAML document and returns its root.
func Document(data []byte) (*yaml.Node, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		return nil, errors.New("empty file")
	}
	return doc.Content[0], nil
}

// Top parses data as a single YAML document whose root is a mapping with
// only the known keys (ReadMap's rules) and returns both.
func Top(data []byte, known []string) (*yaml.Node, *Map, error) {
	root, err := Document(data)
	if err != nil {
		return nil, nil, err
	}
	top, err := ReadMap(root, "top level", known)
	if err != nil {
		return nil, nil, err
	}
	return root, top, nil
}

// Items reads n as a list with at least one item and returns the items.
func Items(n *yaml.Node, key string) ([]*yaml.Node, error) {
	if n.Kind != yaml.SequenceNode {
		return nil, fmt.Errorf("line %d: %s: must be a list", n.Line, key)
	}
	if len(n.Content) == 0 {
		return nil, fmt.Errorf("line %d: %s: empty list", n.Line, key)
	}
	return n.Content, nil
}

// Map is a YAML mapping with its keys in file order.
type Map struct{ Pairs []Pair }

// Pair is one key of a Map, its line and its value.
type Pair struct {
	Key   string
	Line  int
	Value *yaml.Node
}

// Get returns the value of key, or nil when the mapping lacks it.
func (m *Map) Get(key string) *yaml.Node {
	for _, p := range m.Pairs {
		if p.Key == key {
			return p.Value
		}
	}
	return nil
}

// Line returns the line of key, or 0 when the mapping lacks it.
func (m *Map) Line(key string) int {
	for _, p := range m.Pairs {
		if p.Key == key {
			return p.Line
		}
	}
	return 0
}

// Missing returns the first of keys the mapping lacks, or "".
func (m *Map) Missing(keys ...string) string {
	for _, k := range keys {
		if m.Get(k) == nil {
			return k
		}
	}
	return ""
}

// ReadMap reads n as a mapping with string keys, none given twice. If
// known is not nil, any other key is an error naming it. what names the
// mapping in errors; "" leaves only the line (a caller whose errors
// already name the place).
func ReadMap(n *yaml.Node, what string, known []string) (*Map, error) {
	at := func(line int) string {
		if what == "" {
			return fmt.Sprintf("line %d: ", line)
		}
		return fmt.Sprintf("line %d: %s: ", line, what)
	}
	if n.Kind != yaml.MappingNode {
		return nil, errors.New(at(n.Line) + "must be a mapping")
	}
	m := &Map{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		if k.Kind != yaml.ScalarNode || k.ShortTag() != "!!str" {
			return nil, errors.New(at(k.Line) + "keys must be strings")
		}
		if known != nil && !slices.Contains(known, k.Value) {
			return nil, fmt.Errorf("%sunknown key %q (known: %s)", at(k.Line), k.Value, strings.Join(known, ", "))
		}
		if m.Get(k.Value) != nil {
			return nil, fmt.Errorf("%skey %q given twice", at(k.Line), k.Value)
		}
		m.Pairs = append(m.Pairs, Pair{Key: k.Value, Line: k.Line, Value: n.Content[i+1]})
	}
	return m, nil
}

// String reads n as a string scalar (not a number, a boolean or null).
func String(n *yaml.Node, key string) (string, error) {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		return "", fmt.Errorf("line %d: %s: must be a string", n.Line, key)
	}
	return n.Value, nil
}

// Int reads n as an integer scalar.
func Int(n *yaml.Node, key string) (int, error) {
	var v int
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" || n.Decode(&v) != nil {
		return 0, fmt.Errorf("line %d: %s: must be an integer", n.Line, key)
	}
	return v, nil
}

// Bool reads n as true or false.
func Bool(n *yaml.Node, key string) (bool, error) {
	var v bool
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" || n.Decode(&v) != nil {
		return false, fmt.Errorf("line %d: %s: must be true or false", n.Line, key)
	}
	return v, nil
}

// Strings reads n as a list of string scalars.
func Strings(n *yaml.Node, key string) ([]string, error) {
	return list(n, key, "must be a list of strings", func(c *yaml.Node, at string) (string, error) { return String(c, at) })
}

// Scalars reads n as a list of scalars other than null, each as written:
// a phrase list may hold 911.
func Scalars(n *yaml.Node, key string) ([]string, error) {
	return list(n, key, "must be a list", func(c *yaml.Node, at string) (string, error) {
		if c.Kind != yaml.ScalarNode || c.ShortTag() == "!!null" {
			return "", fmt.Errorf("line %d: %s: must be a string", c.Line, at)
		}
		return c.Value, nil
	})
}

func list(n *yaml.Node, key, notList string, item func(c *yaml.Node, at string) (string, error)) ([]string, error) {
	if n.Kind != yaml.SequenceNode {
		return nil, fmt.Errorf("line %d: %s: %s", n.Line, key, notList)
	}
	out := make([]string, 0, len(n.Content))
	for i, c := range n.Content {
		s, err := item(c, fmt.Sprintf("%s[%d]", key, i))
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// JSON decodes a YAML value and encodes it as the JSON it will be written
// as. Aliases and mappings with non-string keys are refused.
func JSON(n *yaml.Node, key string) (json.RawMessage, error) {
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

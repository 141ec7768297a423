package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"

	"go.yaml.in/yaml/v3"
)

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
	if t.Kind() == reflect.Pointer { // an optional value: absent or null is nil
		l.check(path, n, t.Elem())
		return
	}
	if t == reflect.TypeFor[Names]() { // a list, or the scalar pending
		switch {
		case n.Kind == yaml.SequenceNode:
			l.check(path, n, reflect.TypeFor[[]string]())
		case n.Kind != yaml.ScalarNode || n.Value != Pending:
			l.typeProblem(path, n.Line, "must be a list of names or pending")
		}
		return
	}
	if t == reflect.TypeFor[Fields]() { // a list, or the scalar "*"
		switch {
		case n.Kind == yaml.SequenceNode:
			l.check(path, n, reflect.TypeFor[[]string]())
		case n.Kind != yaml.ScalarNode || n.Value != "*":
			l.typeProblem(path, n.Line, `must be a list of field names or "*"`)
		}
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
	case reflect.Map:
		if n.Kind != yaml.MappingNode || t.Key().Kind() != reflect.String {
			l.typeProblem(path, n.Line, "must be a mapping")
			return
		}
		seen := map[string]bool{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := join(path, k.Value)
			if k.Kind != yaml.ScalarNode || seen[k.Value] {
				l.typeProblem(p, k.Line, "keys must be plain, distinct names")
				continue
			}
			seen[k.Value] = true
			l.lines[p] = k.Line
			l.check(p, v, t.Elem())
		}
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
		if name := yamlKey(t.Field(i)); name != "" {
			m[name] = t.Field(i).Type
		}
	}
	return m
}

// yamlKey returns the key field f decodes from, or "" if it decodes none.
func yamlKey(f reflect.StructField) string {
	if !f.IsExported() {
		return ""
	}
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	switch name {
	case "-":
		return ""
	case "":
		return strings.ToLower(f.Name)
	}
	return name
}

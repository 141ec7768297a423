package config

import (
	"slices"

	"go.yaml.in/yaml/v3"
)

// Pending is the answer a processor's boundary declaration may take while
// nobody knows it yet (retention, region, subprocessors…): the processor
// is then never sent text, and discovery shows which answers are pending.
const Pending = "pending"

// Answer is a yes/no boundary declaration that may still be pending:
// zero_data_retention: true | false | pending.
type Answer struct {
	Value   bool
	Pending bool
}

// UnmarshalYAML reads true, false or pending.
func (a *Answer) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode && n.Value == Pending {
		*a = Answer{Pending: true}
		return nil
	}
	var b bool
	if n.Kind != yaml.ScalarNode || n.Decode(&b) != nil {
		return &yaml.TypeError{Errors: []string{"must be true, false or pending"}}
	}
	*a = Answer{Value: b}
	return nil
}

// Names is a list declaration that may still be pending: subprocessors:
// [a, b] | pending.
type Names struct {
	List    []string
	Pending bool
}

// UnmarshalYAML reads a list of names or pending.
func (l *Names) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode && n.Value == Pending {
		*l = Names{Pending: true}
		return nil
	}
	var list []string
	if n.Kind != yaml.SequenceNode || n.Decode(&list) != nil {
		return &yaml.TypeError{Errors: []string{"must be a list of names or pending"}}
	}
	*l = Names{List: list}
	return nil
}

// Deletion answers for a processor how a copy it holds ends: api (the
// provider's delete API), retention (its declared retention), none (it
// keeps none), or pending.
var Deletions = []string{"api", "retention", "none", Pending}

// PendingAnswers names the processor's boundary declarations still
// pending, in the order the config lists them.
func (p *Processor) PendingAnswers() []string {
	var out []string
	for _, a := range []struct {
		key     string
		pending bool
	}{
		{"region", p.Region == Pending},
		{"retention", p.Retention == Pending},
		{"zero_data_retention", p.ZeroRetention.Pending},
		{"subprocessors", p.Subprocessors.Pending},
		{"deletion", p.Deletion == Pending},
	} {
		if a.pending {
			out = append(out, a.key)
		}
	}
	return slices.Clip(out)
}

package azurecs

import (
	"fmt"
	"slices"

	"github.com/stetlabs/stet/processor"
)

// CheckSchema checks the mapping against a profile's JSON Schema: every
// property the defaults or a rule set is declared, every value the mapping
// can write is allowed by that property's type, enum and const (and its
// items' for arrays), every category label is allowed as an item of the
// labels field, the rationale field takes a string, and every required
// property has a default. It is a static check of what the mapping can
// write, not a validator: the pipeline still validates every output.
func (m *Mapping) CheckSchema(schema []byte) error {
	sc, err := processor.NewSchemaCheck(schema)
	if err != nil {
		return err
	}
	for _, f := range m.fields {
		if !sc.Value("defaults."+f.name, f.name, processor.DecodeJSON(f.value)) {
			sc.Addf("defaults.%s: not a property of the schema", f.name)
		}
	}
	if m.labelsField != "" {
		for _, cl := range m.labels {
			sc.Value(fmt.Sprintf("category_labels.%s.label", cl.category), m.labelsField, []any{cl.label})
		}
	}
	if m.rationaleField != "" {
		sample := rationalePrefix + "SelfHarm=6, Hate=4; rules[0]"
		sc.Value(fmt.Sprintf("rationale_field %q", m.rationaleField), m.rationaleField, sample)
	}
	for _, r := range m.rules {
		name := fmt.Sprintf("rules[%d]", r.index)
		if r.id != "" {
			name += " (" + r.id + ")"
		}
		for _, f := range r.set {
			sc.Value(name+".set."+f.name, f.name, processor.DecodeJSON(f.value))
		}
	}
	sc.RequireDefaults(func(name string) bool {
		return slices.ContainsFunc(m.fields, func(f field) bool { return f.name == name })
	})
	return sc.Err("mapping does not fit the schema")
}

package rules

import (
	"fmt"
	"slices"

	"github.com/stetlabs/stet/processor"
)

// checkSchema checks the rules against a profile's JSON Schema: every
// property the defaults or a set name is declared, every value the rules can
// write is allowed by the property's type, enum and const (and its items'
// for arrays), every label is allowed as an item of the labels field, and
// every required property gets a value. It is a static check of what the
// rules file can write, not a full validator: the pipeline still validates
// every output.
func (s *ruleSet) checkSchema(schema []byte) error {
	sc, err := processor.NewSchemaCheck(schema)
	if err != nil {
		return err
	}
	for _, f := range s.fields {
		if _, ok := sc.Properties[f.name]; !ok {
			if f.value != nil {
				sc.Addf("defaults.%s: not a property of the schema", f.name)
			} else if f.name == s.labelsField {
				sc.Addf("labels_field %q: not a property of the schema", f.name)
			} else {
				sc.Addf("rationale_field %q: not a property of the schema", f.name)
			}
			continue
		}
		if f.value != nil {
			sc.Value("defaults."+f.name, f.name, processor.DecodeJSON(f.value))
		}
	}
	if s.labelsField != "" && sc.Value(fmt.Sprintf("labels_field %q", s.labelsField), s.labelsField, []any{}) {
		for _, r := range s.rules {
			sc.Value(fmt.Sprintf("rule %q: label", r.id), s.labelsField, []any{r.label})
		}
	}
	if s.rationaleField != "" {
		sc.Value(fmt.Sprintf("rationale_field %q", s.rationaleField), s.rationaleField, "matched: x")
	}
	for _, r := range s.rules {
		for _, k := range r.setKeys {
			if !sc.Value(fmt.Sprintf("rule %q: set.%s", r.id, k), k, processor.DecodeJSON(r.set[k])) {
				sc.Addf("rule %q: set.%s: not a property of the schema", r.id, k)
			}
		}
	}
	sc.RequireDefaults(func(name string) bool {
		return slices.ContainsFunc(s.fields, func(f field) bool { return f.name == name })
	})
	return sc.Err("rules do not fit the schema")
}

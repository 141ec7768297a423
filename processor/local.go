package processor

import (
	"bytes"
	"encoding/json"
	"sync"

	"github.com/stetlabs/stet"
)

// What the local processors (a rules file, an Azure Content Safety
// mapping) share: they write the record themselves, so they check once per
// schema that what they can write fits it, and they write it as a JSON
// object in their fields' order.

// SchemaFits remembers, per distinct schema (by SHA-256), the result of a
// local processor's check that what it writes fits the schema. It is safe
// for concurrent use; the zero value is ready.
type SchemaFits struct {
	m sync.Map // SHA-256 hex -> fitResult
}

type fitResult struct{ err error }

// Check returns check(schema), run once per distinct schema.
func (f *SchemaFits) Check(schema []byte, check func([]byte) error) error {
	key := stet.SHA256Hex(schema)
	if v, ok := f.m.Load(key); ok {
		return v.(fitResult).err
	}
	err := check(schema)
	f.m.Store(key, fitResult{err: err})
	return err
}

// Len returns how many distinct schemas have been checked.
func (f *SchemaFits) Len() int {
	n := 0
	f.m.Range(func(any, any) bool { n++; return true })
	return n
}

// ObjectJSON writes the JSON object of n fields in order: field(i) is the
// i-th field's name and its value, already JSON.
func ObjectJSON(n int, field func(i int) (name string, value []byte)) []byte {
	var b bytes.Buffer
	b.WriteByte('{')
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		name, value := field(i)
		b.Write(MustJSON(name))
		b.WriteByte(':')
		b.Write(value)
	}
	b.WriteByte('}')
	return b.Bytes()
}

// MustJSON encodes v, which must be a value that cannot fail to encode
// (strings, string slices).
func MustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic("processor: encode: " + err.Error())
	}
	return b
}

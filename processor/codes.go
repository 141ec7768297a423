package processor

import (
	"encoding/json"
	"math"
	"strconv"
)

// SafeCode returns code when it looks like a machine identifier (1 to 64 of
// [A-Za-z0-9_.-]) and "" otherwise. A provider's error code reaches error
// strings and the ledger, so free text that a misbehaving server puts there
// (and which may quote the document) is dropped.
func SafeCode(code string) string {
	if code == "" || len(code) > 64 {
		return ""
	}
	for i := 0; i < len(code); i++ {
		if ch := code[i]; !isNameByte(ch) && ch != '.' {
			return ""
		}
	}
	return code
}

// SchemaName fits name to what providers accept as a schema, tool or file
// name: 1 to 64 of [A-Za-z0-9_-], other bytes replaced by '_', longer names
// cut, an empty name given as "extraction".
func SchemaName(name string) string {
	b := []byte(name)
	for i, ch := range b {
		if !isNameByte(ch) {
			b[i] = '_'
		}
	}
	if len(b) > 64 {
		b = b[:64]
	}
	if len(b) == 0 {
		return "extraction"
	}
	return string(b)
}

func isNameByte(ch byte) bool {
	return ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' || ch == '_' || ch == '-'
}

// ErrorObjectCode returns the machine code of a provider's error object,
// {"code":…,"type":…,"message":…}: code, else type, each either a SafeCode
// string or an integral number below 10^9. It is "" when raw is no such
// object or neither field is a code; the message, free text, is never read.
func ErrorObjectCode(raw json.RawMessage) string {
	var obj struct {
		Code any `json:"code"`
		Type any `json:"type"`
	}
	if len(raw) == 0 || json.Unmarshal(raw, &obj) != nil {
		return ""
	}
	for _, v := range []any{obj.Code, obj.Type} {
		switch v := v.(type) {
		case string:
			if s := SafeCode(v); s != "" {
				return s
			}
		case float64:
			if v == math.Trunc(v) && math.Abs(v) < 1e9 {
				return strconv.FormatFloat(v, 'f', -1, 64)
			}
		}
	}
	return ""
}

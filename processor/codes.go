package processor

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
